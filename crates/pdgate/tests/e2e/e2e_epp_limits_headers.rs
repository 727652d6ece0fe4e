//! `pdgate epp`'s request-header limits: one request-headers message per stream, and header lists
//! over the field or byte limit answered 431, never a panic. Each hostile case against the real EPP
//! over real gRPC with simulator workers on loopback (issue 26). The EPP under limits is
//! `support::limited_epp`, the raw stream `support::raw_ext_proc`; timeouts are a few hundred ms
//! and every wait is bounded.

use crate::support;

use envoy_types::pb::envoy::config::core::v3::HeaderValue;
use pdgate_epp::EppLimits;
use support::envoy::{self, Stream, JSON};
use support::limited_epp::limited;
use support::metric;
use support::raw_ext_proc::{headers_msg, message_of, open, post, status_of};

#[tokio::test]
async fn a_second_request_headers_message_on_a_stream_is_refused_400() {
    let e = limited(EppLimits::default()).await;
    let mut c = e.client().await;
    let mut s = open(&mut c).await.unwrap();
    s.send(headers_msg(post(&[]), false)).await;
    s.send(headers_msg(post(&[("x-again", "1")]), false)).await;
    let i = s.immediate().await;
    assert_eq!(status_of(&i), 400);
    assert!(
        message_of(&i).contains("second request headers"),
        "{}",
        message_of(&i)
    );
    // Answered once: further headers messages (issue 26 sent 150 of 3.9 MB) get nothing.
    for _ in 0..3 {
        s.send(headers_msg(post(&[]), false)).await;
    }
    drop(s.tx);
    assert!(
        matches!(s.rx.message().await, Ok(None)),
        "the stream ends cleanly"
    );
    let text = e.text();
    assert_eq!(
        metric(
            &text,
            "pdgate_epp_refusals_total{reason=\"duplicate_request_headers\"}"
        ),
        1
    );
    assert_eq!(
        metric(
            &text,
            "pdgate_requests_total{api=\"ext_proc\",status=\"400\"}"
        ),
        1
    );
}

#[tokio::test]
async fn header_lists_over_the_limits_are_answered_431_never_a_panic() {
    use pdgate_epp::limits::{MAX_REQUEST_HEADERS, MAX_REQUEST_HEADER_BYTES};
    let e = limited(EppLimits::default()).await;
    let mut c = e.client().await;
    let named = |n: usize| {
        let mut h = post(&[]);
        h.headers.extend((0..n).map(|i| HeaderValue {
            key: format!("x-h-{i}"),
            raw_value: b"v".to_vec(),
            ..Default::default()
        }));
        h
    };
    // 40,000 distinct names: past http::HeaderMap's 32,768 (a panic of the stream task
    // before), and 101 fields (content-type included): both one over serve's limit.
    for (extra, fields) in [
        (40_000, 40_001),
        (MAX_REQUEST_HEADERS, MAX_REQUEST_HEADERS + 1),
    ] {
        let mut s = open(&mut c).await.unwrap();
        s.send(headers_msg(named(extra), false)).await;
        let i = s.immediate().await;
        assert_eq!(status_of(&i), 431, "{extra} names");
        let m = message_of(&i);
        assert!(
            m.contains(&format!(
                "{fields} header fields; the limit is {MAX_REQUEST_HEADERS}"
            )),
            "{m}"
        );
    }
    // One header of 3.9 MB (issue 26 kept 150 of them on one stream): refused, named.
    let mut s = open(&mut c).await.unwrap();
    let big = "v".repeat(3_900_000);
    s.send(headers_msg(post(&[("x-big", &big)]), false)).await;
    let i = s.immediate().await;
    assert_eq!(status_of(&i), 431);
    let m = message_of(&i);
    assert!(
        m.contains(&format!("the limit is {MAX_REQUEST_HEADER_BYTES}")),
        "{m}"
    );
    // At the limit (99 more names and content-type: 100 fields) the request is routed.
    let mut s = Stream::open(e.grpc).await;
    let h: Vec<(String, String)> = (0..MAX_REQUEST_HEADERS - 1)
        .map(|i| (format!("x-h-{i}"), "v".to_string()))
        .collect();
    let mut pairs: Vec<(&str, &str)> = h.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    pairs.push(JSON);
    let body = serde_json::to_vec(&envoy::completion(0, 16, false)).unwrap();
    let r = s
        .request("/v1/completions", &pairs, &body, 1000, None)
        .await;
    assert_eq!(r.immediate, None, "{:?}", r.immediate_json());
    let text = e.text();
    assert_eq!(
        metric(
            &text,
            "pdgate_epp_refusals_total{reason=\"too_many_headers\"}"
        ),
        2
    );
    assert_eq!(
        metric(
            &text,
            "pdgate_epp_refusals_total{reason=\"headers_too_large\"}"
        ),
        1
    );
    assert_eq!(
        metric(
            &text,
            "pdgate_requests_total{api=\"ext_proc\",status=\"431\"}"
        ),
        3
    );
}
