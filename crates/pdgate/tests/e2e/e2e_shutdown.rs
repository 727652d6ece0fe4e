//! Graceful shutdown of the real binary: on SIGTERM `/health` turns not ready and new
//! requests are refused (503), a stream already running finishes, and the process exits 0
//! once it has, or when the grace period (`--shutdown-grace-ms`) ends.

use crate::support;

use serde_json::json;
use std::time::{Duration, Instant};
use support::process::serve;
use support::{body, health_becomes, metric, metrics, send, sim_config, sim_worker, spec};

async fn booked(url: &str, endpoint: &str) -> u64 {
    metric(
        &metrics(url).await,
        &format!("pdgate_in_flight{{endpoint=\"{endpoint}\"}}"),
    )
}

/// Starts a long stream and waits until pdgate has booked it on `endpoint`.
async fn stream_running(
    url: &str,
    endpoint: &str,
    tokens: u32,
) -> tokio::task::JoinHandle<(u16, String, String)> {
    let u = url.to_string();
    let stream = tokio::spawn(async move {
        let mut b = body(5_000, 64, tokens);
        b["stream"] = json!(true);
        support::stream_text(&u, &b).await
    });
    let started = Instant::now();
    while booked(url, endpoint).await != 1 {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "the stream is booked"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stream
}

#[tokio::test]
async fn sigterm_drains_the_running_stream_then_exits() {
    let worker = sim_worker(spec("d0", "decode", None), sim_config(1.0)).await;
    let addr = worker.addr().to_string();
    let mut served = serve(
        &["--endpoint", &addr, "--shutdown-grace-ms", "20000"],
        &[],
        vec![],
    );
    let url = served.url.clone();
    let stream = stream_running(&url, &addr, 400).await;

    served.terminate();
    // Not ready within 1 s of SIGTERM.
    let h = health_becomes(&url, 503, Duration::from_secs(1)).await;
    assert_eq!(h["reason"], "shutting down");
    let refused = send(&url, &[], &body(1, 16, 1)).await;
    assert_eq!(refused.status, 503, "{:?}", refused.body);
    assert_eq!(
        served.wait_exit(Duration::from_millis(0)),
        None,
        "still draining"
    );

    let (status, _, text) = stream.await.unwrap();
    assert_eq!(status, 200);
    assert!(
        text.ends_with("data: [DONE]\n\n"),
        "the stream ran to its end: {text}"
    );
    let code = tokio::task::spawn_blocking(move || served.wait_exit(Duration::from_secs(5)))
        .await
        .unwrap();
    assert_eq!(code, Some(0));
    assert_eq!(
        worker.stats().completions,
        1,
        "the engine finished the stream"
    );
}

#[tokio::test]
async fn the_grace_period_bounds_the_drain() {
    let worker = sim_worker(spec("d0", "decode", None), sim_config(0.2)).await;
    let addr = worker.addr().to_string();
    let mut served = serve(
        &["--endpoint", &addr, "--shutdown-grace-ms", "300"],
        &[],
        vec![],
    );
    let url = served.url.clone();
    let stream = stream_running(&url, &addr, 2_000).await;
    served.terminate();
    let started = Instant::now();
    let code = tokio::task::spawn_blocking(move || served.wait_exit(Duration::from_secs(5)))
        .await
        .unwrap();
    assert_eq!(code, Some(0));
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "exited {:?} after SIGTERM",
        started.elapsed()
    );
    // The stream was cut at the grace's end: its body ends before `[DONE]` (the chunked
    // body is left unterminated, so the reader's task fails on the early EOF).
    match stream.await {
        Ok((_, _, text)) => assert!(!text.contains("[DONE]"), "{text}"),
        Err(cut) => assert!(cut.to_string().contains("EOF"), "{cut}"),
    }
}
