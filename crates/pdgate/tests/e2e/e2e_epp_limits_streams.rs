//! `pdgate epp`'s stream limits: the total cap (RESOURCE_EXHAUSTED), the per-connection cap, and
//! the waits (a silent stream, a routed stream left idle). Each hostile case against the real EPP
//! over real gRPC with simulator workers on loopback (issue 26). The EPP under limits is
//! `support::limited_epp`, the raw stream `support::raw_ext_proc`; timeouts are a few hundred ms
//! and every wait is bounded.

use crate::support;

use envoy_types::pb::envoy::service::ext_proc::v3::processing_response::Response;
use std::time::{Duration, Instant};
use support::envoy;
use support::limited_epp::{limited, limits};
use support::raw_ext_proc::{body_msg, headers_msg, open, post};
use support::{metric, wait_until};

#[tokio::test]
async fn streams_past_the_cap_are_refused_resource_exhausted_and_slots_come_back() {
    let e = limited(limits(|l| l.max_streams = 3)).await;
    let mut c = e.client().await;
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(open(&mut c).await.unwrap());
    }
    assert_eq!(e.streams_open(), 3);
    let mut refused = 0;
    for _ in 0..5 {
        let status = open(&mut c).await.err().expect("refused");
        assert_eq!(status.code(), tonic::Code::ResourceExhausted);
        assert!(
            status.message().contains("--max-ext-proc-streams"),
            "{status:?}"
        );
        refused += 1;
    }
    // The held streams still work.
    held[0].send(headers_msg(post(&[]), true)).await;
    let answer = held[0].next(Duration::from_secs(5)).await.unwrap().unwrap();
    assert!(
        matches!(answer.response, Some(Response::RequestHeaders(_))),
        "{answer:?}"
    );
    // A stream that ends gives its slot back.
    held.pop();
    wait_until(Duration::from_secs(5), "a slot back", || {
        e.streams_open() == 2
    })
    .await;
    assert!(open(&mut c).await.is_ok());
    let text = e.text();
    assert_eq!(metric(&text, "pdgate_epp_streams_refused_total"), refused);
    assert_eq!(metric(&text, "pdgate_epp_streams"), 3);
}

#[tokio::test]
async fn one_connection_holds_at_most_its_stream_limit() {
    let e = limited(limits(|l| l.max_streams_per_connection = 2)).await;
    let mut c = e.client().await;
    let first = open(&mut c).await.unwrap();
    let _second = open(&mut c).await.unwrap();
    // The third waits on this connection (HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS = 2)…
    let mut c3 = c.clone();
    let mut third = tokio::spawn(async move { open(&mut c3).await.map(|_| ()) });
    assert!(
        tokio::time::timeout(Duration::from_millis(500), &mut third)
            .await
            .is_err(),
        "a third stream on the same connection must wait"
    );
    assert_eq!(e.streams_open(), 2);
    // …while another connection opens one at once.
    let mut other = e.client().await;
    assert!(open(&mut other).await.is_ok());
    // And it goes on once one of the two ends.
    drop(first);
    let opened = tokio::time::timeout(Duration::from_secs(5), third).await;
    assert!(matches!(opened, Ok(Ok(Ok(())))), "{opened:?}");
}

/// `status` ended a stream (DEADLINE_EXCEEDED) for the wait that `flag` bounds, within `limit`
/// of `start`.
fn assert_ended_by(status: &tonic::Status, flag: &str, start: Instant, limit: Duration) {
    assert_eq!(status.code(), tonic::Code::DeadlineExceeded);
    assert!(status.message().contains(flag), "{status:?}");
    assert!(start.elapsed() < limit, "{:?}", start.elapsed());
}

#[tokio::test]
async fn a_stream_that_sends_nothing_is_ended_after_the_header_timeout() {
    let e = limited(limits(|l| {
        l.client.header_timeout = Duration::from_millis(300)
    }))
    .await;
    let mut c = e.client().await;
    let mut s = open(&mut c).await.unwrap();
    assert_eq!(e.streams_open(), 1);
    let start = Instant::now();
    let end = s.next(Duration::from_secs(3)).await;
    let status = end.expect_err("ended with a status");
    assert_ended_by(
        &status,
        "--client-header-timeout-ms",
        start,
        Duration::from_secs(2),
    );
    wait_until(Duration::from_secs(2), "the slot back", || {
        e.streams_open() == 0
    })
    .await;
    assert_eq!(
        metric(
            &e.text(),
            "pdgate_epp_stream_timeouts_total{phase=\"headers\"}"
        ),
        1
    );
}

#[tokio::test]
async fn a_routed_stream_left_idle_is_ended_and_its_booking_released() {
    let e = limited(limits(|l| l.idle_timeout = Duration::from_millis(400))).await;
    let mut c = e.client().await;
    let mut s = open(&mut c).await.unwrap();
    let body = serde_json::to_vec(&envoy::completion(0, 32, false)).unwrap();
    s.send(headers_msg(post(&[]), false)).await;
    s.send(body_msg(&body, true)).await;
    // Routed: the headers answer, then the body back.
    let mut answers = 0;
    while answers < 2 {
        let a = s.next(Duration::from_secs(5)).await.unwrap().unwrap();
        assert!(
            matches!(
                a.response,
                Some(Response::RequestHeaders(_) | Response::RequestBody(_))
            ),
            "{a:?}"
        );
        answers += 1;
    }
    assert_eq!(e.in_flight(), 1, "booked at pick time");
    // The data plane never sends the response: the stream is ended, the booking released.
    let start = Instant::now();
    let status = s.next(Duration::from_secs(5)).await.expect_err("ended");
    assert_ended_by(
        &status,
        "--ext-proc-idle-timeout-ms",
        start,
        Duration::from_secs(3),
    );
    wait_until(Duration::from_secs(2), "booking released", || {
        e.in_flight() == 0
    })
    .await;
    wait_until(Duration::from_secs(2), "stream slot back", || {
        e.streams_open() == 0
    })
    .await;
    let text = e.text();
    assert_eq!(
        metric(
            &text,
            "pdgate_epp_stream_timeouts_total{phase=\"upstream\"}"
        ),
        1
    );
    assert_eq!(metric(&text, "pdgate_epp_stream_resets_total"), 1);
    assert_eq!(
        metric(
            &text,
            "pdgate_requests_total{api=\"ext_proc\",status=\"499\"}"
        ),
        1
    );
}
