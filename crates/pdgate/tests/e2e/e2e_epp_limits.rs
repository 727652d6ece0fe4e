//! What a data plane (or anyone reaching its ports) may hold of `pdgate epp` (issue 26), each
//! hostile case against the real EPP over real gRPC — the stand-in Envoy (`support::envoy`),
//! a raw tonic client, or raw TCP — with simulator workers on loopback. Timeouts are set to a
//! few hundred ms and every wait is bounded; memory cases assert the in-flight budget's own
//! accounting and the refusal of what would pass it.

use crate::support;

use envoy_types::pb::envoy::config::core::v3::{HeaderMap, HeaderValue};
use envoy_types::pb::envoy::service::ext_proc::v3::external_processor_client::ExternalProcessorClient;
use envoy_types::pb::envoy::service::ext_proc::v3::{
    processing_request::Request, processing_response::Response, HttpBody, HttpHeaders,
    ImmediateResponse, ProcessingRequest, ProcessingResponse,
};
use pdgate_epp::{Epp, EppLimits, EppOptions};
use pdgate_scheduler::{Scheduler, DEFAULT_CONFIG_YAML};
use serde_json::json;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::envoy::{self, envoy_headers, Stream, JSON};
use support::{endpoints, metric, sim_config, sim_workers, spec, wait_until};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tonic::transport::Channel;

