//! Failure injection: error rate and status, mid-stream aborts, slow start.

mod common;

use common::*;
use pdgate_sim::{SimConfig, WorkerSpec};
use serde_json::json;
use std::time::Duration;

#[tokio::test]
async fn error_rate_one_answers_the_configured_status() {
    let cfg = SimConfig {
        error_rate: 1.0,
        error_status: 503,
        ..fast()
    };
    let w = worker(WorkerSpec::new("agg-0", "prefill-decode"), cfg).await;
    let r = post(
        &w.url(),
        "/v1/completions",
        json!({"model": "pdgate-sim", "prompt": "x", "stream": true}),
    )
    .await;
    assert_eq!(r.status, 503);
    assert_eq!(
        r.body,
        json!({"error": {"message": "injected failure (--error-rate)", "type": "service_unavailable", "code": 503}})
    );
    assert_eq!(r.headers["x-sim-worker"], "agg-0");
    assert_eq!(w.stats().injected_errors, 1);
    // Health and metrics are not affected.
    assert_eq!(
        reqwest::get(format!("{}/health", w.url()))
            .await
            .unwrap()
            .status(),
        200
    );
}

#[tokio::test]
async fn abort_rate_one_cuts_streams_mid_way() {
    let cfg = SimConfig {
        abort_rate: 1.0,
        ..fast()
    };
    let w = worker(WorkerSpec::new("agg-0", "prefill-decode"), cfg).await;
    let mut resp = reqwest::Client::new()
        .post(format!("{}/v1/completions", w.url()))
        .json(&json!({"model": "pdgate-sim", "prompt": "a b c", "max_tokens": 10, "stream": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let mut text = String::new();
    let err = loop {
        match resp.chunk().await {
            Ok(Some(c)) => text.push_str(std::str::from_utf8(&c).unwrap()),
            Ok(None) => panic!("the stream ended cleanly: {text}"),
            Err(e) => break e,
        }
    };
    let _ = err;
    let (events, done) = sse_events(&text);
    assert_eq!(events.len(), 5, "half the tokens, then the cut: {text}");
    assert!(!done);
    // Non-stream requests are not cut.
    let r = post(
        &w.url(),
        "/v1/completions",
        json!({"model": "pdgate-sim", "prompt": "a b c", "max_tokens": 10}),
    )
    .await;
    assert_eq!(r.status, 200);
    let s = w.stats();
    assert_eq!(s.injected_aborts, 1);
    // The cut request left the batch and released its blocks.
    wait_until(
        || w.stats().kv_blocks_used == 0 && w.stats().running == 0,
        || format!("blocks leaked: {:?}", w.stats()),
    )
    .await;
}

#[tokio::test(start_paused = true)]
async fn slow_start_delays_the_first_byte() {
    let cfg = SimConfig {
        slow_start: Duration::from_millis(250),
        ..fast()
    };
    let w = worker(WorkerSpec::new("agg-0", "prefill-decode"), cfg).await;
    let start = tokio::time::Instant::now();
    let r = post(
        &w.url(),
        "/v1/completions",
        json!({"model": "pdgate-sim", "prompt": "a", "max_tokens": 1}),
    )
    .await;
    assert_eq!(r.status, 200);
    let took = start.elapsed();
    assert!(
        took >= Duration::from_millis(250) && took < Duration::from_millis(260),
        "{took:?}"
    );
}

#[tokio::test]
async fn client_gone_releases_blocks() {
    // Slow enough that the request is still decoding when the client leaves.
    let cfg = SimConfig {
        speedup: 1.0,
        ..SimConfig::default()
    };
    let w = worker(WorkerSpec::new("agg-0", "prefill-decode"), cfg).await;
    let mut resp = reqwest::Client::new()
        .post(format!("{}/v1/completions", w.url()))
        .json(&json!({"model": "pdgate-sim", "prompt": tokens(1, 64), "max_tokens": 1000, "stream": true}))
        .send()
        .await
        .unwrap();
    resp.chunk().await.unwrap();
    assert_eq!(w.stats().running, 1);
    drop(resp);
    wait_until(
        || w.stats().running == 0 && w.stats().kv_blocks_used == 0,
        || format!("request never dropped: {:?}", w.stats()),
    )
    .await;
    assert_eq!(w.stats().cancelled, 1);
}

/// Regression (adversarial try of eviction): a streamed request still waiting for a batch
/// slot kept its place in the queue after its client left, and `num_requests_waiting` with it,
/// until its first token failed to write; vLLM aborts on disconnect.
#[tokio::test]
async fn a_client_gone_while_waiting_leaves_the_queue() {
    let cfg = SimConfig {
        speedup: 1.0,
        max_num_seqs: 1,
        ..SimConfig::default()
    };
    let w = worker(WorkerSpec::new("agg-0", "prefill-decode"), cfg).await;
    let open = |first: u32| {
        reqwest::Client::new()
            .post(format!("{}/v1/completions", w.url()))
            .json(&json!({"model": "pdgate-sim", "prompt": tokens(first, 16), "max_tokens": 2000, "stream": true}))
            .send()
    };
    let _running = open(1).await.unwrap();
    let waiting = open(100).await.unwrap();
    wait_until(
        || w.stats().running == 1 && w.stats().waiting == 1,
        || format!("not queued: {:?}", w.stats()),
    )
    .await;
    drop(waiting);
    wait_until(
        || w.stats().waiting == 0,
        || format!("the waiting request stayed: {:?}", w.stats()),
    )
    .await;
    assert_eq!((w.stats().cancelled, w.stats().running), (1, 1));
}
