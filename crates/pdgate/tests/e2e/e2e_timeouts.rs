//! Upstream timeouts with LLM semantics (issue 9 item 1), on a paused tokio clock: the router
//! and fake engines run in one runtime on loopback, so a 65 s generation or a 300 s stall
//! takes no wall time. A non-streamed answer that takes 65 s is a 200 and never counts as a
//! failure; a head followed by silence ends a streamed leg with an SSE error event after the
//! idle timeout, and a non-streamed one with a 504, not retried; a stream past its total cap
//! ends with a 504 error event that spares the breaker. Also the other rows of the
//! failure rule that need a fake engine: an error object written as a bare JSON line inside
//! a 200 SSE stream, and a refused connection retried elsewhere.

use crate::support;

use axum::body::Body;
use axum::response::Response;
use futures_util::stream;
use pdgate_core::breaker::BreakerState;
use pdgate_scheduler::{Endpoint, Scheduler, DEFAULT_CONFIG_YAML};
use pdgate_server::{serve_on, EndpointSource, ServeOptions, ServerHandle};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// How a fake engine answers.
#[derive(Clone, Copy)]
enum Answer {
    /// A whole JSON completion after this long (vLLM's non-streamed answer).
    After(Duration),
    /// The head and one SSE chunk, then nothing.
    SseThenSilence,
    /// A JSON head, then nothing.
    HeadThenSilence,
    /// A 200 SSE stream with one chunk, then vLLM's error object as a bare JSON line.
    BareErrorLine,
    /// A 200 SSE stream sending one chunk every this long, never ending (never idle).
    Trickle(Duration),
}

/// What a fake engine saw: requests, and bodies dropped before their end (the client of
/// the engine — pdgate — went away).
#[derive(Default)]
struct Seen {
    requests: AtomicU64,
    dropped: AtomicU64,
}

/// Counts a body stream dropped before its end.
struct DropMark(Arc<Seen>);
impl Drop for DropMark {
    fn drop(&mut self) {
        self.0.dropped.fetch_add(1, Ordering::SeqCst);
    }
}

fn completion() -> Value {
    json!({"id": "cmpl-1", "object": "text_completion", "model": "m",
           "choices": [{"index": 0, "text": "hello", "finish_reason": "stop"}],
           "usage": {"prompt_tokens": 4, "completion_tokens": 1, "total_tokens": 5}})
}

async fn engine(answer: Answer) -> (String, Arc<Seen>) {
    let seen = Arc::new(Seen::default());
    let s = seen.clone();
    let app = axum::Router::new()
        .route(
            "/v1/completions",
            axum::routing::post(move || {
                let s = s.clone();
                async move {
                    s.requests.fetch_add(1, Ordering::SeqCst);
                    reply(answer, s).await
                }
            }),
        )
        .route(
            "/v1/models",
            axum::routing::get(|| async { axum::Json(json!({"data": [{"id": "m"}]})) }),
        );
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap().to_string();
    tokio::spawn(async move { axum::serve(l, app).await.unwrap() });
    (addr, seen)
}

async fn reply(answer: Answer, seen: Arc<Seen>) -> Response {
    let trickle_seen = seen.clone();
    let silent = move |first: &'static str| {
        let mark = DropMark(seen.clone());
        let chunks = stream::iter([Ok::<_, std::io::Error>(bytes::Bytes::from(first))])
            .chain(stream::pending())
            .map(move |c| {
                let _keep = &mark;
                c
            });
        Body::from_stream(chunks)
    };
    match answer {
        Answer::After(d) => {
            tokio::time::sleep(d).await;
            axum::Json(completion()).into_response()
        }
        Answer::SseThenSilence => Response::builder()
            .header("content-type", "text/event-stream")
            .body(silent("data: {\"choices\":[{\"text\":\"he\"}]}\n\n"))
            .unwrap(),
        Answer::BareErrorLine => Response::builder()
            .header("content-type", "text/event-stream")
            .body(Body::from(
                "data: {\"choices\":[{\"text\":\"he\"}]}\n\n\
                 {\"object\":\"error\",\"message\":\"engine died\",\"type\":\"InternalServerError\",\"param\":null,\"code\":500}\n\
                 data: {\"choices\":[{\"text\":\"never\"}]}\n\n",
            ))
            .unwrap(),
        Answer::Trickle(every) => {
            let mark = DropMark(trickle_seen);
            let chunks = stream::unfold((), move |()| async move {
                tokio::time::sleep(every).await;
                let chunk = bytes::Bytes::from_static(b"data: {\"choices\":[{\"text\":\"x\"}]}\n\n");
                Some((Ok::<_, std::io::Error>(chunk), ()))
            })
            .map(move |c| {
                let _keep = &mark;
                c
            });
            Response::builder()
                .header("content-type", "text/event-stream")
                .body(Body::from_stream(chunks))
                .unwrap()
        }
        Answer::HeadThenSilence => Response::builder()
            .header("content-type", "application/json")
            .body(silent(""))
            .unwrap(),
    }
}

use axum::response::IntoResponse;
use futures_util::StreamExt;

