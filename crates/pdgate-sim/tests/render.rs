//! The render endpoints, `/reset_prefix_cache` and `/kv_event_sources` over real HTTP.

mod common;

use common::*;
use pdgate_sim::tokenizer::tokenize;
use pdgate_sim::WorkerSpec;
use serde_json::json;

#[tokio::test]
async fn completions_render_answers_a_list_of_vllm_generate_requests() {
    let w = worker(WorkerSpec::new("agg-0", "both"), fast()).await;
    let r = post_with(
        &w.url(),
        "/v1/completions/render",
        json!({"model": "pdgate-sim", "prompt": "the quick brown fox", "max_tokens": 7,
               "temperature": 0.5, "seed": 3}),
        &[("x-request-id", "req-1")],
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        r.body,
        json!([{
            "request_id": "cmpl-req-1",
            "token_ids": tokenize("the quick brown fox"),
            "features": null,
            "sampling_params": {"n": 1, "temperature": 0.5, "top_p": 1.0, "seed": 3, "max_tokens": 7},
            "model": "pdgate-sim",
            "stream": false,
            "stream_options": null,
            "cache_salt": null,
            "priority": 0,
            "kv_transfer_params": null,
        }])
    );
    // Token ids are taken as they are; max_tokens defaults to what max_model_len leaves.
    let r = post(
        &w.url(),
        "/v1/completions/render",
        json!({"model": "pdgate-sim", "prompt": tokens(5, 3), "stream": true,
               "stream_options": {"include_usage": true}}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body[0]["token_ids"], json!([5, 6, 7]));
    assert_eq!(r.body[0]["sampling_params"]["max_tokens"], 131072 - 3);
    assert_eq!(r.body[0]["stream_options"], json!({"include_usage": true}));
    // Nothing ran: no request reached the engine.
    let s = w.stats();
    assert_eq!((s.completions, s.prefix_cache_queries), (0, 0));
}

#[tokio::test]
async fn chat_render_applies_the_simulators_chat_rule_and_matches_what_the_engine_runs() {
    let w = worker(WorkerSpec::new("agg-0", "both"), fast()).await;
    let messages = json!([{"role": "system", "content": "be brief"},
                          {"role": "user", "content": [{"type": "text", "text": "hello there"}]}]);
    let r = post(
        &w.url(),
        "/v1/chat/completions/render",
        json!({"model": "pdgate-sim", "messages": messages}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let ids = r.body["token_ids"].as_array().unwrap().clone();
    assert_eq!(
        r.body["token_ids"],
        json!(tokenize("system: be brief\nuser: hello there\n"))
    );
    assert!(r.body["request_id"]
        .as_str()
        .unwrap()
        .starts_with("chatcmpl-"));
    assert_eq!(r.body["model"], "pdgate-sim");
    // The chat request itself runs exactly that many prompt tokens.
    let run = post(
        &w.url(),
        "/v1/chat/completions",
        json!({"model": "pdgate-sim", "messages": messages, "max_tokens": 1}),
    )
    .await;
    assert_eq!(run.body["usage"]["prompt_tokens"], ids.len());
}

#[tokio::test]
async fn render_errors_are_vllms() {
    let w = worker(WorkerSpec::new("agg-0", "both"), fast()).await;
    let r = post(
        &w.url(),
        "/v1/chat/completions/render",
        json!({"model": "other", "messages": [{"role": "user", "content": "hi"}]}),
    )
    .await;
    assert_error(&r, 404, "The model `other` does not exist.");
    let r = post(
        &w.url(),
        "/v1/completions/render",
        json!({"model": "pdgate-sim"}),
    )
    .await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(
        r.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("prompt"),
        "{}",
        r.body
    );
    let r = post(
        &w.url(),
        "/v1/completions/render",
        json!({"model": "pdgate-sim", "prompt": ""}),
    )
    .await;
    assert_error(&r, 400, "No token_ids rendered");
}

#[tokio::test]
async fn reset_prefix_cache_forgets_every_block() {
    let w = worker(WorkerSpec::new("agg-0", "both"), fast()).await;
    let body = json!({"model": "pdgate-sim", "prompt": tokens(1, 40), "max_tokens": 1});
    post(&w.url(), "/v1/completions", body.clone()).await;
    let cached = |r: &Resp| r.body["usage"]["prompt_tokens_details"]["cached_tokens"].clone();
    assert_eq!(
        cached(&post(&w.url(), "/v1/completions", body.clone()).await),
        32
    );
    let r = reqwest::Client::new()
        .post(format!("{}/reset_prefix_cache", w.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.text().await.unwrap(), "");
    assert_eq!(cached(&post(&w.url(), "/v1/completions", body).await), 0);
    // KV events are off: the discovery list is empty.
    assert_eq!(
        get_json(&format!("{}/kv_event_sources", w.url())).await,
        json!([])
    );
}
