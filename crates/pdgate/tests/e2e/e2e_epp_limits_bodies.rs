//! `pdgate epp`'s request-body limits: the in-flight body budget (429 as serve, leases given back;
//! the budget's own accounting asserted) and the body timeout (408). Each hostile case against the
//! real EPP over real gRPC with simulator workers on loopback (issue 26). The EPP under limits is
//! `support::limited_epp`, the raw stream `support::raw_ext_proc`; timeouts are a few hundred ms
//! and every wait is bounded.

use crate::support;

use envoy_types::pb::envoy::service::ext_proc::v3::processing_response::Response;
use serde_json::json;
use std::time::{Duration, Instant};
use support::limited_epp::{limited, limits};
use support::raw_ext_proc::{body_msg, header_of, headers_msg, message_of, open, post, status_of};
use support::{metric, wait_until};

/// A completions body of about `len` bytes (a long text prompt).
fn long_completion(len: usize) -> Vec<u8> {
    let prompt = "word ".repeat(len / 5);
    serde_json::to_vec(&json!({"model": "pdgate-sim", "prompt": prompt, "max_tokens": 1})).unwrap()
}

#[tokio::test]
async fn bodies_past_the_inflight_budget_get_serves_429_and_leases_come_back() {
    const BUDGET: usize = 1 << 20;
    let e = limited(limits(|l| l.client.max_inflight_body_bytes = BUDGET)).await;
    let budget = e.epp.body_budget.clone();
    let mut c = e.client().await;
    let body = long_completion(400 << 10);
    let (head, tail) = body.split_at(body.len() - 10);
    // Two bodies held mid-way: 2 × ~400 KiB of the 1 MiB budget.
    let mut a = open(&mut c).await.unwrap();
    let b = open(&mut c).await.unwrap();
    for s in [&a, &b] {
        s.send(headers_msg(post(&[]), false)).await;
        s.send(body_msg(head, false)).await;
    }
    let held = 2 * head.len();
    wait_until(Duration::from_secs(5), "both bodies leased", || {
        budget.used() == held
    })
    .await;
    // A third would pass the budget: refused as serve refuses it (429, Retry-After, body).
    let mut third = open(&mut c).await.unwrap();
    third.send(headers_msg(post(&[]), false)).await;
    third.send(body_msg(head, false)).await;
    let i = third.immediate().await;
    let serve = pdgate_core::errors::ApiError::BodyBudget { limit: BUDGET }
        .into_parts(Some(pdgate_api::ApiKind::Completions));
    assert_eq!(status_of(&i), serve.0.as_u16());
    assert_eq!(status_of(&i), 429);
    assert_eq!(header_of(&i, "retry-after").as_deref(), Some("1"));
    assert_eq!(i.body, serve.2, "the same error body as serve");
    // A declared length the budget cannot take is refused at its headers.
    let mut declared = open(&mut c).await.unwrap();
    let len = (400 << 10).to_string();
    declared
        .send(headers_msg(post(&[("content-length", &len)]), false))
        .await;
    assert_eq!(status_of(&declared.immediate().await), 429);
    assert_eq!(budget.used(), held, "refused bodies hold nothing");
    // A finished body is routed and handed on: its lease comes back once Envoy took it.
    a.send(body_msg(tail, true)).await;
    let mut forwarded = 0;
    loop {
        match a
            .next(Duration::from_secs(5))
            .await
            .unwrap()
            .unwrap()
            .response
        {
            Some(Response::RequestHeaders(_)) => {}
            Some(Response::RequestBody(r)) => {
                let m = r.response.unwrap().body_mutation.unwrap().mutation.unwrap();
                let envoy_types::pb::envoy::service::ext_proc::v3::body_mutation::Mutation::StreamedResponse(s) = m else {
                    panic!("not streamed")
                };
                forwarded += s.body.len();
                if s.end_of_stream {
                    break;
                }
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(forwarded, body.len());
    wait_until(Duration::from_secs(5), "a's lease back", || {
        budget.used() == head.len()
    })
    .await;
    // A stream reset mid-body gives its lease back with it.
    drop(b);
    wait_until(Duration::from_secs(5), "b's lease back", || {
        budget.used() == 0
    })
    .await;
    let text = e.text();
    assert_eq!(metric(&text, "pdgate_body_budget_refusals_total"), 2);
    assert_eq!(metric(&text, "pdgate_inflight_body_bytes"), 0);
    assert_eq!(
        metric(
            &text,
            "pdgate_requests_total{api=\"ext_proc\",status=\"429\"}"
        ),
        2
    );
}

#[tokio::test]
async fn a_body_that_does_not_end_in_time_is_answered_408_and_its_lease_returned() {
    let e = limited(limits(|l| {
        l.client.body_timeout = Duration::from_millis(300)
    }))
    .await;
    let mut c = e.client().await;
    let mut s = open(&mut c).await.unwrap();
    let start = Instant::now();
    s.send(headers_msg(post(&[]), false)).await;
    s.send(body_msg(&[b' '; 100 << 10], false)).await;
    let i = s.immediate().await;
    let waited = start.elapsed();
    assert_eq!(status_of(&i), 408);
    assert!(
        message_of(&i).contains("not received within 300 ms"),
        "{}",
        message_of(&i)
    );
    assert!(
        waited >= Duration::from_millis(300) && waited < Duration::from_secs(3),
        "{waited:?}"
    );
    wait_until(Duration::from_secs(2), "lease back", || {
        e.epp.body_budget.used() == 0
    })
    .await;
    let text = e.text();
    assert_eq!(
        metric(&text, "pdgate_client_timeouts_total{kind=\"body\"}"),
        1
    );
    assert_eq!(
        metric(&text, "pdgate_epp_stream_timeouts_total{phase=\"body\"}"),
        1
    );
}
