//! The other APIs end to end: the real router in front of simulator engines that speak them.
//! A streamed `/v1/messages` and `/v1/responses`, split into prefill and decode (NIXL), reach
//! the client byte for byte as the decode engine sent them (compared with the engine's own
//! record of its answer); token-id `/inference/v1/generate` splits the same way; embeddings,
//! tokenize and detokenize are answered by an engine. Every claim about what ran where is
//! read from the engines' counters.

use crate::support;

use pdgate_scheduler::DEFAULT_CONFIG_YAML;
use pdgate_sim::WorkerHandle;
use serde_json::{json, Value};
use std::time::Duration;
use support::{endpoints, sim_config, sim_workers, spec};

/// A prefill and a decode simulator that record their answers, and a router over them.
async fn pd_fleet() -> (Vec<WorkerHandle>, pdgate_server::ServerHandle) {
    let mut cfg = sim_config(100.0);
    cfg.record_responses = 16;
    let workers = sim_workers(
        vec![spec("p0", "prefill", None), spec("d0", "decode", None)],
        cfg,
    )
    .await;
    let r = support::router(endpoints(&workers), DEFAULT_CONFIG_YAML).await;
    pdgate_scenario::fleet::wait_for_models(&r).await;
    (workers, r)
}

/// POSTs `body` to `{router}{path}` with `x-request-id: rid`; returns the status, the
/// served-by headers `[mode, prefill, decode]` and the body's bytes.
async fn post(
    r: &pdgate_server::ServerHandle,
    path: &str,
    rid: &str,
    body: &Value,
) -> (u16, [String; 3], Vec<u8>) {
    let a = support::post_raw(&support::url(r), path, rid, body).await;
    (a.status, a.served(), a.bytes)
}

/// What engine `w` recorded having sent for request `rid` (polled: a stream is recorded when
/// it ends).
async fn recorded(w: &WorkerHandle, rid: &str) -> Vec<u8> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let resp = reqwest::get(format!("{}/debug/responses/{rid}", w.url()))
            .await
            .unwrap();
        if resp.status() == 200 {
            return resp.bytes().await.unwrap().to_vec();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} recorded nothing for {rid}",
            w.name()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `(event name, data)` of each SSE event of `text`.
fn events(text: &str) -> Vec<(String, Value)> {
    text.split("\n\n")
        .filter(|e| !e.is_empty())
        .map(|e| {
            let mut name = String::new();
            let mut data = Value::Null;
            for line in e.lines() {
                if let Some(n) = line.strip_prefix("event: ") {
                    name = n.to_string();
                }
                if let Some(d) = line.strip_prefix("data: ") {
                    data = serde_json::from_str(d).unwrap_or(Value::String(d.into()));
                }
            }
            (name, data)
        })
        .collect()
}

fn long_text() -> String {
    (0..300).map(|i| format!("word{i} ")).collect()
}

