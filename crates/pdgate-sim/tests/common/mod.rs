//! Helpers shared by the integration tests: workers on 127.0.0.1:0 and a small HTTP client.
#![allow(dead_code)]

pub mod epd;

use pdgate_sim::{spawn_worker, SimConfig, WorkerHandle, WorkerSpec};
use reqwest::header::HeaderMap;
use serde_json::Value;

/// A worker on an ephemeral port.
pub async fn worker(spec: WorkerSpec, cfg: SimConfig) -> WorkerHandle {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    spawn_worker(spec, cfg, l).await.unwrap()
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
