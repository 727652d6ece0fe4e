//! `POST /v1/embeddings` in vLLM 0.32's shape: one prefill per input on the engine, no
//! decode, deterministic normalised vectors, batches, errors.

mod common;

use common::apis::*;
use common::*;
use pdgate_sim::tokenizer;
use serde_json::{json, Value};

fn vector(v: &Value) -> Vec<f64> {
    v["embedding"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect()
}

#[tokio::test]
async fn one_input_answers_vllms_shape_and_runs_a_prefill_only() {
    let w = worker_rev("e-0", "both", "r").await;
    let r = post_raw(
        &w.url(),
        "/v1/embeddings",
        &json!({"input": "embed these five words"}),
        Some("e1"),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let v: Value = serde_json::from_str(&r.text).unwrap();
    // The vector's own text (a parsed float prints back with other last digits).
    let start = r.text.find(r#""embedding":"#).unwrap() + r#""embedding":"#.len();
    let vector_text = &r.text[start..start + r.text[start..].find(']').unwrap() + 1];
    assert_eq!(
        r.text,
        format!(
            r#"{{"id":"embd-e1","object":"list","created":{},"model":"pdgate-sim","data":[{{"index":0,"object":"embedding","embedding":{}}}],"usage":{{"prompt_tokens":4,"total_tokens":4,"completion_tokens":0,"prompt_tokens_details":null,"completion_tokens_details":null}}}}"#,
            v["created"], vector_text
        )
    );
    let e = vector(&v["data"][0]);
    assert_eq!(e.len(), 16);
    let norm: f64 = e.iter().map(|x| x * x).sum::<f64>().sqrt();
    assert!((norm - 1.0).abs() < 1e-5, "L2-normalised: {norm}");
    let s = w.stats();
    assert_eq!(
        (s.embeddings, s.prompt_tokens, s.generation_tokens),
        (1, 4, 0),
        "a prefill, no decode"
    );
    assert_eq!(s.prefix_cache_queries, 4);
}

#[tokio::test]
async fn a_batch_answers_one_entry_per_input_and_vectors_are_deterministic() {
    let w = worker_rev("e-0", "both", "r").await;
    let other = worker_rev("e-1", "both", "r").await;
    let batch =
        json!({"input": ["first text here", "second", "first text here"], "model": "pdgate-sim"});
    let r = post(&w.url(), "/v1/embeddings", batch.clone()).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let data = r.body["data"].as_array().unwrap();
    assert_eq!(data.len(), 3);
    for (i, d) in data.iter().enumerate() {
        assert_eq!(
            (d["index"].clone(), d["object"].clone()),
            (json!(i), json!("embedding"))
        );
    }
    assert_eq!(
        vector(&data[0]),
        vector(&data[2]),
        "same input, same vector"
    );
    assert_ne!(vector(&data[0]), vector(&data[1]));
    assert_eq!(r.body["usage"]["prompt_tokens"], 7, "3 + 1 + 3 tokens");
    assert_eq!(r.body["usage"]["total_tokens"], 7);
    assert_eq!(w.stats().embeddings, 1, "one request, whatever its batch");
    // Another worker, and the same input as token ids, give the same vector.
    let ids = tokenizer::tokenize("first text here");
    let again = post(&other.url(), "/v1/embeddings", json!({"input": [ids]})).await;
    assert_eq!(vector(&again.body["data"][0]), vector(&data[0]));
}

#[tokio::test]
async fn bad_bodies_are_400_naming_the_field() {
    let w = worker_rev("e-0", "both", "r").await;
    assert_400_naming(
        &w.url(),
        "/v1/embeddings",
        vec![
            (json!({}), "input"),
            (json!({"input": []}), "input"),
            (json!({"input": 5}), "input"),
            (
                json!({"input": "a", "encoding_format": "base64"}),
                "encoding_format",
            ),
            (json!({"input": "a", "request_id": 3}), "request_id"),
        ],
    )
    .await;
    let r = post(
        &w.url(),
        "/v1/embeddings",
        json!({"input": "a", "model": "x"}),
    )
    .await;
    assert_error(&r, 404, "The model `x` does not exist.");
    // `stream` is not read: embeddings always answer JSON.
    let r = post(
        &w.url(),
        "/v1/embeddings",
        json!({"input": "a b", "stream": true}),
    )
    .await;
    assert_eq!(
        (r.status, r.body["usage"]["prompt_tokens"].clone()),
        (200, json!(2))
    );
}
