//! The step cost model on a paused clock: time to first token = prefill ms / speedup.

mod common;

use common::*;
use pdgate_sim::cost::{decode_ms, prefill_ms};
use pdgate_sim::{SimConfig, WorkerSpec};
use serde_json::json;
use tokio::time::Instant;

fn ms_since(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1000.0
}

#[tokio::test(start_paused = true)]
async fn first_token_after_the_documented_prefill_time() {
    for (t, speedup) in [(1000usize, 1.0), (3000, 1.0), (5000, 4.0)] {
        let cfg = SimConfig {
            speedup,
            ..SimConfig::default()
        };
        let w = worker(WorkerSpec::new("agg-0", "prefill-decode"), cfg).await;
        let expected = prefill_ms(t) / speedup;
        let start = Instant::now();
        let r = post(
            &w.url(),
            "/v1/completions",
            json!({"model": "pdgate-sim", "prompt": tokens(1, t), "max_tokens": 1}),
        )
        .await;
        assert_eq!(r.status, 200, "{}", r.body);
        let took = ms_since(start);
        assert!(
            (took - expected).abs() <= 1.0,
            "T={t} speedup={speedup}: took {took} ms, expected {expected} ms"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn streamed_tokens_follow_prefill_then_decode_steps() {
    let w = worker(
        WorkerSpec::new("agg-0", "prefill-decode"),
        SimConfig::default(),
    )
    .await;
    let t = 2000;
    let start = Instant::now();
    let mut resp = reqwest::Client::new()
        .post(format!("{}/v1/completions", w.url()))
        .json(&json!({"model": "pdgate-sim", "prompt": tokens(1, t), "max_tokens": 3, "stream": true}))
        .send()
        .await
        .unwrap();
    let mut arrivals = Vec::new();
    while let Some(chunk) = resp.chunk().await.unwrap() {
        if chunk.starts_with(b"data: {") {
            arrivals.push(ms_since(start));
        }
    }
    assert_eq!(arrivals.len(), 3);
    assert!(
        (arrivals[0] - prefill_ms(t)).abs() <= 1.0,
        "ttft {arrivals:?}"
    );
    // Each later token costs one decode step at the usage of 126 blocks out of 16384.
    let step = decode_ms(126.0 / 16384.0);
    for i in 1..3 {
        let gap = arrivals[i] - arrivals[i - 1];
        assert!(
            (gap - step).abs() <= 1.0,
            "inter-token {gap} vs {step} ({arrivals:?})"
        );
    }
}
