//! `POST /inference/v1/generate` in vLLM 0.32's shapes (token ids in, token ids out): JSON,
//! SSE, usage, ids that `/detokenize` reads back, the P/D split, errors.

mod common;

use common::apis::*;
use common::*;
use pdgate_sim::tokenizer;
use serde_json::{json, Value};

fn body(prompt: &[u32], max: u32) -> Value {
    json!({"token_ids": prompt, "sampling_params": {"max_tokens": max, "temperature": 0.0}})
}

#[tokio::test]
async fn full_answer_carries_the_chat_words_as_ids() {
    let w = worker_rev("g-0", "both", "r").await;
    let prompt = tokens(10, 20);
    let r = post_raw(
        &w.url(),
        "/inference/v1/generate",
        &body(&prompt, 4),
        Some("g1"),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let v: Value = serde_json::from_str(&r.text).unwrap();
    let seed = tokenizer::output_seed(&prompt);
    let ids = tokenizer::output_ids(seed, 4);
    let expected = format!(
        concat!(
            r#"{{"request_id":"generate-tokens-g1","model":"pdgate-sim","created":{},"usage":{{"prompt_tokens":20,"#,
            r#""total_tokens":24,"completion_tokens":4,"prompt_tokens_details":{{"cached_tokens":0,"#,
            r#""created_cache_tokens":null,"multimodal_tokens":null}},"completion_tokens_details":null}},"#,
            r#""prompt_logprobs":null,"prompt_token_id_logprobs":null,"prompt_token_ids":null,"#,
            r#""mm_placeholders":null,"metrics":null,"kv_transfer_params":null,"ec_transfer_params":null,"#,
            r#""output_mode":"tokens","choices":[{{"index":0,"finish_reason":"length","stop_reason":null,"#,
            r#""token_ids":{},"routed_experts":null,"sampling_mask":null,"weight_versions":null,"#,
            r#""logprobs":null}}]}}"#
        ),
        v["created"],
        serde_json::to_string(&ids).unwrap()
    );
    assert_eq!(r.text, expected);
    // The ids are the words chat would have written for the same prompt.
    let words = post(&w.url(), "/detokenize", json!({"tokens": ids})).await;
    let chat_text = tokenizer::output_text(seed, 4);
    assert_eq!(words.body["prompt"], chat_text.trim_start());
    let s = w.stats();
    assert_eq!((s.generate, s.completions), (1, 0));
}

#[tokio::test]
async fn stream_sends_one_id_per_chunk_then_usage_then_done() {
    let w = worker_rev("g-0", "both", "r").await;
    let prompt = tokens(1, 40);
    let full = post(&w.url(), "/inference/v1/generate", body(&prompt, 5)).await;
    let mut streamed = body(&prompt, 5);
    streamed["stream"] = json!(true);
    streamed["stream_options"] = json!({"include_usage": true});
    let r = post_raw(&w.url(), "/inference/v1/generate", &streamed, Some("g2")).await;
    assert_eq!(r.headers["content-type"], "text/event-stream");
    let (events, done) = sse_events(&r.text);
    assert!(done, "ends with data: [DONE]");
    assert_eq!(events.len(), 6, "5 token chunks and the usage chunk");
    let ids: Vec<Value> = events[..5]
        .iter()
        .map(|e| {
            assert_eq!(e["request_id"], "generate-tokens-g2");
            assert_eq!(e["usage"], Value::Null);
            e["choices"][0]["token_ids"][0].clone()
        })
        .collect();
    assert_eq!(Value::Array(ids), full.body["choices"][0]["token_ids"]);
    let finish: Vec<&Value> = events[..5]
        .iter()
        .map(|e| &e["choices"][0]["finish_reason"])
        .collect();
    assert_eq!(
        finish,
        [
            &Value::Null,
            &Value::Null,
            &Value::Null,
            &Value::Null,
            &json!("length")
        ]
    );
    let first = r.text.split("\n\n").next().unwrap();
    assert_eq!(
        first,
        format!(
            "data: {{\"request_id\":\"generate-tokens-g2\",\"usage\":null,\"output_mode\":\"tokens\",\"choices\":[{{\"index\":0,\"finish_reason\":null,\"stop_reason\":null,\"token_ids\":[{}],\"routed_experts\":null,\"sampling_mask\":null,\"weight_versions\":null,\"logprobs\":null}}]}}",
            full.body["choices"][0]["token_ids"][0]
        )
    );
    let cached = full.body["usage"]["prompt_tokens_details"]["cached_tokens"].clone();
    assert_eq!(cached, 0);
    assert_eq!(
        events[5],
        json!({"request_id": "generate-tokens-g2", "usage": {"prompt_tokens": 40, "total_tokens": 45,
               "completion_tokens": 5, "prompt_tokens_details": {"cached_tokens": 32}},
               "output_mode": "tokens", "choices": []}),
        "the second request finds two blocks of the first in the prefix cache"
    );
    // Without include_usage: tokens then [DONE].
    streamed["stream_options"] = Value::Null;
    let (events, done) = sse_events(
        &post_stream(&w.url(), "/inference/v1/generate", streamed)
            .await
            .1,
    );
    assert!(done && events.len() == 5);
    assert_eq!(w.stats().generate, 3);
}

#[tokio::test]
async fn a_prefill_leg_hands_its_kv_to_a_decode_leg() {
    let p = worker_rev("prefill-0", "prefill", "r").await;
    let d = worker_rev("decode-0", "decode", "r").await;
    let prompt = tokens(100, 50);
    let (pre, dec) = split(
        &p,
        &d,
        "/inference/v1/generate",
        body(&prompt, 1),
        body(&prompt, 7),
    )
    .await;
    assert_eq!(pre["choices"][0]["token_ids"].as_array().unwrap().len(), 1);
    assert_eq!(dec["choices"][0]["token_ids"].as_array().unwrap().len(), 7);
    assert_eq!(dec["kv_transfer_params"], Value::Null);
    assert_eq!(dec["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
    assert_split_counted(&p, &d, "generate");
    assert_eq!(d.stats().prompt_tokens_external_kv_transfer, 50);
}

#[tokio::test]
async fn bad_bodies_are_400_naming_the_field() {
    let w = worker_rev("g-0", "both", "r").await;
    assert_400_naming(
        &w.url(),
        "/inference/v1/generate",
        vec![
            (json!({"token_ids": [1, 2]}), "sampling_params"),
            (json!({"token_ids": [], "sampling_params": {}}), "token_ids"),
            (
                json!({"token_ids": [-1], "sampling_params": {}}),
                "token_ids",
            ),
            (json!({"sampling_params": {}}), "token_ids"),
            (
                json!({"token_ids": [1], "sampling_params": {"max_tokens": "x"}}),
                "sampling_params.max_tokens",
            ),
            (
                json!({"token_ids": [1], "sampling_params": 3}),
                "sampling_params",
            ),
            (
                json!({"token_ids": [1], "sampling_params": {}, "request_id": 1}),
                "request_id",
            ),
        ],
    )
    .await;
    assert_eq!(w.stats().generate, 0);
}

#[tokio::test]
async fn the_handoff_is_also_read_from_sampling_params_extra_args() {
    // llm-d's coordinator sends generate's KV params in `sampling_params.extra_args` (vLLM
    // reads them there on every version).
    let p = worker_rev("prefill-0", "prefill", "r").await;
    let d = worker_rev("decode-0", "decode", "r").await;
    let prompt = tokens(300, 40);
    let nested = |max: u32, kv: Value| json!({"token_ids": prompt, "sampling_params": {"max_tokens": max, "extra_args": {"kv_transfer_params": kv}}});
    let pre = post(
        &p.url(),
        "/inference/v1/generate",
        nested(1, pdgate_api::KvTransferParams::prefill_request_json()),
    )
    .await;
    assert_eq!(pre.status, 200, "{}", pre.body);
    assert_eq!(
        pre.body["kv_transfer_params"]["remote_engine_id"],
        p.engine_id()
    );
    let dec = post(
        &d.url(),
        "/inference/v1/generate",
        nested(5, decode_params(&pre.body)),
    )
    .await;
    assert_eq!(dec.status, 200, "{}", dec.body);
    assert_eq!(
        dec.body["choices"][0]["token_ids"]
            .as_array()
            .unwrap()
            .len(),
        5
    );
    assert_split_counted(&p, &d, "generate");
    assert_eq!(d.stats().prompt_tokens_external_kv_transfer, 40);
}
