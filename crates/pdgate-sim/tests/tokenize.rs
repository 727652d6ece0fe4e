//! `/tokenize` and `/detokenize` over real HTTP, in vLLM's shapes.

mod common;

use common::*;
use pdgate_sim::tokenizer::{tokenize, VOCAB_SIZE};
use pdgate_sim::WorkerSpec;
use serde_json::json;

#[tokio::test]
async fn tokenize_answers_vllm_shapes_and_detokenize_gives_the_words_back() {
    let w = worker(WorkerSpec::new("agg-0", "both"), fast()).await;
    let ids = tokenize("alpha beta gamma");
    let r = post(
        &w.url(),
        "/tokenize",
        json!({"model": "pdgate-sim", "prompt": "alpha beta gamma"}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let max = r.body["max_model_len"].clone();
    assert_eq!(
        r.body,
        json!({"count": 3, "max_model_len": max, "tokens": ids, "token_strs": null})
    );
    assert!(max.as_u64().unwrap() > 0);
    // Chat messages are flattened as on /v1/chat/completions; token strings on request.
    let r = post(
        &w.url(),
        "/tokenize",
        json!({"messages": [{"role": "user", "content": "fox jumps"}], "return_token_strs": true}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["count"], r.body["tokens"].as_array().unwrap().len());
    assert!(r.body["token_strs"]
        .as_array()
        .unwrap()
        .iter()
        .any(|s| s == "fox"));
    // Round trip: words seen by /tokenize come back; an unseen id reads <tok_ID>.
    let unseen = (0..VOCAB_SIZE)
        .find(|t| !ids.contains(t) && pdgate_sim::tokenizer::word_of(*t).starts_with("<tok_"))
        .unwrap();
    let mut tokens = ids.clone();
    tokens.push(unseen);
    let r = post(
        &w.url(),
        "/detokenize",
        json!({"model": "pdgate-sim", "tokens": tokens}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        r.body,
        json!({"prompt": format!("alpha beta gamma <tok_{unseen}>")})
    );
    // Errors: another model 404; an id outside the vocabulary, a bad body 400.
    let r = post(
        &w.url(),
        "/tokenize",
        json!({"model": "other", "prompt": "x"}),
    )
    .await;
    assert_eq!(r.status, 404);
    let r = post(&w.url(), "/detokenize", json!({"tokens": [VOCAB_SIZE]})).await;
    assert_eq!(r.status, 400);
    assert!(
        r.body.to_string().contains("out of vocabulary"),
        "{}",
        r.body
    );
    let r = post(&w.url(), "/tokenize", json!({"prompt": 5})).await;
    assert_eq!(r.status, 400);
    let r = post(&w.url(), "/tokenize", json!({})).await;
    assert_eq!(r.status, 400);
}