async fn router(engines: &[&str]) -> ServerHandle {
    router_with(engines, |_| {}).await
}

/// [`router`] with its options changed by `edit` first.
async fn router_with(engines: &[&str], edit: impl FnOnce(&mut ServeOptions)) -> ServerHandle {
    let eps = engines
        .iter()
        .enumerate()
        .map(|(i, a)| {
            let labels = BTreeMap::from([("llm-d.ai/role".into(), "decode".into())]);
            Endpoint::new(format!("e{i}"), a.to_string(), labels)
        })
        .collect();
    let scheduler = Arc::new(Scheduler::from_yaml(DEFAULT_CONFIG_YAML, "default").unwrap());
    let mut opts = ServeOptions::new(scheduler, EndpointSource::Static(eps));
    edit(&mut opts);
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    serve_on(l, opts).await.unwrap()
}

async fn post(h: &ServerHandle, stream: bool) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("http://{}/v1/completions", h.addr))
        .json(&json!({"model": "m", "prompt": "hi there", "max_tokens": 2000, "stream": stream}))
        .send()
        .await
        .unwrap()
}

/// A streamed request's SSE events (`data: …`, blank-line separated), asserting a 200 head and
/// that the stream ended `secs` seconds (paused clock) after the request, within 2 s.
async fn stream_ending_at(h: &ServerHandle, secs: u64) -> Vec<String> {
    let started = Instant::now();
    let r = post(h, true).await;
    assert_eq!(r.status(), 200);
    let text = r.text().await.unwrap();
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_secs(secs) && waited < Duration::from_secs(secs + 2),
        "{waited:?}"
    );
    text.split("\n\n")
        .filter(|e| !e.is_empty())
        .map(str::to_string)
        .collect()
}

fn metric(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or(0.0)
}

