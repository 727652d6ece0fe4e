//! Client limits (issue 10 item 3 and 4) through the real router on 127.0.0.1:0, with raw TCP
//! clients: headers or a body sent too slowly, an idle keep-alive connection, connections over
//! the limit, and large bodies over the in-flight budget.

use crate::support;

use axum::response::IntoResponse;
use pdgate_core::client_limits::ClientLimits;
use pdgate_scenario::fleet;
use pdgate_scheduler::{Endpoint, DEFAULT_CONFIG_YAML};
use pdgate_server::ServerHandle;
use serde_json::json;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use support::{fake_engine, metric, metrics, send, url};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A router in front of a fake engine that answers every completion at once.
async fn router(limits: ClientLimits) -> (ServerHandle, support::FakeEngine) {
    let engine = fake_engine("/v1/completions", |_| {
        axum::Json(json!({"id": "c", "object": "text_completion", "choices": [
            {"index": 0, "text": "ok", "finish_reason": "length"}]}))
        .into_response()
    })
    .await;
    let role = BTreeMap::from([(pdgate_api::labels::ROLE.to_string(), "decode".to_string())]);
    let endpoints = vec![Endpoint::new("d0", &engine.addr, role)];
    let r = fleet::router_with(endpoints, DEFAULT_CONFIG_YAML, |o| o.client_limits = limits)
        .await
        .unwrap();
    (r, engine)
}

fn limits() -> ClientLimits {
    ClientLimits {
        header_timeout: Duration::from_millis(400),
        body_timeout: Duration::from_millis(400),
        max_connections: 1000,
        max_inflight_body_bytes: 1 << 30,
    }
}

/// Reads until the peer closes (or 5 s pass); returns what was read and when it closed.
async fn read_to_close(tcp: &mut TcpStream) -> (String, Duration) {
    let start = Instant::now();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), tcp.read_to_end(&mut out)).await;
    (String::from_utf8_lossy(&out).into_owned(), start.elapsed())
}

const REQUEST: &str = r#"{"model":"m","prompt":"hi"}"#;

fn head(len: usize) -> String {
    format!(
        "POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {len}\r\n\r\n"
    )
}

#[tokio::test]
async fn slow_headers_idle_connections_and_slow_bodies_are_closed_in_time() {
    let (r, _e) = router(limits()).await;
    let addr = r.addr;
    // A connection that never sends a byte.
    let mut silent = TcpStream::connect(addr).await.unwrap();
    let (_, after) = read_to_close(&mut silent).await;
    assert!(
        after >= Duration::from_millis(350) && after < Duration::from_secs(3),
        "{after:?}"
    );
    // Headers that never end.
    let mut slow = TcpStream::connect(addr).await.unwrap();
    slow.write_all(b"POST /v1/completions HTTP/1.1\r\nhost: x\r\n")
        .await
        .unwrap();
    let (_, after) = read_to_close(&mut slow).await;
    assert!(
        after >= Duration::from_millis(350) && after < Duration::from_secs(3),
        "{after:?}"
    );
    // A keep-alive connection that served one request, then sat idle.
    let mut idle = TcpStream::connect(addr).await.unwrap();
    idle.write_all(format!("{}{REQUEST}", head(REQUEST.len())).as_bytes())
        .await
        .unwrap();
    let mut buf = vec![0u8; 4096];
    let n = idle.read(&mut buf).await.unwrap();
    assert!(
        String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&buf[..n])
    );
    let (rest, after) = read_to_close(&mut idle).await;
    assert!(rest.is_empty() || rest.contains("200"), "{rest}");
    assert!(after < Duration::from_secs(3), "{after:?}");
    // A body that stops half way: 408, and the connection closed.
    let mut body = TcpStream::connect(addr).await.unwrap();
    body.write_all(format!("{}{}", head(100), &REQUEST[..10]).as_bytes())
        .await
        .unwrap();
    let (answer, after) = read_to_close(&mut body).await;
    assert!(answer.starts_with("HTTP/1.1 408 "), "{answer}");
    assert!(
        answer.contains("request body not received within 400 ms"),
        "{answer}"
    );
    assert!(after < Duration::from_secs(3), "{after:?}");
    let m = metrics(&url(&r)).await;
    assert_eq!(
        metric(&m, r#"pdgate_client_timeouts_total{kind="body"}"#),
        1
    );
    assert_eq!(
        metric(&m, r#"pdgate_client_timeouts_total{kind="header"}"#),
        3,
        "{m}"
    );
}

#[tokio::test]
async fn connections_over_the_limit_are_told_503_and_closed_and_a_freed_slot_serves() {
    let (r, _e) = router(ClientLimits {
        max_connections: 3,
        ..limits()
    })
    .await;
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(TcpStream::connect(r.addr).await.unwrap());
    }
    // Let the accept loop take all three.
    support::wait_until(Duration::from_secs(2), "3 connections open", || {
        r.state.connections.open() == 3
    })
    .await;
    let mut extra = TcpStream::connect(r.addr).await.unwrap();
    let (answer, _) = read_to_close(&mut extra).await;
    assert!(
        answer.starts_with("HTTP/1.1 503 Service Unavailable\r\n"),
        "{answer}"
    );
    assert!(answer.contains("too many client connections"), "{answer}");
    assert!(answer.contains("retry-after: 1"), "{answer}");
    drop(held.pop());
    support::wait_until(Duration::from_secs(2), "a slot freed", || {
        r.state.connections.open() == 2
    })
    .await;
    let reply = send(&url(&r), &[], &json!({"model": "m", "prompt": "hi"})).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(
        r.state.metrics.client_connections_refused.get(),
        1,
        "one refusal counted"
    );
}

