//! `POST /v1/responses` in vLLM 0.32's shapes (OpenAI Responses): JSON, SSE with sequence
//! numbers, usage, the P/D split, errors.

mod common;

use common::apis::*;
use common::*;
use pdgate_sim::tokenizer;
use serde_json::{json, Value};

fn body(input: &str, max: u32) -> Value {
    json!({"input": input, "instructions": "answer", "max_output_tokens": max})
}

fn prompt_tokens(input: &str) -> Vec<u32> {
    tokenizer::tokenize(&format!("system: answer\nuser: {input}\n"))
}

/// The keys of vLLM 0.32's `ResponsesResponse`, in order.
const KEYS: [&str; 32] = [
    "id",
    "created_at",
    "incomplete_details",
    "instructions",
    "metadata",
    "model",
    "object",
    "output",
    "parallel_tool_calls",
    "temperature",
    "tool_choice",
    "tools",
    "top_p",
    "background",
    "max_output_tokens",
    "max_tool_calls",
    "previous_response_id",
    "prompt",
    "reasoning",
    "service_tier",
    "status",
    "text",
    "top_logprobs",
    "truncation",
    "usage",
    "user",
    "presence_penalty",
    "frequency_penalty",
    "kv_transfer_params",
    "ec_transfer_params",
    "input_messages",
    "output_messages",
];

/// The top-level keys of a JSON object text, in order.
fn keys_in_order(text: &str) -> Vec<String> {
    let o = pdgate_api::RawObject::parse(text.to_string().into()).unwrap();
    o.keys().map(str::to_string).collect()
}

#[tokio::test]
async fn full_answer_has_vllms_fields_in_order() {
    let w = worker_rev("r-0", "both", "r").await;
    let r = post_raw(
        &w.url(),
        "/v1/responses",
        &body("hello responses", 3),
        Some("abc"),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(keys_in_order(&r.text), KEYS);
    let v: Value = serde_json::from_str(&r.text).unwrap();
    let prompt = prompt_tokens("hello responses").len();
    let text = tokenizer::output_text(tokenizer::output_seed(&prompt_tokens("hello responses")), 3);
    assert_eq!(v["id"], "resp_abc");
    assert_eq!(v["object"], "response");
    assert_eq!(v["model"], "pdgate-sim");
    assert_eq!(v["status"], "incomplete", "stopped at max_output_tokens");
    assert_eq!(
        v["incomplete_details"],
        json!({"reason": "max_output_tokens"})
    );
    assert_eq!(v["instructions"], "answer");
    assert_eq!(v["max_output_tokens"], 3);
    assert_eq!(
        (v["temperature"].clone(), v["top_p"].clone()),
        (json!(1.0), json!(1.0))
    );
    assert_eq!(
        (v["tool_choice"].clone(), v["tools"].clone()),
        (json!("none"), json!([]))
    );
    assert_eq!(v["kv_transfer_params"], Value::Null);
    let item = &v["output"][0];
    assert!(item["id"].as_str().unwrap().starts_with("msg_"));
    assert_eq!(
        item["content"],
        json!([{"annotations": [], "text": text, "type": "output_text", "logprobs": null}])
    );
    assert_eq!(
        (item["role"].clone(), item["status"].clone()),
        (json!("assistant"), json!("completed"))
    );
    assert_eq!(
        v["usage"],
        json!({"input_tokens": prompt, "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0,
               "input_tokens_per_turn": [], "cached_tokens_per_turn": []},
               "output_tokens": 3, "output_tokens_details": {"reasoning_tokens": 0, "tool_output_tokens": 0,
               "output_tokens_per_turn": [], "tool_output_tokens_per_turn": []},
               "total_tokens": prompt + 3})
    );
    // The body's request_id is the id, as vLLM uses it.
    let mut named = body("hello responses", 2);
    named["request_id"] = json!("resp_mine");
    assert_eq!(
        post(&w.url(), "/v1/responses", named).await.body["id"],
        "resp_mine"
    );
    assert_eq!(w.stats().responses, 2);
}