fn split_legs(w: &[WorkerHandle], api: &str) -> (u64, u64) {
    let get = |m: &std::collections::BTreeMap<String, u64>| m.get(api).copied().unwrap_or(0);
    (
        get(&w[0].stats().prefill_legs_by_api),
        get(&w[1].stats().remote_decode_legs_by_api),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_message_splits_and_reaches_the_client_byte_for_byte() {
    let (w, r) = pd_fleet().await;
    let body = json!({"model": "pdgate-sim", "max_tokens": 6, "stream": true, "system": "Be brief.",
        "messages": [{"role": "user", "content": long_text()}]});
    let (status, served, bytes) = post(&r, "/v1/messages", "msg-1", &body).await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&bytes));
    assert_eq!(served, ["split", "p0", "d0"]);
    assert_eq!(bytes, recorded(&w[1], "msg-1").await, "byte for byte");
    let text = String::from_utf8(bytes).unwrap();
    let names: Vec<String> = events(&text).into_iter().map(|(n, _)| n).collect();
    let mut want = vec!["message_start", "content_block_start"];
    want.extend(["content_block_delta"; 6]);
    want.extend(["content_block_stop", "message_delta", "message_stop"]);
    assert_eq!(names, want);
    assert!(!text.contains("[DONE]") && !text.contains("kv_transfer_params"));
    let ev = events(&text);
    assert_eq!(ev[0].1["message"]["id"], "chatcmpl-msg-1");
    assert_eq!(ev[9].1["usage"]["output_tokens"], 6);
    assert_eq!(
        split_legs(&w, "messages"),
        (1, 1),
        "prefill leg on p0, KV pulled on d0"
    );
    assert_eq!(w[1].stats().messages, 1);
    assert_eq!(r.state.in_flight_total(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_response_splits_and_reaches_the_client_byte_for_byte() {
    let (w, r) = pd_fleet().await;
    let body = json!({"model": "pdgate-sim", "max_output_tokens": 5, "stream": true,
        "instructions": "Be brief.", "input": long_text()});
    let (status, served, bytes) = post(&r, "/v1/responses", "resp-1", &body).await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&bytes));
    assert_eq!(served, ["split", "p0", "d0"]);
    assert_eq!(bytes, recorded(&w[1], "resp-1").await, "byte for byte");
    let text = String::from_utf8(bytes).unwrap();
    let ev = events(&text);
    assert_eq!(ev.first().unwrap().0, "response.created");
    let deltas = ev
        .iter()
        .filter(|(n, _)| n == "response.output_text.delta")
        .count();
    assert_eq!(deltas, 5);
    let seq: Vec<u64> = ev
        .iter()
        .map(|(_, d)| d["sequence_number"].as_u64().unwrap())
        .collect();
    assert_eq!(seq, (0..ev.len() as u64).collect::<Vec<_>>());
    // vLLM's response object names `kv_transfer_params` (null in a stream).
    assert!(!text.contains("[DONE]") && !text.contains("\"kv_transfer_params\":{"));
    assert_eq!(split_legs(&w, "responses"), (1, 1));

    // Not streamed: the decode engine's JSON, without its router-owned fields.
    let body = json!({"model": "pdgate-sim", "max_output_tokens": 3, "input": long_text()});
    let (status, served, bytes) = post(&r, "/v1/responses", "resp-2", &body).await;
    assert_eq!((status, served[0].as_str()), (200, "split"));
    let v: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(v["object"], "response");
    assert_eq!(v["usage"]["output_tokens"], 3);
    assert!(
        v.get("kv_transfer_params").is_none_or(Value::is_null),
        "{v}"
    );
    assert_eq!(split_legs(&w, "responses"), (2, 2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_id_generate_splits_into_prefill_and_decode() {
    let (w, r) = pd_fleet().await;
    let ids: Vec<u32> = (1000..1400).collect();
    let body = json!({"token_ids": ids, "sampling_params": {"max_tokens": 4, "temperature": 0}});
    let (status, served, bytes) = post(&r, "/inference/v1/generate", "gen-1", &body).await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&bytes));
    assert_eq!(served, ["split", "p0", "d0"]);
    let v: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(v["choices"][0]["token_ids"].as_array().unwrap().len(), 4);
    assert_eq!(v["usage"]["prompt_tokens"], 400);
    assert!(
        v.get("kv_transfer_params").is_none_or(Value::is_null),
        "{v}"
    );
    assert_eq!(split_legs(&w, "generate"), (1, 1));

    // Another prompt: d0 now holds the first one's KV, so it would not split again.
    let other: Vec<u32> = (5000..5400).collect();
    let streamed = json!({"token_ids": other, "stream": true,
        "sampling_params": {"max_tokens": 4, "temperature": 0}});
    let (status, served, bytes) = post(&r, "/inference/v1/generate", "gen-2", &streamed).await;
    assert_eq!((status, served[0].as_str()), (200, "split"));
    assert_eq!(bytes, recorded(&w[1], "gen-2").await, "byte for byte");
    let text = String::from_utf8(bytes).unwrap();
    assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
    let tokens: Vec<Value> = events(&text)
        .iter()
        .filter_map(|(_, d)| d["choices"][0]["token_ids"].as_array().cloned())
        .flatten()
        .collect();
    assert_eq!(tokens.len(), 4);
    assert_eq!(split_legs(&w, "generate"), (2, 2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embeddings_tokenize_and_detokenize_are_answered_by_an_engine() {
    let (w, r) = pd_fleet().await;
    let body = json!({"model": "pdgate-sim", "input": ["alpha beta", "gamma"]});
    let (status, served, bytes) = post(&r, "/v1/embeddings", "emb-1", &body).await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&bytes));
    assert_eq!(served, ["aggregated", "d0", "d0"]);
    let v: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(v["object"], "list");
    assert_eq!(v["data"].as_array().unwrap().len(), 2);
    assert_eq!(w[1].stats().embeddings, 1);
    assert_eq!(w[0].stats().embeddings, 0);

    let (status, _, bytes) = post(
        &r,
        "/tokenize",
        "tok-1",
        &json!({"prompt": "alpha beta gamma"}),
    )
    .await;
    assert_eq!(status, 200);
    let t: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(t["count"], 3);
    let (status, _, bytes) =
        post(&r, "/detokenize", "tok-2", &json!({"tokens": t["tokens"]})).await;
    assert_eq!(status, 200);
    let d: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(d["prompt"], "alpha beta gamma");
    let m = support::metrics(&support::url(&r)).await;
    for api in ["embeddings", "tokenize", "detokenize"] {
        assert_eq!(
            support::metric(
                &m,
                &format!("pdgate_requests_total{{api=\"{api}\",status=\"200\"}}")
            ),
            1,
            "{api}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_coordinator_of_per_role_routers_splits_messages_too() {
    let (w, prefill_router) = pd_fleet().await;
    let decode_router = support::router(endpoints(&w), DEFAULT_CONFIG_YAML).await;
    pdgate_scenario::fleet::wait_for_models(&decode_router).await;
    let coord = support::coordinator(pdgate_server::app::PhaseRouters::new(
        &prefill_router.addr.to_string(),
        &decode_router.addr.to_string(),
        false,
    ))
    .await;
    let body = json!({"model": "pdgate-sim", "max_tokens": 3, "stream": true,
        "messages": [{"role": "user", "content": long_text()}]});
    let (status, _, bytes) = post(&coord, "/v1/messages", "coord-1", &body).await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&bytes));
    assert_eq!(bytes, recorded(&w[1], "coord-1").await, "byte for byte");
    assert_eq!(split_legs(&w, "messages"), (1, 1));
}
