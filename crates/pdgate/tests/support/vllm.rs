//! A fake vLLM engine with a configurable `/metrics` (text, delay) and `/v1/models`
//! ([`VllmEngine`]), plain completions against a router ([`complete`]), and an async bounded
//! wait ([`wait_for`]): the state and operability tests' part of the shared support module.

use axum::routing::{get, post};
use serde_json::{json, Value};
use std::time::Duration;

/// The model every fake engine and simulator worker serves (the simulator's default).
pub const MODEL: &str = "pdgate-sim";

/// What a fake engine answers.
#[derive(Clone)]
pub struct VllmEngine {
    /// `/metrics` body.
    pub metrics: String,
    /// Time before `/metrics` answers.
    pub metrics_delay: Duration,
    /// `/v1/models` `data` array.
    pub models: Value,
}

impl Default for VllmEngine {
    fn default() -> Self {
        VllmEngine {
            metrics: "vllm:num_requests_running{engine=\"0\",model_name=\"m\"} 0\n".into(),
            metrics_delay: Duration::ZERO,
            models: json!([{"id": MODEL, "object": "model"}]),
        }
    }
}

/// A completion body for every `/v1/completions`, with `kv_transfer_params` so that it can
/// serve as the prefill leg of a split request too.
fn completion() -> Value {
    json!({"id": "cmpl-1", "object": "text_completion", "model": MODEL,
        "choices": [{"index": 0, "text": "x", "finish_reason": "length"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        "kv_transfer_params": {"do_remote_prefill": true, "do_remote_decode": false,
            "remote_engine_id": "e", "remote_block_ids": [1], "remote_host": "127.0.0.1",
            "remote_port": 1, "remote_request_id": "r"}})
}

impl VllmEngine {
    /// Serves the engine on 127.0.0.1:0; returns its `host:port`.
    pub async fn start(self) -> String {
        let (metrics, delay) = (self.metrics.clone(), self.metrics_delay);
        let models = json!({"object": "list", "data": self.models});
        let app = axum::Router::new()
            .route(
                "/v1/completions",
                post(|| async { axum::Json(completion()) }),
            )
            .route("/v1/models", get(move || async move { axum::Json(models) }))
            .route(
                "/metrics",
                get(move || async move {
                    tokio::time::sleep(delay).await;
                    metrics
                }),
            );
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap().to_string();
        tokio::spawn(async move { axum::serve(l, app).await.unwrap() });
        addr
    }
}

/// A `host:port` on which nothing listens (bound, then closed).
pub async fn dead_address() -> String {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    l.local_addr().unwrap().to_string()
}

/// An endpoint `name` at `address` with role label `role`.
pub fn endpoint(name: &str, address: &str, role: &str) -> pdgate_scheduler::Endpoint {
    let labels = [(pdgate_api::labels::ROLE.to_string(), role.to_string())];
    pdgate_scheduler::Endpoint::new(name, address, labels.into_iter().collect())
}

/// POSTs a non-streamed completion of `prompt` for [`MODEL`] with `headers`; returns the
/// status and the `x-pdgate-pd-mode` header.
pub async fn complete(url: &str, prompt: &str, headers: &[(&str, &str)]) -> (u16, String) {
    let mut req = reqwest::Client::new()
        .post(format!("{url}/v1/completions"))
        .json(&json!({"model": MODEL, "prompt": prompt, "max_tokens": 1}));
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = req.send().await.unwrap();
    let mode = (resp.headers().get("x-pdgate-pd-mode"))
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    let status = resp.status().as_u16();
    let _ = resp.bytes().await;
    (status, mode)
}

/// GETs `url`; returns status and body text.
pub async fn get_text(url: &str) -> (u16, String) {
    let resp = reqwest::get(url).await.unwrap();
    (resp.status().as_u16(), resp.text().await.unwrap())
}

/// Polls `done` every 20 ms for at most `limit`; panics naming `what` when it never holds.
pub async fn wait_for<F, Fut>(limit: Duration, what: &str, mut done: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = tokio::time::Instant::now();
    while !done().await {
        assert!(start.elapsed() < limit, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