#[tokio::test]
async fn large_bodies_over_the_in_flight_budget_get_429_while_small_ones_pass() {
    let (r, engine) = router(ClientLimits {
        max_inflight_body_bytes: 1 << 20,
        body_timeout: Duration::from_secs(10),
        ..limits()
    })
    .await;
    // A 700 KiB body, half sent: its declared length is held.
    let big = format!(r#"{{"model":"m","prompt":"{}"}}"#, "w ".repeat(350 << 10));
    let mut first = TcpStream::connect(r.addr).await.unwrap();
    first
        .write_all(format!("{}{}", head(big.len()), &big[..big.len() / 2]).as_bytes())
        .await
        .unwrap();
    support::wait_until(Duration::from_secs(2), "the first body leased", || {
        r.state.body_budget.used() == big.len()
    })
    .await;
    // A second large body does not fit: 429 with retry-after, nothing sent upstream.
    let second = support::send_to(&url(&r), "/v1/completions", &[], big.clone()).await;
    assert_eq!(second.status, 429, "{}", second.body);
    assert_eq!(second.header("retry-after"), "1");
    assert_eq!(
        second.body["error"]["message"],
        "request bodies in flight would exceed 1048576 bytes; retry later"
    );
    // Small requests still pass.
    for _ in 0..3 {
        let reply = send(&url(&r), &[], &json!({"model": "m", "prompt": "hi"})).await;
        assert_eq!(reply.status, 200, "{}", reply.body);
    }
    // The first body completes and is served; the budget is empty again.
    first
        .write_all(&big.as_bytes()[big.len() / 2..])
        .await
        .unwrap();
    let mut buf = vec![0u8; 4096];
    let n = first.read(&mut buf).await.unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
    support::wait_until(Duration::from_secs(2), "the budget emptied", || {
        r.state.body_budget.used() == 0
    })
    .await;
    assert_eq!(engine.requests().len(), 4, "3 small + the first large");
    assert_eq!(r.state.metrics.body_budget_refusals.get(), 1);
}

#[tokio::test]
async fn expect_100_continue_is_answered_by_the_router_and_never_sent_to_the_engine() {
    let (r, engine) = router(limits()).await;
    let mut tcp = TcpStream::connect(r.addr).await.unwrap();
    let head = head(REQUEST.len()).replace("\r\n\r\n", "\r\nexpect: 100-continue\r\n\r\n");
    tcp.write_all(head.as_bytes()).await.unwrap();
    let mut buf = vec![0u8; 4096];
    let n = tcp.read(&mut buf).await.unwrap();
    assert_eq!(
        String::from_utf8_lossy(&buf[..n]),
        "HTTP/1.1 100 Continue\r\n\r\n"
    );
    tcp.write_all(REQUEST.as_bytes()).await.unwrap();
    let n = tcp.read(&mut buf).await.unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
    let seen = engine.requests();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].header("expect"), None);
}