#[tokio::test]
async fn stream_events_are_numbered_and_reassemble_the_full_text() {
    let w = worker_rev("r-0", "both", "r").await;
    let full = post(&w.url(), "/v1/responses", body("stream this please", 4)).await;
    let mut streamed = body("stream this please", 4);
    streamed["stream"] = json!(true);
    let r = post_raw(&w.url(), "/v1/responses", &streamed, Some("s1")).await;
    assert_eq!(r.headers["content-type"], "text/event-stream");
    let events = named_events(&r.text);
    let mut expected = vec![
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ];
    expected.extend(["response.output_text.delta"; 4]);
    expected.extend([
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]);
    assert_eq!(names(&events), expected);
    for (i, (name, data)) in events.iter().enumerate() {
        assert_eq!(data["type"], name.as_str());
        assert_eq!(data["sequence_number"], i, "{name}");
    }
    let created = &events[0].1["response"];
    assert_eq!(
        (created["status"].clone(), created["usage"].clone()),
        (json!("in_progress"), Value::Null)
    );
    assert_eq!(created["id"], "resp_s1");
    let deltas: String = events
        .iter()
        .filter(|(n, _)| n == "response.output_text.delta")
        .map(|(_, d)| d["delta"].as_str().unwrap().to_string())
        .collect();
    let full_text = full.body["output"][0]["content"][0]["text"]
        .as_str()
        .unwrap();
    assert_eq!(deltas, full_text);
    assert_eq!(events[8].1["text"], full_text);
    let item_id = &events[2].1["item"]["id"];
    assert!(events[2..11]
        .iter()
        .all(|(_, d)| d.get("item_id").unwrap_or(&d["item"]["id"]) == item_id));
    let done = &events[11].1["response"];
    assert_eq!(done["status"], "incomplete");
    assert_eq!(done["output"][0], events[10].1["item"]);
    assert_eq!(done["usage"]["output_tokens"], 4);
    // Byte for byte, a delta as vLLM's pydantic dump writes it.
    let third_block = r.text.split("\n\n").nth(4).unwrap();
    assert_eq!(
        third_block,
        format!(
            "event: response.output_text.delta\ndata: {{\"content_index\":0,\"delta\":{},\"item_id\":{},\"logprobs\":[],\"output_index\":0,\"sequence_number\":4,\"type\":\"response.output_text.delta\"}}",
            events[4].1["delta"], item_id
        )
    );
}

#[tokio::test]
async fn a_prefill_leg_hands_its_kv_to_a_decode_leg() {
    let p = worker_rev("prefill-0", "prefill", "r").await;
    let d = worker_rev("decode-0", "decode", "r").await;
    let (pre, dec) = split(
        &p,
        &d,
        "/v1/responses",
        body("split me", 1),
        body("split me", 5),
    )
    .await;
    assert_eq!(pre["max_output_tokens"], 1);
    assert_eq!(pre["usage"]["output_tokens"], 1);
    assert_eq!(dec["usage"]["output_tokens"], 5);
    assert_eq!(dec["kv_transfer_params"], Value::Null);
    assert_split_counted(&p, &d, "responses");
    assert_eq!((p.stats().responses, d.stats().responses), (1, 1));
}

#[tokio::test]
async fn bad_bodies_are_400_naming_the_field() {
    let w = worker_rev("r-0", "both", "r").await;
    assert_400_naming(
        &w.url(),
        "/v1/responses",
        vec![
            (json!({"max_output_tokens": 3}), "input"),
            (json!({"input": 7}), "input"),
            (
                json!({"input": "a", "max_output_tokens": -1}),
                "max_output_tokens",
            ),
            (json!({"input": "a", "temperature": "hot"}), "temperature"),
            (json!({"input": "a", "request_id": 5}), "request_id"),
            (
                json!({"input": "a", "kv_transfer_params": 5}),
                "kv_transfer_params",
            ),
        ],
    )
    .await;
    let r = post(
        &w.url(),
        "/v1/responses",
        json!({"input": "a", "model": "nope"}),
    )
    .await;
    assert_error(&r, 404, "The model `nope` does not exist.");
    assert_eq!(w.stats().responses, 0);
}
