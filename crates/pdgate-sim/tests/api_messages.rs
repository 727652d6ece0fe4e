//! `POST /v1/messages` in vLLM 0.32's shapes (Anthropic Messages): JSON, SSE, usage, the P/D
//! split, errors.

mod common;

use common::apis::*;
use common::*;
use pdgate_sim::tokenizer;
use serde_json::{json, Value};

fn body(text: &str, max_tokens: u32) -> Value {
    json!({"model": "pdgate-sim", "max_tokens": max_tokens, "system": "be brief",
           "messages": [{"role": "user", "content": text}]})
}

/// The sim's prompt text of `body(text, _)` (system line, then the user line).
fn prompt_tokens(text: &str) -> Vec<u32> {
    tokenizer::tokenize(&format!("system: be brief\nuser: {text}\n"))
}

#[tokio::test]
async fn full_answer_has_exactly_vllms_fields() {
    let w = worker_rev("m-0", "both", "r").await;
    let r = post_raw(
        &w.url(),
        "/v1/messages",
        &body("hello there model", 4),
        Some("req-1"),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.headers["content-type"], "application/json");
    let text = tokenizer::output_text(
        tokenizer::output_seed(&prompt_tokens("hello there model")),
        4,
    );
    let prompt = prompt_tokens("hello there model").len();
    // Byte for byte: keys in pydantic's order, nulls left out.
    let expected = format!(
        r#"{{"id":"chatcmpl-req-1","type":"message","role":"assistant","content":[{{"type":"text","text":{}}}],"model":"pdgate-sim","stop_reason":"max_tokens","usage":{{"input_tokens":{prompt},"output_tokens":4,"cache_read_input_tokens":0}}}}"#,
        serde_json::to_string(&text).unwrap()
    );
    assert_eq!(r.text, expected);
    let s = w.stats();
    assert_eq!((s.messages, s.chat_completions, s.completions), (1, 0, 0));
}

#[tokio::test]
async fn stream_events_reassemble_the_full_text() {
    let w = worker_rev("m-0", "both", "r").await;
    let full = post(&w.url(), "/v1/messages", body("tell me a story", 5)).await;
    let mut streamed = body("tell me a story", 5);
    streamed["stream"] = json!(true);
    let r = post_raw(&w.url(), "/v1/messages", &streamed, Some("s-1")).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.headers["content-type"], "text/event-stream");
    let events = named_events(&r.text);
    let mut expected = vec!["message_start", "content_block_start"];
    expected.extend(["content_block_delta"; 5]);
    expected.extend(["content_block_stop", "message_delta", "message_stop"]);
    assert_eq!(names(&events), expected);
    for (name, data) in &events {
        assert_eq!(data["type"], name.as_str(), "each event's type is its name");
    }
    let text: String = events
        .iter()
        .filter(|(n, _)| n == "content_block_delta")
        .map(|(_, d)| d["delta"]["text"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(text, full.body["content"][0]["text"].as_str().unwrap());
    let prompt = prompt_tokens("tell me a story").len();
    // The first events byte for byte (key order as vLLM's pydantic dump).
    let blocks: Vec<&str> = r.text.split("\n\n").collect();
    assert_eq!(
        blocks[0],
        format!(
            r#"event: message_start
data: {{"type":"message_start","message":{{"id":"chatcmpl-s-1","type":"message","role":"assistant","content":[],"model":"pdgate-sim","stop_reason":null,"stop_sequence":null,"usage":{{"input_tokens":{prompt},"output_tokens":0}}}}}}"#
        )
    );
    assert_eq!(
        blocks[1],
        "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"content_block\":{\"type\":\"text\",\"text\":\"\"},\"index\":0}"
    );
    assert!(blocks[2].starts_with(
        "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"type\":\"text_delta\",\"text\":"
    ));
    // The second request hits the prefix cache: message_delta reports it as vLLM does.
    let delta = &events[events.len() - 2].1;
    assert_eq!(
        delta["delta"],
        json!({"stop_reason": "max_tokens", "stop_sequence": null})
    );
    assert_eq!(delta["usage"]["output_tokens"], 5);
    let cached = delta["usage"]["cache_read_input_tokens"].as_u64().unwrap() as usize;
    assert_eq!(delta["usage"]["input_tokens"], json!(prompt - cached));
    assert_eq!(events.last().unwrap().1, json!({"type": "message_stop"}));
    assert_eq!(w.stats().messages, 2);
}

#[tokio::test]
async fn a_prefill_leg_hands_its_kv_to_a_decode_leg() {
    let p = worker_rev("prefill-0", "prefill", "r").await;
    let d = worker_rev("decode-0", "decode", "r").await;
    let (pre, dec) = split(
        &p,
        &d,
        "/v1/messages",
        body("split me", 1),
        body("split me", 6),
    )
    .await;
    assert_eq!(pre["usage"]["output_tokens"], 1);
    assert_eq!(pre["kv_transfer_params"]["do_remote_prefill"], true);
    assert_eq!(dec["usage"]["output_tokens"], 6);
    assert!(
        dec.get("kv_transfer_params").is_none(),
        "a decode leg answers none"
    );
    assert_split_counted(&p, &d, "messages");
    assert_eq!((p.stats().messages, d.stats().messages), (1, 1));
}

#[tokio::test]
async fn bad_bodies_are_400_naming_the_field_and_other_errors_are_anthropic_shaped() {
    let w = worker_rev("m-0", "both", "r").await;
    assert_400_naming(
        &w.url(),
        "/v1/messages",
        vec![
        (json!({"model": "pdgate-sim", "max_tokens": 3}), "messages"),
        (
            json!({"model": "pdgate-sim", "max_tokens": "x", "messages": [{"role": "user", "content": "a"}]}),
            "max_tokens",
        ),
        (
            json!({"max_tokens": 3, "messages": [{"role": "user", "content": "a"}]}),
            "model",
        ),
        (
            json!({"model": "pdgate-sim", "messages": [{"role": "user", "content": 5}]}),
            "messages.content",
        ),
    ],
    )
    .await;
    let mut other = body("hi", 2);
    other["model"] = json!("other");
    let r = post(&w.url(), "/v1/messages", other).await;
    assert_eq!(r.status, 404);
    assert_eq!(
        r.body,
        json!({"type": "error", "error": {"type": "not_found_error", "message": "The model `other` does not exist."}})
    );
    assert_eq!(w.stats().messages, 0);
}