/// An EPP in-process over two simulator workers, under `limits`: its ext_proc and metrics
/// ports.
struct Limited {
    epp: Arc<Epp>,
    grpc: SocketAddr,
    metrics: SocketAddr,
    workers: Vec<pdgate_sim::WorkerHandle>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for Limited {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl Limited {
    fn text(&self) -> String {
        String::from_utf8(pdgate_epp::service::render_metrics(&self.epp)).unwrap()
    }

    fn in_flight(&self) -> u32 {
        let snap = self.epp.registry.snapshot();
        snap.endpoints.iter().map(|e| e.load.in_flight()).sum()
    }

    fn streams_open(&self) -> usize {
        self.epp.limits.max_streams - self.epp.streams.available_permits()
    }

    async fn client(&self) -> ExternalProcessorClient<Channel> {
        ExternalProcessorClient::connect(format!("http://{}", self.grpc))
            .await
            .unwrap()
    }
}

/// Limits for the tests: the defaults with `f` applied.
fn limits(f: impl FnOnce(&mut EppLimits)) -> EppLimits {
    let mut l = EppLimits::default();
    f(&mut l);
    l
}

async fn limited(limits: EppLimits) -> Limited {
    let workers = sim_workers(
        vec![spec("w0", "decode", None), spec("w1", "decode", None)],
        sim_config(50.0),
    )
    .await;
    let scheduler = Arc::new(Scheduler::from_yaml(DEFAULT_CONFIG_YAML, "test config").unwrap());
    let source = pdgate_fleet::EndpointSource::Static(endpoints(&workers));
    let mut opts = EppOptions::new(scheduler, source);
    opts.limits = limits;
    let (epp, mut tasks) = Epp::start(opts).await.unwrap();
    let grpc = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let metrics = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let (grpc_addr, metrics_addr) = (grpc.local_addr().unwrap(), metrics.local_addr().unwrap());
    let e = epp.clone();
    tasks.push(tokio::spawn(async move {
        pdgate_epp::service::serve_ext_proc(e, grpc, std::future::pending())
            .await
            .unwrap();
    }));
    tasks.push(tokio::spawn(pdgate_epp::service::serve_metrics(
        epp.clone(),
        metrics,
    )));
    wait_until(Duration::from_secs(5), "endpoints known", || epp.ready()).await;
    Limited {
        epp,
        grpc: grpc_addr,
        metrics: metrics_addr,
        workers,
        tasks,
    }
}

/// One ext_proc stream driven message by message, whatever the EPP answers.
struct Raw {
    tx: mpsc::Sender<ProcessingRequest>,
    rx: tonic::Streaming<ProcessingResponse>,
}

async fn open(client: &mut ExternalProcessorClient<Channel>) -> Result<Raw, tonic::Status> {
    let (tx, rx) = mpsc::channel(64);
    let rx = client
        .process(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await?
        .into_inner();
    Ok(Raw { tx, rx })
}

impl Raw {
    async fn send(&self, request: Request) {
        let msg = ProcessingRequest {
            request: Some(request),
            ..Default::default()
        };
        self.tx.send(msg).await.unwrap();
    }

    /// The next message or the stream's end, within `within` (else the test fails).
    async fn next(
        &mut self,
        within: Duration,
    ) -> Result<Option<ProcessingResponse>, tonic::Status> {
        tokio::time::timeout(within, self.rx.message())
            .await
            .expect("an answer or the stream's end in time")
    }

    /// The immediate response that must come next (within 5 s).
    async fn immediate(&mut self) -> ImmediateResponse {
        let answer = self.next(Duration::from_secs(5)).await;
        match answer.map(|m| m.and_then(|m| m.response)) {
            Ok(Some(Response::ImmediateResponse(i))) => i,
            other => panic!("expected an immediate response, got {other:?}"),
        }
    }
}

fn headers_msg(h: HeaderMap, end_of_stream: bool) -> Request {
    Request::RequestHeaders(HttpHeaders {
        headers: Some(h),
        end_of_stream,
        ..Default::default()
    })
}

fn body_msg(bytes: &[u8], end_of_stream: bool) -> Request {
    Request::RequestBody(HttpBody {
        body: bytes.to_vec(),
        end_of_stream,
        ..Default::default()
    })
}

/// `POST /v1/completions` headers, with `extra` pairs.
fn post(extra: &[(&str, &str)]) -> HeaderMap {
    let mut h = vec![
        (":method", "POST"),
        (":path", "/v1/completions"),
        (":authority", "gateway"),
        JSON,
    ];
    h.extend_from_slice(extra);
    envoy_headers(&h)
}

fn status_of(i: &ImmediateResponse) -> u16 {
    i.status.as_ref().map_or(0, |s| s.code as u16)
}

fn header_of(i: &ImmediateResponse, name: &str) -> Option<String> {
    let m = i.headers.as_ref()?;
    m.set_headers
        .iter()
        .filter_map(|o| o.header.as_ref())
        .find(|h| h.key == name)
        .map(|h| String::from_utf8_lossy(&h.raw_value).into_owned())
}

fn message_of(i: &ImmediateResponse) -> String {
    let v: serde_json::Value = serde_json::from_slice(&i.body).unwrap();
    v["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

// ---------------------------------------------------------------------------------------
// Request headers
// ---------------------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------------------
// Request bodies: the in-flight budget and the body timeout
// ---------------------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------------------
// Streams: the total cap, the per-connection cap, the waits
// ---------------------------------------------------------------------------------------

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
    assert_eq!(status.code(), tonic::Code::DeadlineExceeded);
    assert!(
        status.message().contains("--client-header-timeout-ms"),
        "{status:?}"
    );
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "{:?}",
        start.elapsed()
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
    assert_eq!(status.code(), tonic::Code::DeadlineExceeded);
    assert!(
        status.message().contains("--ext-proc-idle-timeout-ms"),
        "{status:?}"
    );
    assert!(
        start.elapsed() < Duration::from_secs(3),
        "{:?}",
        start.elapsed()
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

// ---------------------------------------------------------------------------------------
// The response path: SSE lines, status labels
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn an_sse_line_past_4_mib_passes_through_unchanged_and_stops_usage_reading() {
    use pdgate_epp::usage::MAX_SSE_LINE_BYTES;
    let e = limited(EppLimits::default()).await;
    let sse = vec![("content-type".to_string(), "text/event-stream".to_string())];
    let usage = b"data: {\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":2,\"total_tokens\":7}}\n\ndata: [DONE]\n\n";
    let answer = |line_bytes: usize| {
        let mut body = b"data: ".to_vec();
        body.resize(6 + line_bytes, b'x');
        body.extend_from_slice(b"\n\n");
        body.extend_from_slice(usage);
        // Chunks of at most one answer each (62,000 bytes), as Envoy's are.
        body.chunks(60_000).map(<[u8]>::to_vec).collect::<Vec<_>>()
    };
    let body = serde_json::to_vec(&envoy::completion(0, 16, true)).unwrap();
    let prompt = "pdgate_epp_usage_tokens_total{kind=\"prompt\"}";
    for (line, read) in [(1_000, true), (MAX_SSE_LINE_BYTES + 1, false)] {
        let before = metric(&e.text(), prompt);
        let mut s = Stream::open(e.grpc).await;
        let r = s
            .request("/v1/completions", &[JSON], &body, 4096, None)
            .await;
        assert_eq!(r.immediate, None);
        let chunks = answer(line);
        let (_, passed) = s.respond(200, &sse, &chunks, Some(&r.destination())).await;
        assert_eq!(passed, chunks.concat(), "the client gets every byte");
        let added = metric(&e.text(), prompt) - before;
        assert_eq!(added, if read { 5 } else { 0 }, "line of {line} bytes");
        assert_eq!(e.in_flight(), 0, "released at the end of the answer");
    }
    let text = e.text();
    assert_eq!(
        metric(
            &text,
            "pdgate_epp_usage_unread_total{reason=\"line_too_long\"}"
        ),
        1
    );
    assert_eq!(
        metric(
            &text,
            "pdgate_requests_total{api=\"ext_proc\",status=\"200\"}"
        ),
        2
    );
}

#[tokio::test]
async fn status_labels_from_the_data_plane_are_bounded() {
    let e = limited(EppLimits::default()).await;
    let odd: Vec<u16> = (600..650).chain([0, 99, 1000, u16::MAX]).collect();
    for status in odd.iter().copied().chain([200, 503]) {
        let mut s = Stream::open(e.grpc).await;
        let r = s.request("/v1/models", &[], b"", 1, None).await;
        assert_eq!(r.immediate, None);
        s.respond(status, &[], &[], None).await;
    }
    let text = e.text();
    let labels: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("pdgate_requests_total{api=\"ext_proc\""))
        .collect();
    assert_eq!(labels.len(), 3, "{labels:#?}");
    let other = "pdgate_requests_total{api=\"ext_proc\",status=\"other\"}";
    assert_eq!(metric(&text, other), odd.len() as u64);
    assert_eq!(
        metric(
            &text,
            "pdgate_requests_total{api=\"ext_proc\",status=\"200\"}"
        ),
        1
    );
    assert_eq!(
        metric(
            &text,
            "pdgate_requests_total{api=\"ext_proc\",status=\"503\"}"
        ),
        1
    );
}

// ---------------------------------------------------------------------------------------
// Connections: the metrics port, the ext_proc port
// ---------------------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------------------
// Issue 26's measurements, against the real binary (by hand: `-- --ignored --nocapture`)
// ---------------------------------------------------------------------------------------

/// The pid of the `pdgate epp` whose command line holds `marker`.
fn pid_of(marker: &str) -> u32 {
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        if String::from_utf8_lossy(&cmdline).contains(marker) {
            return pid;
        }
    }
    panic!("no process with {marker}")
}

/// Resident memory of `pid`, MB.
fn rss_mb(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    kb / 1024.0
}

fn fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

/// A fresh `pdgate epp` (default limits) over `worker`: its ext_proc and metrics addresses
/// and pid.
fn binary(worker: &str, case: &str) -> (support::process::Served, SocketAddr, SocketAddr, u32) {
    let marker = format!("issue26-{case}-{}", std::process::id());
    let p = support::process::epp(
        &[
            "--endpoint",
            worker,
            "--pool-namespace",
            &marker,
            "--secure-serving=false",
        ],
        &[],
    );
    let field = |name: &str| -> String {
        (p.url.split(", "))
            .find_map(|f| f.strip_prefix(name))
            .unwrap()
            .to_string()
    };
    let grpc = field("ext_proc ").parse().unwrap();
    let metrics = field("metrics http://")
        .trim_end_matches("/metrics")
        .parse()
        .unwrap();
    let pid = pid_of(&marker);
    (p, grpc, metrics, pid)
}

async fn connect(grpc: SocketAddr) -> ExternalProcessorClient<Channel> {
    ExternalProcessorClient::connect(format!("http://{grpc}"))
        .await
        .unwrap()
}

async fn settle() {
    tokio::time::sleep(Duration::from_millis(500)).await;
}

/// Each hostile case of issue 26 against `pdgate epp` with its default limits, one fresh
/// process each, printing its resident memory (and descriptors) before and after. Not an
/// assertion of memory (the allocator keeps what it freed); the bounded outcome of each case
/// is asserted by the tests above.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement, run by hand"]
async fn issue_26_cases_measured_against_the_binary() {
    let worker = support::sim_worker(spec("d0", "decode", None), sim_config(50.0)).await;
    let addr = worker.addr().to_string();

    // (a) 150 request-headers messages of 3.9 MB on one stream.
    let (p, grpc, _, pid) = binary(&addr, "a");
    settle().await;
    let before = rss_mb(pid);
    let mut s = open(&mut connect(grpc).await).await.unwrap();
    let big = "v".repeat(3_900_000);
    for _ in 0..150 {
        s.send(headers_msg(post(&[("x-big", &big)]), false)).await;
    }
    let status = status_of(&s.immediate().await);
    settle().await;
    println!(
        "(a) 150 x 3.9 MB headers on one stream: answered {status}; RSS {before:.0} -> {:.0} MB",
        rss_mb(pid)
    );
    drop((s, p));

    // (b) 30,000 streams holding request headers, over 30 connections.
    let (p, grpc, _, pid) = binary(&addr, "b");
    settle().await;
    let before = rss_mb(pid);
    let (mut held, mut refused) = (Vec::new(), 0);
    for _ in 0..30 {
        let mut c = connect(grpc).await;
        for _ in 0..1_000 {
            match open(&mut c).await {
                Ok(s) => {
                    s.send(headers_msg(post(&[]), false)).await;
                    held.push(s);
                }
                Err(status) if status.code() == tonic::Code::ResourceExhausted => refused += 1,
                Err(status) => panic!("{status:?}"),
            }
        }
    }
    settle().await;
    println!(
        "(b) 30,000 streams: {} held, {refused} RESOURCE_EXHAUSTED; RSS {before:.0} -> {:.0} MB",
        held.len(),
        rss_mb(pid)
    );
    drop((held, p));

    // (c) 60 MB bodies held mid-way, one stream each: 8, then up to the budget.
    let (p, grpc, metrics, pid) = binary(&addr, "c");
    settle().await;
    let before = rss_mb(pid);
    let mut c = connect(grpc).await;
    let chunk = vec![b' '; 1 << 20];
    let held_bytes = || async move {
        let text = reqwest::get(format!("http://{metrics}/metrics"))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        metric(&text, "pdgate_inflight_body_bytes") as usize
    };
    let (mut bodies, mut at_8, mut refused_at) = (Vec::new(), 0.0, None);
    for i in 0..20 {
        let mut s = open(&mut c).await.unwrap();
        s.send(headers_msg(post(&[]), false)).await;
        for _ in 0..60 {
            s.send(body_msg(&chunk, false)).await;
        }
        // Either the body is leased whole, or the stream is answered (a refusal).
        let mut refused = None;
        for _ in 0..100 {
            if held_bytes().await == (i + 1) * 60 * chunk.len() {
                break;
            }
            let answer = tokio::time::timeout(Duration::from_millis(50), s.rx.message()).await;
            if let Ok(Ok(Some(ProcessingResponse {
                response: Some(Response::ImmediateResponse(r)),
                ..
            }))) = answer
            {
                refused = Some((i + 1, status_of(&r), header_of(&r, "retry-after")));
                break;
            }
        }
        if refused.is_some() {
            refused_at = refused;
            break;
        }
        bodies.push(s);
        if i == 7 {
            settle().await;
            at_8 = rss_mb(pid);
        }
    }
    settle().await;
    println!(
        "(c) 60 MiB bodies held: RSS {before:.0} -> {at_8:.0} MB with 8, {:.0} MB with {} \
         ({} bytes leased); body {refused_at:?} (number, status, retry-after)",
        rss_mb(pid),
        bodies.len(),
        held_bytes().await,
    );
    drop((bodies, p));

    // (d) an SSE line of 390 MB through the response path.
    let (p, grpc, _, pid) = binary(&addr, "d");
    settle().await;
    let before = rss_mb(pid);
    let mut s = open(&mut connect(grpc).await).await.unwrap();
    let body = serde_json::to_vec(&envoy::completion(0, 16, true)).unwrap();
    s.send(headers_msg(post(&[]), false)).await;
    s.send(body_msg(&body, true)).await;
    for _ in 0..2 {
        s.next(Duration::from_secs(5)).await.unwrap().unwrap();
    }
    s.send(Request::ResponseHeaders(HttpHeaders {
        headers: Some(envoy_headers(&[
            (":status", "200"),
            ("content-type", "text/event-stream"),
        ])),
        ..Default::default()
    }))
    .await;
    s.next(Duration::from_secs(5)).await.unwrap().unwrap();
    let piece = vec![b'x'; 60_000];
    let (mut sent, mut passed, mut peak) = (0usize, 0usize, before);
    while sent < 390_000_000 {
        s.send(Request::ResponseBody(HttpBody {
            body: piece.clone(),
            ..Default::default()
        }))
        .await;
        sent += piece.len();
        let answer = s.next(Duration::from_secs(5)).await.unwrap().unwrap();
        if let Some(Response::ResponseBody(r)) = answer.response {
            let m = r.response.unwrap().body_mutation.unwrap().mutation.unwrap();
            use envoy_types::pb::envoy::service::ext_proc::v3::body_mutation::Mutation;
            if let Mutation::StreamedResponse(b) = m {
                passed += b.body.len();
            }
        }
        if sent % 39_000_000 < piece.len() {
            peak = peak.max(rss_mb(pid));
        }
    }
    println!(
        "(d) one 390 MB SSE line: {passed} bytes passed back; RSS {before:.0} -> peak {peak:.0} MB"
    );
    drop((s, p));

    // (e) 1,100 silent connections to the metrics port.
    let (p, grpc, metrics, pid) = binary(&addr, "e");
    settle().await;
    let fds_before = fds(pid);
    let mut silent = Vec::new();
    for _ in 0..1_100 {
        if let Ok(t) = TcpStream::connect(metrics).await {
            silent.push(t);
        }
    }
    settle().await;
    let fds_held = fds(pid);
    let mut s = Stream::open(grpc).await;
    let start = Instant::now();
    let r = s.request("/v1/models", &[], b"", 1, None).await;
    println!(
        "(e) 1,100 silent metrics connections: EPP descriptors {fds_before} -> {fds_held}; \
         an ext_proc request answered in {:?} (immediate: {:?})",
        start.elapsed(),
        r.immediate
    );
    drop((silent, p));
}
