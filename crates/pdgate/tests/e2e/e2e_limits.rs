//! Bounded reads (issue 10 item 3): an engine's non-streamed answer is read up to
//! `MAX_ANSWER_BYTES`, and a larger one fails as a broken body instead of filling memory. A
//! fake engine on 127.0.0.1:0 streams the oversized answer without holding it.

use crate::support;

use axum::body::Body;
use axum::response::IntoResponse;
use bytes::Bytes;
use pdgate_server::MAX_ANSWER_BYTES;
use serde_json::json;
use support::{fake_engine, send, url};

#[tokio::test]
async fn an_answer_over_the_cap_is_a_502_not_a_memory_spike() {
    const CHUNK: usize = 1 << 20;
    let engine = fake_engine("/v1/completions", |_| {
        // An error body of 80 MiB, sent 1 MiB at a time.
        let chunks = (0..80).map(|_| Ok::<_, std::io::Error>(Bytes::from(vec![b'x'; CHUNK])));
        let body = Body::from_stream(futures_util::stream::iter(chunks));
        (http::StatusCode::BAD_REQUEST, body).into_response()
    })
    .await;
    let r = support::decode_router(&engine.addr).await;
    let reply = send(&url(&r), &[], &json!({"model": "m", "prompt": "hi"})).await;
    assert_eq!(reply.status, 502, "{}", reply.body);
    let message = reply.body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains(&format!("answer over {MAX_ANSWER_BYTES} bytes")),
        "{message}"
    );
}

#[tokio::test]
async fn a_streamed_line_that_never_ends_is_cut_with_an_error_event() {
    const CHUNK: usize = 1 << 20;
    let engine = fake_engine("/v1/completions", |_| {
        // One `data:` line of 20 MiB, never ended.
        let head = std::iter::once(Ok::<_, std::io::Error>(Bytes::from_static(
            b"data: {\"a\":\"",
        )));
        let rest = (0..20).map(|_| Ok(Bytes::from(vec![b'x'; CHUNK])));
        let body = Body::from_stream(futures_util::stream::iter(head.chain(rest)));
        ([("content-type", "text/event-stream")], body).into_response()
    })
    .await;
    let r = support::decode_router(&engine.addr).await;
    let streamed = json!({"model": "m", "prompt": "hi", "stream": true});
    let (status, _, text) = support::stream_text(&url(&r), &streamed).await;
    assert_eq!(status, 200);
    assert!(
        text.len() < 1024,
        "the held line is dropped: {} bytes",
        text.len()
    );
    assert!(
        text.contains("sent an SSE line over 4194304 bytes"),
        "{text}"
    );
    assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
    let m = support::metrics(&url(&r)).await;
    assert_eq!(
        support::metric(&m, "pdgate_stream_errors_total{kind=\"oversized_line\"}"),
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scrapes_of_a_large_fleet_run_at_most_64_at_a_time() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    // One slow engine address behind 150 endpoint names: each /metrics takes 300 ms.
    let (now, peak, served) = (
        Arc::new(AtomicUsize::new(0)),
        Arc::new(AtomicUsize::new(0)),
        Arc::new(AtomicUsize::new(0)),
    );
    let (n, p, s) = (now.clone(), peak.clone(), served.clone());
    let app = axum::Router::new().route(
        "/metrics",
        axum::routing::get(move || {
            let (n, p, s) = (n.clone(), p.clone(), s.clone());
            async move {
                let c = n.fetch_add(1, Ordering::SeqCst) + 1;
                p.fetch_max(c, Ordering::SeqCst);
                tokio::time::sleep(std::time::Duration::from_millis(300)).await;
                n.fetch_sub(1, Ordering::SeqCst);
                s.fetch_add(1, Ordering::SeqCst);
                "vllm:num_requests_running 0\n"
            }
        }),
    );
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap().to_string();
    tokio::spawn(async move { axum::serve(l, app).await.unwrap() });
    let eps = (0..150)
        .map(|i| pdgate_scheduler::Endpoint::new(format!("e{i}"), addr.clone(), Default::default()))
        .collect();
    let _r = pdgate_scenario::fleet::router_with(eps, pdgate_scheduler::DEFAULT_CONFIG_YAML, |o| {
        o.scrape_interval = std::time::Duration::from_millis(100)
    })
    .await
    .unwrap();
    support::wait_until(std::time::Duration::from_secs(10), "150 scrapes", || {
        served.load(Ordering::SeqCst) >= 150
    })
    .await;
    let peak = peak.load(Ordering::SeqCst);
    assert_eq!(
        peak,
        pdgate_fleet::scrape::MAX_CONCURRENT_SCRAPES,
        "peak {peak}"
    );
}

#[tokio::test]
async fn a_dead_endpoint_is_scraped_ever_less_often() {
    let dead = support::vllm::dead_address().await;
    let role = std::collections::BTreeMap::from([(
        pdgate_api::labels::ROLE.to_string(),
        "decode".to_string(),
    )]);
    let endpoints = vec![pdgate_scheduler::Endpoint::new("d0", &dead, role)];
    let r = pdgate_scenario::fleet::router_with(
        endpoints,
        pdgate_scheduler::DEFAULT_CONFIG_YAML,
        |o| o.scrape_interval = std::time::Duration::from_millis(20),
    )
    .await
    .unwrap();
    // 100 ticks of 20 ms: without back-off, 100 failed scrapes; with waits of 1, 1, 2, 4, 8,
    // 16, 32, 64 ticks, about 8.
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    let failed = r.state.metrics.scrape_errors.get();
    assert!((5..=12).contains(&failed), "{failed} failed scrapes in 2 s");
}
