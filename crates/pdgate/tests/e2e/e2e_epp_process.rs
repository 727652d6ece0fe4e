//! The real `pdgate epp` binary: llm-d's flags, its listening line, gRPC health, one request
//! through ext_proc, and graceful shutdown — on SIGTERM readiness turns NOT_SERVING, the
//! stream in progress finishes, then the process exits 0.

use crate::support;

use serde_json::json;
use std::net::SocketAddr;
use std::time::Duration;
use support::envoy::{self, Stream};
use support::process::epp;
use support::{sim_config, sim_worker, spec};

/// `(ext_proc, health)` from `ext_proc A, health B, metrics http://C/metrics`.
fn addresses(line: &str) -> (SocketAddr, SocketAddr, String) {
    let field = |name: &str| {
        line.split(", ")
            .find_map(|p| p.strip_prefix(name))
            .unwrap_or_else(|| panic!("{name} in {line:?}"))
            .to_string()
    };
    (
        field("ext_proc ").parse().unwrap(),
        field("health ").parse().unwrap(),
        field("metrics "),
    )
}

// Two workers: `wait_exit` blocks its thread while the gRPC client's connection task must go
// on closing the stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn epp_binary_routes_and_drains_on_sigterm() {
    let worker = sim_worker(spec("d0", "decode", None), sim_config(50.0)).await;
    let addr = worker.addr().to_string();
    let mut p = epp(
        &[
            "--endpoint",
            &addr,
            "--shutdown-grace-ms",
            "20000",
            "--secure-serving=false",
        ],
        &[],
    );
    let (grpc, health, metrics) = addresses(&p.url);
    assert_eq!(envoy::health_becomes(health, "readiness", 1).await, Ok(1));
    let body =
        serde_json::to_vec(&json!({"model": "pdgate-sim", "prompt": "hello", "max_tokens": 2}))
            .unwrap();
    let headers = [("content-type", "application/json")];
    let mut s = Stream::open(grpc).await;
    let r = s.request("/v1/completions", &headers, &body, 4, None).await;
    assert_eq!(r.destination(), addr);
    // SIGTERM while this request is in progress (routed, not yet answered).
    p.terminate();
    assert_eq!(
        envoy::health_becomes(health, "readiness", 2).await,
        Ok(2),
        "NOT_SERVING within 1 s of SIGTERM"
    );
    assert_eq!(envoy::health_status(health, "liveness").await, Ok(1));
    assert_eq!(
        p.wait_exit(Duration::from_millis(300)),
        None,
        "it waits for the stream"
    );
    let up = s
        .call_destination(&r, "/v1/completions", &headers, None)
        .await;
    assert_eq!(up.status, 200);
    drop(s);
    assert_eq!(
        p.wait_exit(Duration::from_secs(5)),
        Some(0),
        "exits 0 once the stream ended"
    );
    assert!(metrics.starts_with("http://127.0.0.1:"), "{metrics}");
}

#[test]
fn secure_serving_is_refused_with_a_clear_message() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_pdgate"))
        .args(["epp", "--endpoint", "127.0.0.1:9", "--secure-serving"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--secure-serving") && err.contains("plaintext"),
        "{err}"
    );
}
