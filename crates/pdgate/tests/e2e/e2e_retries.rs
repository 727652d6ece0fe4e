//! Failure handling across phases (issue 5 item 5), with simulator failure injection: a
//! failing decode endpoint is retried on another one of the same revision; a pinned decode
//! is not; a failed prefill sends no decode; a 4xx passes through and never trips a breaker.

use crate::support;

use pdgate_scheduler::DEFAULT_CONFIG_YAML;
use pdgate_sim::{SimConfig, WorkerHandle};
use serde_json::Value;
use support::{endpoints, router, sim_worker, spec};

/// A worker of `role` whose every request fails with `error` (status) when given.
async fn worker(name: &str, role: &str, error: Option<u16>) -> WorkerHandle {
    let cfg = SimConfig {
        speedup: 50.0,
        error_rate: if error.is_some() { 1.0 } else { 0.0 },
        error_status: error.unwrap_or(503),
        ..SimConfig::default()
    };
    sim_worker(spec(name, role, None), cfg).await
}

/// Status, decode endpoint and body of a 64-token request starting at token `first`.
async fn send(url: &str, headers: &[(&str, &str)], first: u32) -> (u16, String, Value) {
    let r = support::send(url, headers, &support::body(first, 64, 2)).await;
    (r.status, r.header("x-pdgate-decode-endpoint"), r.body)
}

fn requests(w: &WorkerHandle) -> u64 {
    let s = w.stats();
    s.completions + s.injected_errors
}

async fn metric(url: &str, series: &str) -> u64 {
    support::metric(&support::metrics(url).await, series)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_decode_is_retried_elsewhere_unless_pinned() {
    let p = worker("prefill-0", "prefill", None).await;
    let bad = worker("decode-bad", "decode", Some(503)).await;
    let good = worker("decode-good", "decode", None).await;
    let r = router(endpoints([&p, &bad, &good]), DEFAULT_CONFIG_YAML).await;
    let url = support::url(&r);
    // Every request succeeds on the good decode endpoint, whatever was picked first.
    for i in 0..10 {
        let (status, decode, v) = send(&url, &[], i * 100).await;
        assert_eq!((status, decode.as_str()), (200, "decode-good"), "{v}");
    }
    let tried_bad = requests(&bad);
    assert!(tried_bad >= 1, "the bad endpoint was tried at least once");
    // After 5 consecutive failures its breaker opens and it is no longer picked at all.
    assert!(
        tried_bad <= 5,
        "breaker opens after 5 failures: {tried_bad}"
    );
    let retries = metric(&url, "pdgate_retries_total{phase=\"decode\"}").await;
    assert_eq!(retries, tried_bad);
    // Pinned to the bad endpoint: the client gets its failure, nobody else is tried.
    let good_before = requests(&good);
    let (status, decode, v) = send(&url, &[("x-worker-instance-id", "decode-bad")], 9999).await;
    assert_eq!(status, 502, "{v}");
    assert_eq!(decode, "decode-bad");
    assert_eq!(
        requests(&good),
        good_before,
        "no other decode endpoint tried"
    );
    assert_eq!(r.state.in_flight_total(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_prefill_sends_no_decode_and_a_4xx_passes_through_untouched() {
    // A 500 is the engine's answer to this request (not "prefill unavailable", which a 503
    // is: the prefill policy then runs the request aggregated, see e2e_request_ctx.rs).
    let p = worker("prefill-0", "prefill", Some(500)).await;
    let d = worker("decode-0", "decode", None).await;
    let r = router(endpoints([&p, &d]), DEFAULT_CONFIG_YAML).await;
    let url = support::url(&r);
    let (status, _, v) = send(&url, &[], 0).await;
    assert_eq!(status, 502, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("prefill leg failed: upstream prefill-0 answered 500"),
        "{v}"
    );
    assert_eq!(requests(&d), 0, "no decode leg after a failed prefill");
    // The answer names the prefill that failed, and no decode or P/D mode.
    let r2 = support::send(&url, &[], &support::body(0, 64, 2)).await;
    assert_eq!(r2.headers["x-pdgate-prefill-endpoint"], "prefill-0");
    assert!(r2.headers.get("x-pdgate-decode-endpoint").is_none());
    assert!(r2.headers.get("x-pdgate-pd-mode").is_none());

    // A decode endpoint answering 409 (a client-side fault): passed through, never retried,
    // and its breaker stays closed after many of them.
    let p = worker("prefill-1", "prefill", None).await;
    let d409 = worker("decode-409", "decode", Some(409)).await;
    let d_ok = worker("decode-ok", "decode", None).await;
    let r = router(endpoints([&p, &d409, &d_ok]), DEFAULT_CONFIG_YAML).await;
    let url = support::url(&r);
    for i in 0..8 {
        let (status, _, _) = send(&url, &[("x-worker-instance-id", "decode-409")], i * 100).await;
        assert_eq!(status, 409);
    }
    assert_eq!(requests(&d_ok), 0);
    assert_eq!(
        r.state.breakers.state("decode-409"),
        pdgate_core::breaker::BreakerState::Closed
    );
    assert_eq!(
        metric(&url, "pdgate_retries_total{phase=\"decode\"}").await,
        0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_bind_to_the_endpoint_that_served_and_a_502_names_the_last_one_tried() {
    // Fresh-eyes findings: a session stayed bound to the endpoint that failed before a
    // retry; a 502's headers and body named different endpoints; a failed prefill response
    // named a decode endpoint that never ran.
    let p = worker("prefill-0", "prefill", None).await;
    let bad = worker("decode-bad", "decode", Some(503)).await;
    let g1 = worker("decode-g1", "decode", None).await;
    let g2 = worker("decode-g2", "decode", None).await;
    let r = router(endpoints([&p, &bad, &g1, &g2]), DEFAULT_CONFIG_YAML).await;
    let url = support::url(&r);
    for s in 0..6 {
        let session = format!("s{s}");
        let h = [("x-session-id", session.as_str())];
        let (status, first, _) = send(&url, &h, s * 10_000).await;
        assert_eq!(status, 200);
        assert_ne!(first, "decode-bad");
        for t in 1..4 {
            let (_, again, _) = send(&url, &h, s * 10_000 + t * 100).await;
            assert_eq!(again, first, "session {session} turn {t}");
        }
    }
    // Every decode endpoint failing: the 502 names, in header and body, the last one tried.
    let all_bad: Vec<WorkerHandle> = vec![
        worker("decode-x", "decode", Some(503)).await,
        worker("decode-y", "decode", Some(503)).await,
        worker("decode-z", "decode", Some(503)).await,
    ];
    let mut eps = endpoints([&p]);
    eps.extend(endpoints(&all_bad));
    let r = router(eps, DEFAULT_CONFIG_YAML).await;
    let url = support::url(&r);
    let (status, decode, v) = send(&url, &[], 1).await;
    assert_eq!(status, 502);
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with(&format!(
                "decode leg failed: upstream {decode} answered 503"
            )),
        "header {decode}, body {v}"
    );
}
