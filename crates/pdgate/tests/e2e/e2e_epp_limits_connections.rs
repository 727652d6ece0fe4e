//! `pdgate epp`'s connection limits, over raw TCP: the metrics port bounds its connections and
//! closes half-open ones; the ext_proc port closes silent and non-gRPC connections and caps the
//! rest. Each hostile case against the real EPP over real gRPC with simulator workers on loopback
//! (issue 26). The EPP under limits is `support::limited_epp`, the raw stream
//! `support::raw_ext_proc`; timeouts are a few hundred ms and every wait is bounded.

use crate::support;

use std::time::{Duration, Instant};
use support::envoy::Stream;
use support::limited_epp::{limited, limits};
use support::{metric, wait_until};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Reads until the peer closes (or `limit` passes); returns what was read and whether it
/// closed.
async fn read_to_close(tcp: &mut TcpStream, limit: Duration) -> (String, bool) {
    let mut out = Vec::new();
    let closed = tokio::time::timeout(limit, tcp.read_to_end(&mut out)).await;
    (String::from_utf8_lossy(&out).into_owned(), closed.is_ok())
}

#[tokio::test]
async fn the_metrics_port_bounds_connections_and_closes_half_open_ones() {
    use pdgate_epp::limits::MAX_SIDE_PORT_CONNECTIONS;
    let timeout = Duration::from_millis(600);
    let e = limited(limits(|l| l.client.header_timeout = timeout)).await;
    // Issue 26 held 1,100 silent connections here; every slot is taken by silent ones…
    let mut silent = Vec::new();
    for _ in 0..MAX_SIDE_PORT_CONNECTIONS {
        silent.push(TcpStream::connect(e.metrics).await.unwrap());
    }
    wait_until(Duration::from_secs(2), "slots taken", || {
        e.epp.connections.metrics.open() == MAX_SIDE_PORT_CONNECTIONS
    })
    .await;
    // …so one more is told 503 and closed at once…
    let mut over = TcpStream::connect(e.metrics).await.unwrap();
    let (text, closed) = read_to_close(&mut over, Duration::from_millis(500)).await;
    assert!(closed && text.starts_with("HTTP/1.1 503 "), "{text:?}");
    // …while the ext_proc port goes on serving.
    let mut s = Stream::open(e.grpc).await;
    let r = s.request("/v1/models", &[], b"", 1, None).await;
    assert_eq!(r.immediate, None);
    // The silent ones are closed after the header timeout, and the port answers again.
    for tcp in &mut silent {
        let (_, closed) = read_to_close(tcp, Duration::from_secs(3)).await;
        assert!(closed, "a silent connection left open");
    }
    let mut tcp = TcpStream::connect(e.metrics).await.unwrap();
    tcp.write_all(b"GET /metrics HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        .await
        .unwrap();
    let (text, _) = read_to_close(&mut tcp, Duration::from_secs(3)).await;
    assert!(
        text.starts_with("HTTP/1.1 200 "),
        "{}",
        &text[..text.len().min(200)]
    );
    assert!(
        metric(&text, "pdgate_client_timeouts_total{kind=\"header\"}")
            >= MAX_SIDE_PORT_CONNECTIONS as u64,
        "silent connections counted"
    );
    assert!(metric(&text, "pdgate_client_connections_refused_total") >= 1);
}

#[tokio::test]
async fn the_ext_proc_port_closes_silent_and_non_grpc_connections_and_caps_the_rest() {
    let timeout = Duration::from_millis(500);
    let e = limited(limits(|l| {
        l.client.header_timeout = timeout;
        l.client.max_connections = 4;
    }))
    .await;
    // Not HTTP/2: closed at once.
    let mut http1 = TcpStream::connect(e.grpc).await.unwrap();
    http1
        .write_all(b"GET / HTTP/1.1\r\nhost: x\r\n\r\nmore bytes here")
        .await
        .unwrap();
    let (_, closed) = read_to_close(&mut http1, Duration::from_millis(300)).await;
    assert!(closed, "a non-HTTP/2 connection left open");
    let mut silent = Vec::new();
    for _ in 0..4 {
        silent.push(TcpStream::connect(e.grpc).await.unwrap());
    }
    wait_until(Duration::from_secs(2), "slots taken", || {
        e.epp.connections.ext_proc.open() == 4
    })
    .await;
    // Over the limit: closed at once, before any handshake.
    let mut over = TcpStream::connect(e.grpc).await.unwrap();
    let (_, closed) = read_to_close(&mut over, Duration::from_millis(300)).await;
    assert!(closed, "a connection over the limit left open");
    // The silent ones (no HTTP/2 preface) are closed after the header timeout…
    let start = Instant::now();
    for tcp in &mut silent {
        let (_, closed) = read_to_close(tcp, Duration::from_secs(3)).await;
        assert!(closed, "a silent connection left open");
    }
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "{:?}",
        start.elapsed()
    );
    // …and a data plane gets in again.
    wait_until(Duration::from_secs(2), "slots back", || {
        e.epp.connections.ext_proc.open() == 0
    })
    .await;
    let mut s = Stream::open(e.grpc).await;
    let r = s.request("/v1/models", &[], b"", 1, None).await;
    assert_eq!(r.immediate, None);
    let text = e.text();
    assert_eq!(
        metric(&text, "pdgate_client_timeouts_total{kind=\"header\"}"),
        4
    );
    assert_eq!(metric(&text, "pdgate_client_connections_refused_total"), 1);
    assert_eq!(e.workers.len(), 2);
}