async fn metrics(h: &ServerHandle) -> String {
    reqwest::get(format!("http://{}/metrics", h.addr))
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_65_second_non_streamed_answer_is_a_200_and_never_a_failure() {
    let (a, seen) = engine(Answer::After(Duration::from_secs(65))).await;
    let h = router(&[&a]).await;
    for i in 0..5 {
        let started = Instant::now();
        let r = post(&h, false).await;
        assert_eq!(r.status(), 200, "request {i}");
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["choices"][0]["text"], "hello");
        assert!(started.elapsed() >= Duration::from_secs(65));
    }
    assert_eq!(seen.requests.load(Ordering::SeqCst), 5);
    assert_eq!(h.state.breakers.state("e0"), BreakerState::Closed);
    let snapshot = h.state.breakers.snapshot();
    assert!(
        snapshot.iter().all(|(_, _, failures, _)| *failures == 0),
        "{snapshot:?}"
    );
    let m = metrics(&h).await;
    assert_eq!(
        metric(
            &m,
            "pdgate_phase_requests_total{phase=\"aggregated\",status=\"200\"}"
        ),
        5.0
    );
    assert!(
        !m.contains("pdgate_upstream_failures_total{"),
        "no failure counted"
    );
    assert_eq!(h.state.in_flight_total(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_silent_stream_ends_with_an_sse_error_event_after_the_idle_timeout() {
    let (a, seen) = engine(Answer::SseThenSilence).await;
    let h = router(&[&a]).await;
    // The default idle timeout is 300 s: the error comes then, not before, not much after.
    let events = stream_ending_at(&h, 300).await;
    assert_eq!(events.len(), 3, "{events:?}");
    assert_eq!(events[0], "data: {\"choices\":[{\"text\":\"he\"}]}");
    let error: Value = serde_json::from_str(events[1].strip_prefix("data: ").unwrap()).unwrap();
    assert_eq!(
        error["error"],
        json!({"message": "upstream e0 failed mid-stream: sent nothing for 300000 ms",
               "type": "timeout_error", "code": 504}),
        "a stall is a timeout, as before streaming"
    );
    assert_eq!(events[2], "data: [DONE]");
    let m = metrics(&h).await;
    assert_eq!(metric(&m, "pdgate_stream_errors_total{kind=\"idle\"}"), 1.0);
    assert_eq!(h.state.in_flight_total(), 0, "booking released");
    // A stalled engine counts against its breaker (one consecutive failure).
    assert_eq!(h.state.breakers.snapshot()[0].2, 1);
    tokio::task::yield_now().await;
    assert_eq!(
        seen.dropped.load(Ordering::SeqCst),
        1,
        "the engine saw the abort"
    );
}

/// `--stream-total-timeout-secs` (and a coordinator file's `write_timeout`): a stream that
/// never stalls but outlives the cap ends at the cap with a 504 error event (it said 502 before
/// an adversarial try of issue 13), releases its booking, aborts the engine's request and does
/// not count against the engine's breaker (a long generation is not a sick engine).
#[tokio::test(start_paused = true)]
async fn a_stream_past_its_total_cap_ends_with_a_504_error_event_and_spares_the_breaker() {
    let (a, seen) = engine(Answer::Trickle(Duration::from_secs(10))).await;
    let h = router_with(&[&a], |o| {
        o.resilience.timeouts.stream_total = Some(Duration::from_secs(95))
    })
    .await;
    let events = stream_ending_at(&h, 95).await;
    // The chunks of 10 s … 90 s, the error event, [DONE].
    assert_eq!(events.len(), 11, "{events:?}");
    assert!(events[..9]
        .iter()
        .all(|e| *e == "data: {\"choices\":[{\"text\":\"x\"}]}"));
    let error: Value = serde_json::from_str(events[9].strip_prefix("data: ").unwrap()).unwrap();
    assert_eq!(
        error["error"],
        json!({"message": "upstream e0 failed mid-stream: did not finish within the stream's total cap",
               "type": "timeout_error", "code": 504})
    );
    assert_eq!(events[10], "data: [DONE]");
    let m = metrics(&h).await;
    assert_eq!(
        metric(&m, "pdgate_stream_errors_total{kind=\"deadline\"}"),
        1.0
    );
    assert_eq!(h.state.in_flight_total(), 0, "booking released");
    assert_eq!(h.state.breakers.state("e0"), BreakerState::Closed);
    let snapshot = h.state.breakers.snapshot();
    assert!(
        snapshot.iter().all(|(_, _, failures, _)| *failures == 0),
        "no failure counted: {snapshot:?}"
    );
    tokio::task::yield_now().await;
    assert_eq!(
        seen.dropped.load(Ordering::SeqCst),
        1,
        "the engine saw the abort"
    );
}

#[tokio::test(start_paused = true)]
async fn a_silent_non_streamed_body_is_a_504_after_the_body_timeout_and_not_retried() {
    let (a, seen_a) = engine(Answer::HeadThenSilence).await;
    let (b, seen_b) = engine(Answer::HeadThenSilence).await;
    let h = router(&[&a, &b]).await;
    let started = Instant::now();
    let r = post(&h, false).await;
    let waited = started.elapsed();
    assert_eq!(r.status(), 504);
    assert!(
        waited >= Duration::from_secs(300) && waited < Duration::from_secs(302),
        "{waited:?}"
    );
    let body: Value = r.json().await.unwrap();
    let msg = body["error"]["message"].as_str().unwrap();
    assert!(
        msg.ends_with("stalled while sending its body: body not complete 300000 ms after the head"),
        "{msg}"
    );
    let tries = seen_a.requests.load(Ordering::SeqCst) + seen_b.requests.load(Ordering::SeqCst);
    assert_eq!(tries, 1, "a timeout after the head is not retried");
    assert_eq!(h.state.in_flight_total(), 0);
    let m = metrics(&h).await;
    assert_eq!(
        metric(
            &m,
            "pdgate_upstream_failures_total{kind=\"body_timeout\",phase=\"aggregated\"}"
        ),
        1.0
    );
}

#[tokio::test(start_paused = true)]
async fn a_bare_json_error_line_in_a_stream_becomes_an_sse_error_event_and_ends_it() {
    let (a, _) = engine(Answer::BareErrorLine).await;
    let h = router(&[&a]).await;
    let r = post(&h, true).await;
    assert_eq!(r.status(), 200);
    let text = r.text().await.unwrap();
    assert_eq!(
        text,
        "data: {\"choices\":[{\"text\":\"he\"}]}\n\n\
         data: {\"error\":{\"code\":500,\"message\":\"engine died\",\"param\":null,\"type\":\"InternalServerError\"}}\n\n\
         data: [DONE]\n\n"
    );
    let m = metrics(&h).await;
    assert_eq!(
        metric(&m, "pdgate_stream_errors_total{kind=\"engine_error\"}"),
        1.0
    );
    assert_eq!(h.state.in_flight_total(), 0);
    // The engine's own error is not the endpoint's ill health.
    assert!(h.state.breakers.snapshot().is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_refused_connection_is_retried_on_another_endpoint() {
    let dead = support::vllm::dead_address().await;
    let (b, seen_b) = engine(Answer::After(Duration::from_millis(10))).await;
    let h = router(&[&dead, &b]).await;
    // Bind the session to the dead endpoint so that it is tried first.
    (h.state.sessions).bind_names("s", None, Some("e0".into()), Instant::now());
    let r = reqwest::Client::new()
        .post(format!("http://{}/v1/completions", h.addr))
        .header("x-session-id", "s")
        .json(&json!({"model": "m", "prompt": "hi there", "max_tokens": 5}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["x-pdgate-decode-endpoint"], "e1");
    assert_eq!(seen_b.requests.load(Ordering::SeqCst), 1);
    let m = metrics(&h).await;
    assert_eq!(
        metric(
            &m,
            "pdgate_upstream_failures_total{kind=\"connect_refused\",phase=\"aggregated\"}"
        ),
        1.0
    );
    assert_eq!(
        metric(&m, "pdgate_retries_total{phase=\"aggregated\"}"),
        1.0
    );
    assert_eq!(
        h.state.breakers.snapshot()[0].2,
        1,
        "one failure on e0's breaker"
    );
}
