//! The `token-producer` through `serve`: the scheduler hashes the engine's token ids, not the
//! text. With a prefix producer at one token per block, two prompts with the same tokens
//! but different spacing share every block, so the second follows the first to the endpoint
//! that served it; hashed as text (4 bytes per block) they would share none. Backends:
//! `local` (a WordLevel tokenizer made here, whitespace pre-tokenizer) and `vllm` against a
//! stand-in render server (the simulator has no render endpoints on this branch); the
//! `vllm` backend without `vllm.url` asks a fleet engine, and the simulator's 404 is a
//! counted fallback, never a failed request.

use crate::support;
/// The tokenizer directory made by pdgate-tokens' own tests.
#[path = "../../../pdgate-tokens/tests/common/mod.rs"]
#[allow(dead_code)]
mod tokenizer_dir;

use axum::routing::post;
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use support::{metric, metrics, send_to, sim_config, sim_workers, spec, url};

const WORDS: &[&str] = &[
    "[UNK]",
    "alpha",
    "bravo",
    "charlie",
    "delta",
    "echo",
    "foxtrot",
    "golf",
    "hotel",
    "user",
    ":",
    "<|bos|>",
    "assistant",
];

/// A config with `token_producer` (the plugin's parameters) and a prefix producer at one
/// token per block, scored alone.
fn config(token_producer: &str) -> String {
    format!(
        "apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: token-producer
  parameters:
{token_producer}
- type: approx-prefix-cache-producer
  parameters:
    blockSizeTokens: 1
    autoTune: false     # keep one-token blocks (autoTune adopts the engines' 16)
- type: prefix-cache-scorer
- type: max-score-picker
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: prefix-cache-scorer
  - pluginRef: max-score-picker
"
    )
}

/// Eight prompt pairs: the same words, the second spaced differently (leading space, tabs,
/// newlines). Two of them are chat requests.
fn pairs() -> Vec<(&'static str, Value, Value)> {
    let w = &WORDS[1..9];
    (0..8)
        .map(|i| {
            let words: Vec<&str> = (0..5).map(|k| w[(i + k * 3) % 8]).collect();
            let plain = words.join(" ");
            let spaced = format!("  {}\n", words.join(" \t "));
            match i % 4 {
                3 => (
                    "/v1/chat/completions",
                    json!({"model": "pdgate-sim", "max_tokens": 1,
                           "messages": [{"role": "user", "content": plain}]}),
                    json!({"model": "pdgate-sim", "max_tokens": 1,
                           "messages": [{"role": "user", "content": spaced}]}),
                ),
                _ => (
                    "/v1/completions",
                    json!({"model": "pdgate-sim", "max_tokens": 1, "prompt": plain}),
                    json!({"model": "pdgate-sim", "max_tokens": 1, "prompt": spaced}),
                ),
            }
        })
        .collect()
}

/// Sends every pair in order; asserts each second prompt went where its first went.
async fn second_prompts_follow_the_first(router: &str) {
    for (path, first, second) in pairs() {
        let a = send_to(router, path, &[], first.to_string()).await;
        assert_eq!(a.status, 200, "{:?}", a.body);
        let b = send_to(router, path, &[], second.to_string()).await;
        assert_eq!(b.status, 200, "{:?}", b.body);
        assert_eq!(a.served()[2], b.served()[2], "{second}");
        assert!(!a.served()[2].is_empty());
    }
}

/// Two decode simulators and a router configured with `token_producer`; returns the
/// workers (kept alive), the router and its URL.
async fn fleet(
    token_producer: &str,
) -> (
    Vec<pdgate_sim::WorkerHandle>,
    pdgate_server::ServerHandle,
    String,
) {
    let workers = sim_workers(
        vec![spec("d0", "decode", None), spec("d1", "decode", None)],
        sim_config(100.0),
    )
    .await;
    let server = support::router(support::endpoints(&workers), &config(token_producer)).await;
    let router = url(&server);
    (workers, server, router)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_tokenizer_makes_differently_spaced_prompts_share_their_blocks() {
    let dir = tokenizer_dir::model_dir_with("e2e", WORDS);
    let params = format!(
        "    modelName: pdgate-sim\n    local:\n      tokenizer: {}",
        dir.join("tokenizer.json").display()
    );
    let (_workers, _server, router) = fleet(&params).await;
    second_prompts_follow_the_first(&router).await;
    let m = metrics(&router).await;
    assert_eq!(
        metric(
            &m,
            r#"pdgate_tokenizations_total{backend="local",outcome="tokenized"}"#
        ),
        16
    );
    assert_eq!(metric(&m, "pdgate_tokenization_fallbacks_total{"), 0);
}

/// A stand-in render server: token ids = one id per whitespace-separated word (its index in
/// [`WORDS`]), for completions (a list) and chat (one object, words of every message).
async fn render_server(seen: Arc<Mutex<Vec<String>>>) -> String {
    fn ids(text: &str) -> Vec<usize> {
        (text.split_whitespace())
            .map(|w| WORDS.iter().position(|x| *x == w).unwrap_or(0))
            .collect()
    }
    let s1 = seen.clone();
    let app = axum::Router::new()
        .route(
            "/v1/completions/render",
            post(move |body: String| async move {
                s1.lock().unwrap().push(body.clone());
                let v: Value = serde_json::from_str(&body).unwrap();
                axum::Json(
                    json!([{"request_id": "r", "token_ids": ids(v["prompt"].as_str().unwrap())}]),
                )
            }),
        )
        .route(
            "/v1/chat/completions/render",
            post(move |body: String| async move {
                seen.lock().unwrap().push(body.clone());
                let v: Value = serde_json::from_str(&body).unwrap();
                let text: String = (v["messages"].as_array().unwrap().iter())
                    .map(|m| format!("{} ", m["content"].as_str().unwrap()))
                    .collect();
                axum::Json(json!({"request_id": "r", "token_ids": ids(&text)}))
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vllm_render_ids_are_scheduled_on_and_an_engine_without_render_falls_back() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let render = render_server(seen.clone()).await;
    let params =
        format!("    modelName: pdgate-sim\n    vllm:\n      http: {render}\n      timeout: 2s");
    let (workers, _server, router) = fleet(&params).await;
    second_prompts_follow_the_first(&router).await;
    let m = metrics(&router).await;
    assert_eq!(
        metric(
            &m,
            r#"pdgate_tokenizations_total{backend="vllm",outcome="tokenized"}"#
        ),
        16
    );
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 16);
    assert_eq!(
        seen[0],
        r#"{"model":"pdgate-sim","prompt":"alpha delta golf bravo echo"}"#
    );

    // No `vllm.url`: a fleet engine is asked. The simulator serves the render endpoints as
    // vLLM does, so the prompt is tokenized by it, with no fallback.
    let params = "    modelName: pdgate-sim\n    vllm: {}";
    let server = support::router(support::endpoints(&workers), &config(params)).await;
    let router = url(&server);
    let r = send_to(
        &router,
        "/v1/completions",
        &[],
        json!({"model": "pdgate-sim", "prompt": "alpha", "max_tokens": 1}).to_string(),
    )
    .await;
    assert_eq!(r.status, 200);
    let m = metrics(&router).await;
    assert_eq!(
        metric(
            &m,
            r#"pdgate_tokenizations_total{backend="vllm",outcome="tokenized"}"#
        ),
        1
    );
    assert_eq!(
        metric(
            &m,
            r#"pdgate_tokenization_fallbacks_total{backend="vllm",reason="status"}"#
        ),
        0
    );
}
