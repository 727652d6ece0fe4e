//! Helpers shared by the integration tests: workers on 127.0.0.1:0, a small HTTP client, the
//! P/D relay of `kv_transfer_params`, and waits and assertions on counters and metrics.
#![allow(dead_code)]

pub mod apis;
pub mod epd;

use pdgate_sim::{spawn_worker, SimConfig, WorkerHandle, WorkerSpec};
use reqwest::header::HeaderMap;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::time::Duration;

/// A worker on an ephemeral port.
pub async fn worker(spec: WorkerSpec, cfg: SimConfig) -> WorkerHandle {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    spawn_worker(spec, cfg, l).await.unwrap()
}

/// A worker with fast settings, of `role` and `revision`, named `name`.
pub async fn worker_rev(name: &str, role: &str, revision: &str) -> WorkerHandle {
    worker(WorkerSpec::new(name, role).with_revision(revision), fast()).await
}

/// Engine settings that run fast.
pub fn fast() -> SimConfig {
    SimConfig {
        speedup: 1000.0,
        ..SimConfig::default()
    }
}

/// A JSON response.
pub struct Resp {
    pub status: u16,
    pub headers: HeaderMap,
    pub body: Value,
}

/// POSTs `body` as JSON to `url` + `path`.
pub async fn post(url: &str, path: &str, body: Value) -> Resp {
    post_with(url, path, body, &[]).await
}

/// POSTs with extra headers.
pub async fn post_with(url: &str, path: &str, body: Value, headers: &[(&str, &str)]) -> Resp {
    let mut req = reqwest::Client::new()
        .post(format!("{url}{path}"))
        .json(&body);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let r = req.send().await.unwrap();
    let status = r.status().as_u16();
    let headers = r.headers().clone();
    let text = r.text().await.unwrap();
    let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
    Resp {
        status,
        headers,
        body,
    }
}

/// Asserts that `r` is an error answer with `status` and `message`.
pub fn assert_error(r: &Resp, status: u16, message: &str) {
    let got = (r.status, r.body["error"]["message"].as_str());
    assert_eq!(got, (status, Some(message)), "{}", r.body);
}

/// POSTs a streaming request; returns the status and the raw body text.
pub async fn post_stream(url: &str, path: &str, body: Value) -> (u16, String) {
    let r = reqwest::Client::new()
        .post(format!("{url}{path}"))
        .json(&body)
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

/// The JSON payloads of an SSE body (without `[DONE]`), and whether `[DONE]` ended it.
pub fn sse_events(text: &str) -> (Vec<Value>, bool) {
    let mut events = Vec::new();
    let mut done = false;
    for block in text.split("\n\n").filter(|b| !b.is_empty()) {
        let data = block
            .strip_prefix("data: ")
            .expect("every event is `data: ...`");
        if data == "[DONE]" {
            done = true;
        } else {
            assert!(!done, "event after [DONE]");
            events.push(serde_json::from_str(data).unwrap());
        }
    }
    (events, done)
}

/// `n` distinct token ids starting at `start`.
pub fn tokens(start: u32, n: usize) -> Vec<u32> {
    (start..start + n as u32).collect()
}

/// GETs `url` and parses its JSON body.
pub async fn get_json(url: &str) -> Value {
    reqwest::get(url).await.unwrap().json().await.unwrap()
}

/// The worker's `/metrics` text.
pub async fn metrics(w: &WorkerHandle) -> String {
    reqwest::get(format!("{}/metrics", w.url()))
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// Asserts that every one of `lines` is a whole line of the metrics text `m`.
pub fn assert_metric_lines(m: &str, lines: &[String]) {
    for line in lines {
        assert!(m.lines().any(|x| x == line), "missing {line:?} in\n{m}");
    }
}

/// Asserts the count of every reason of `expected` in `counts` (rejections by reason).
pub fn assert_counts(counts: &BTreeMap<String, u64>, expected: &[(&str, u64)]) {
    for (k, n) in expected {
        assert_eq!(counts.get(*k), Some(n), "{k} in {counts:?}");
    }
}

/// Polls `done` every 10 ms; fails with `what()` when it is still false after 5 s.
pub async fn wait_until(mut done: impl FnMut() -> bool, what: impl Fn() -> String) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while !done() {
        assert!(tokio::time::Instant::now() < deadline, "{}", what());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Decode-leg params: the prefill's answer with do_remote_prefill set (the router's relay).
pub fn decode_params(prefill_body: &Value) -> Value {
    let mut kv = prefill_body["kv_transfer_params"].clone();
    kv["do_remote_prefill"] = json!(true);
    kv["do_remote_decode"] = json!(false);
    kv
}
