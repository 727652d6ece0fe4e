//! The gRPC servers: `envoy.service.ext_proc.v3.ExternalProcessor` (one [`Exchange`] per
//! stream) and the gRPC health services the endpoint-picker protocol names — `liveness`
//! (serving while the process answers), `readiness` and
//! `envoy.service.ext_proc.v3.ExternalProcessor` (serving once the first endpoint list is
//! applied and until draining starts) — and the Prometheus port.
//!
//! Every port is bounded ([`crate::limits`], issue 26): connections let in under slots and a
//! handshake timeout ([`crate::incoming`]; the metrics port by the loop `serve` uses,
//! [`pdgate_core::front::serve_http`]); on the ext_proc port, HTTP/2 caps streams per
//! connection and pings idle peers, a semaphore caps streams over all connections (one more
//! is answered `RESOURCE_EXHAUSTED` at once), and each stream's waits are bounded by its
//! [`Phase`] ([`run_stream`]).

use crate::exchange::{Exchange, Phase};
use crate::incoming::incoming;
use crate::limits::{
    EppLimits, MAX_MESSAGE_BYTES, MAX_REQUEST_HEADER_BYTES, MAX_SIDE_PORT_CONNECTIONS,
};
use crate::state::Epp;
use envoy_types::pb::envoy::service::ext_proc::v3::external_processor_server::{
    ExternalProcessor, ExternalProcessorServer,
};
use envoy_types::pb::envoy::service::ext_proc::v3::{ProcessingRequest, ProcessingResponse};
use futures_util::{Stream, StreamExt};
use pdgate_core::front::{Door, ListenerLimits, Refusal};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, OwnedSemaphorePermit};
use tokio::time::Instant;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};
use tonic_health::ServingStatus;

/// gRPC health service names (endpoint-picker protocol, "Health Checking").
pub const LIVENESS: &str = "liveness";
/// Readiness: the first endpoint list is applied and the EPP is not draining.
pub const READINESS: &str = "readiness";
/// The ext_proc service's own health name (same criteria as readiness).
pub const EXT_PROC: &str = "envoy.service.ext_proc.v3.ExternalProcessor";

/// Answers queued per stream before the reader waits for Envoy to take them.
const ANSWERS_IN_FLIGHT: usize = 64;

/// The ext_proc service of one EPP.
#[derive(Clone)]
pub struct EppService {
    epp: Arc<Epp>,
}

impl EppService {
    /// The service over `epp`.
    pub fn new(epp: Arc<Epp>) -> Self {
        EppService { epp }
    }
}

type Answers = Pin<Box<dyn Stream<Item = Result<ProcessingResponse, Status>> + Send>>;

#[tonic::async_trait]
impl ExternalProcessor for EppService {
    type ProcessStream = Answers;

    async fn process(
        &self,
        request: Request<Streaming<ProcessingRequest>>,
    ) -> Result<Response<Self::ProcessStream>, Status> {
        let permit = open_stream(&self.epp)?;
        let inbound = request.into_inner();
        let (tx, rx) = mpsc::channel(ANSWERS_IN_FLIGHT);
        tokio::spawn(run_stream(self.epp.clone(), inbound, tx, permit));
        Ok(Response::new(Box::pin(ReceiverStream::new(rx)) as Answers))
    }
}

/// A permit for one more stream.
///
/// Errors: `--max-ext-proc-streams` are open: `RESOURCE_EXHAUSTED` naming the limit
/// (counted, `pdgate_epp_streams_refused_total`).
pub fn open_stream(epp: &Epp) -> Result<OwnedSemaphorePermit, Status> {
    epp.streams.clone().try_acquire_owned().map_err(|_| {
        epp.counters.streams_refused.inc();
        let max = epp.limits.max_streams;
        if pdgate_core::log_limit::allow(&pdgate_core::log_limit::CONNECTIONS_REFUSED) {
            tracing::warn!(
                max,
                "ext_proc stream refused: too many open (--max-ext-proc-streams)"
            );
        }
        Status::resource_exhausted(format!(
            "too many ext_proc streams: {max} open (--max-ext-proc-streams)"
        ))
    })
}

/// How long a stream in `phase` may wait, from `opened` (the stream) and `last` (its last
/// message): see [`Phase`].
fn deadline(phase: Phase, limits: &EppLimits, opened: Instant, last: Instant) -> Instant {
    match phase {
        Phase::Headers => opened + limits.client.header_timeout,
        Phase::Body { since } => since + limits.client.body_timeout,
        Phase::Upstream => last + limits.idle_timeout,
        Phase::Done => last + limits.client.header_timeout,
    }
}

fn phase_label(phase: Phase) -> &'static str {
    match phase {
        Phase::Headers => "headers",
        Phase::Body { .. } => "body",
        Phase::Upstream => "upstream",
        Phase::Done => "closing",
    }
}

/// Runs one ext_proc stream: each message of `inbound` through an [`Exchange`], its answers to
/// `tx`, until Envoy closes the stream or goes away, or a wait passes its bound:
///
/// - no request headers within `--client-header-timeout-ms` of the opening: ended
///   `DEADLINE_EXCEEDED`;
/// - the request body not ended within `--client-body-timeout-ms` of its headers: answered
///   408 (`serve`'s), then as answered;
/// - once the request went upstream, no message (or answers not taken) within
///   `--ext-proc-idle-timeout-ms`: ended `DEADLINE_EXCEEDED`, the bookings released;
/// - once answered, not closed within `--client-header-timeout-ms`: ended.
///
/// The exchange owns the request's bookings and body lease, and the task owns `permit`: when
/// it ends, all are released with it. Every timeout is counted
/// (`pdgate_epp_stream_timeouts_total{phase}`).
pub async fn run_stream<S>(
    epp: Arc<Epp>,
    mut inbound: S,
    tx: mpsc::Sender<Result<ProcessingResponse, Status>>,
    permit: OwnedSemaphorePermit,
) where
    S: Stream<Item = Result<ProcessingRequest, Status>> + Unpin,
{
    let _permit = permit;
    let limits = epp.limits;
    let mut exchange = Exchange::new(epp.clone());
    let opened = Instant::now();
    let mut last = opened;
    loop {
        let phase = exchange.phase();
        let until = deadline(phase, &limits, opened, last);
        let msg = tokio::select! {
            m = inbound.next() => m,
            _ = tx.closed() => break,
            _ = tokio::time::sleep_until(until) => {
                epp.counters.stream_timeouts.with_label_values(&[phase_label(phase)]).inc();
                let end = match phase {
                    Phase::Headers => Some(format!(
                        "no request headers within {} ms (--client-header-timeout-ms)",
                        limits.client.header_timeout.as_millis()
                    )),
                    Phase::Body { .. } => {
                        let answers = exchange.body_timed_out();
                        if !send_all(&tx, answers, limits.idle_timeout).await {
                            break;
                        }
                        exchange.handed_on();
                        last = Instant::now();
                        continue;
                    }
                    Phase::Upstream => Some(format!(
                        "no message for {} ms (--ext-proc-idle-timeout-ms); the request's \
                         bookings are released",
                        limits.idle_timeout.as_millis()
                    )),
                    Phase::Done => None,
                };
                if let Some(message) = end {
                    tracing::debug!(%message, "ext_proc stream ended");
                    let _ = tx.try_send(Err(Status::deadline_exceeded(message)));
                }
                break;
            }
        };
        last = Instant::now();
        match msg {
            Some(Ok(msg)) => {
                // Routing may wait (flow control, the token producer): a stream Envoy reset
                // meanwhile is dropped with what it booked.
                let answers = tokio::select! {
                    a = exchange.on_message(msg) => a,
                    _ = tx.closed() => break,
                };
                if !send_all(&tx, answers, limits.idle_timeout).await {
                    epp.counters
                        .stream_timeouts
                        .with_label_values(&["upstream"])
                        .inc();
                    break;
                }
                exchange.handed_on();
                // Once answered, keep reading until Envoy closes its side, answering nothing.
            }
            None => break,
            Some(Err(status)) => {
                tracing::debug!(%status, "ext_proc stream ended by the data plane");
                break;
            }
        }
    }
}

/// Sends `answers` in order, each taken within `wait`; false when the stream is gone or
/// Envoy stopped taking them.
async fn send_all(
    tx: &mpsc::Sender<Result<ProcessingResponse, Status>>,
    answers: crate::exchange::Answers,
    wait: Duration,
) -> bool {
    for answer in answers {
        match tokio::time::timeout(wait, tx.send(Ok(answer))).await {
            Ok(Ok(())) => {}
            _ => return false,
        }
    }
    true
}

/// The tonic server settings of the gRPC ports: HTTP/2 streams per connection, keepalive
/// pings, the header list bound ([`MAX_REQUEST_HEADER_BYTES`]).
fn grpc_server(limits: &EppLimits) -> tonic::transport::Server {
    tonic::transport::Server::builder()
        .max_concurrent_streams(limits.max_streams_per_connection)
        .http2_keepalive_interval(Some(limits.keepalive_interval))
        .http2_keepalive_timeout(Some(limits.keepalive_timeout))
        .http2_max_header_list_size(MAX_REQUEST_HEADER_BYTES as u32)
}

/// Serves the ext_proc service on `listener` until `shutdown` resolves (then the port is
/// closed and in-progress streams finish), under `epp.limits` (module docs).
///
/// Errors: the gRPC server failed.
pub async fn serve_ext_proc(
    epp: Arc<Epp>,
    listener: tokio::net::TcpListener,
    shutdown: impl std::future::Future<Output = ()> + Send,
) -> Result<(), tonic::transport::Error> {
    let limits = epp.limits;
    let door = Door::new(
        listener,
        (&limits.client).into(),
        epp.connections.ext_proc.clone(),
        epp.metrics.clone(),
        Refusal::Close,
    );
    let service = ExternalProcessorServer::new(EppService::new(epp))
        .max_decoding_message_size(MAX_MESSAGE_BYTES);
    grpc_server(&limits)
        .add_service(service)
        .serve_with_incoming_shutdown(incoming(door), shutdown)
        .await
}

/// Limits of a side port (health, metrics): the header timeout, and
/// [`MAX_SIDE_PORT_CONNECTIONS`].
fn side_port(limits: &EppLimits) -> ListenerLimits {
    ListenerLimits {
        header_timeout: limits.client.header_timeout,
        max_connections: MAX_SIDE_PORT_CONNECTIONS,
    }
}

/// Serves `GET /metrics` (Prometheus text) on `listener` until aborted, by the accept loop
/// `serve` uses ([`pdgate_core::front::serve_http`]): at most [`MAX_SIDE_PORT_CONNECTIONS`]
/// connections (one more: 503 and closed), each closed when its headers do not come within
/// `--client-header-timeout-ms` (idle keep-alive included).
pub async fn serve_metrics(epp: Arc<Epp>, listener: tokio::net::TcpListener) {
    use axum::routing::get;
    let door = Door::new(
        listener,
        side_port(&epp.limits),
        epp.connections.metrics.clone(),
        epp.metrics.clone(),
        Refusal::Http503,
    );
    let app = axum::Router::new().route(
        "/metrics",
        get(move || {
            let epp = epp.clone();
            async move {
                (
                    [(http::header::CONTENT_TYPE, "text/plain; version=0.0.4")],
                    render_metrics(&epp),
                )
            }
        }),
    );
    pdgate_core::front::serve_http(door, app).await
}

/// The EPP's Prometheus text, gauges refreshed (endpoints, connections, streams, body bytes
/// in flight).
pub fn render_metrics(epp: &Epp) -> Vec<u8> {
    epp.metrics
        .refresh(&epp.scheduler, &epp.registry.snapshot());
    (epp.metrics.client_connections).set(epp.connections.open() as i64);
    (epp.metrics.inflight_body_bytes).set(epp.body_budget.used() as i64);
    let open = epp.limits.max_streams - epp.streams.available_permits();
    epp.counters.streams.set(open as i64);
    let mut text = epp.metrics.render();
    pdgate_core::metrics::render_fleet_counters(epp.registry.counters(), &mut text);
    if let Some(feed) = &epp.kv_feed {
        feed.render_metrics(&mut text);
    }
    text
}

/// Serves the gRPC health services on `listener` (see the module docs), refreshing readiness
/// every 100 ms, until the task is aborted; at most [`MAX_SIDE_PORT_CONNECTIONS`] connections,
/// let in as on the ext_proc port.
///
/// Errors: the gRPC server failed.
pub async fn serve_health(
    epp: Arc<Epp>,
    listener: tokio::net::TcpListener,
) -> Result<(), tonic::transport::Error> {
    let (limits, connections, metrics) = (
        epp.limits,
        epp.connections.health.clone(),
        epp.metrics.clone(),
    );
    let (reporter, service) = tonic_health::server::health_reporter();
    reporter
        .set_service_status(LIVENESS, ServingStatus::Serving)
        .await;
    let watch = tokio::spawn(async move {
        let mut last = None;
        loop {
            let ready = epp.ready();
            if last != Some(ready) {
                let status = if ready {
                    ServingStatus::Serving
                } else {
                    ServingStatus::NotServing
                };
                reporter.set_service_status(READINESS, status).await;
                reporter.set_service_status(EXT_PROC, status).await;
                tracing::info!(ready, "EPP readiness");
                last = Some(ready);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    let door = Door::new(
        listener,
        side_port(&limits),
        connections,
        metrics,
        Refusal::Close,
    );
    let served = grpc_server(&limits)
        .add_service(service)
        .serve_with_incoming(incoming(door))
        .await;
    watch.abort();
    served
}

#[cfg(test)]
mod tests {
    use super::*;
    use envoy_types::pb::envoy::config::core::v3::{HeaderMap, HeaderValue};
    use envoy_types::pb::envoy::service::ext_proc::v3::{processing_request, HttpHeaders};
    use pdgate_scheduler::{Endpoint, Scheduler, DEFAULT_CONFIG_YAML};

    async fn epp(limits: EppLimits) -> Arc<Epp> {
        let scheduler = Arc::new(Scheduler::from_yaml(DEFAULT_CONFIG_YAML, "test").unwrap());
        let role = [(pdgate_api::labels::ROLE.to_string(), "decode".to_string())].into();
        let endpoints = vec![Endpoint::new("d0", "127.0.0.1:1", role)];
        let source = pdgate_fleet::EndpointSource::Static(endpoints);
        let mut opts = crate::state::EppOptions::new(scheduler, source);
        opts.limits = limits;
        let (epp, tasks) = Epp::start(opts).await.unwrap();
        for t in tasks {
            t.abort();
        }
        epp
    }

    type Inbound = mpsc::Sender<Result<ProcessingRequest, Status>>;
    type Outbound = mpsc::Receiver<Result<ProcessingResponse, Status>>;

    fn start(epp: &Arc<Epp>) -> (Inbound, Outbound, tokio::task::JoinHandle<()>) {
        let (in_tx, in_rx) = mpsc::channel(8);
        let (tx, rx) = mpsc::channel(ANSWERS_IN_FLIGHT);
        let permit = open_stream(epp).unwrap();
        let task = tokio::spawn(run_stream(
            epp.clone(),
            ReceiverStream::new(in_rx),
            tx,
            permit,
        ));
        (in_tx, rx, task)
    }

    /// A header-only `GET /v1/models`.
    fn get_models() -> ProcessingRequest {
        let headers = [(":method", "GET"), (":path", "/v1/models")]
            .map(|(k, v)| HeaderValue {
                key: k.to_string(),
                raw_value: v.as_bytes().to_vec(),
                ..Default::default()
            })
            .to_vec();
        ProcessingRequest {
            request: Some(processing_request::Request::RequestHeaders(HttpHeaders {
                headers: Some(HeaderMap { headers }),
                end_of_stream: true,
                ..Default::default()
            })),
            ..Default::default()
        }
    }

    /// Waits `d` of the paused clock; true when the stream said nothing meanwhile.
    async fn quiet_for(rx: &mut Outbound, d: Duration) -> bool {
        tokio::time::timeout(d, rx.recv()).await.is_err()
    }

    async fn ended(rx: &mut Outbound) -> Status {
        match rx.recv().await {
            Some(Err(status)) => status,
            other => panic!("expected the stream's end, got {other:?}"),
        }
    }

    /// The default bounds on the paused clock: 60 s for the first message, 30 min between
    /// messages once the request went upstream; a wait just under either is never cut.
    #[tokio::test(start_paused = true)]
    async fn the_default_waits_end_a_stream_only_past_their_bounds() {
        let epp = epp(EppLimits::default()).await;
        let (_in, mut rx, task) = start(&epp);
        assert!(quiet_for(&mut rx, Duration::from_millis(59_900)).await);
        let status = ended(&mut rx).await;
        assert_eq!(status.code(), tonic::Code::DeadlineExceeded);
        assert!(status.message().contains("60000 ms"), "{status:?}");
        task.await.unwrap();
        assert_eq!(epp.streams.available_permits(), epp.limits.max_streams);

        let (inbound, mut rx, task) = start(&epp);
        inbound.send(Ok(get_models())).await.unwrap();
        let answer = rx.recv().await.unwrap().unwrap();
        assert!(
            matches!(
                answer.response,
                Some(envoy_types::pb::envoy::service::ext_proc::v3::processing_response::Response::RequestHeaders(_))
            ),
            "{answer:?}"
        );
        let idle = Duration::from_millis(crate::limits::DEFAULT_EXT_PROC_IDLE_TIMEOUT_MS);
        assert!(quiet_for(&mut rx, idle - Duration::from_secs(1)).await);
        let status = ended(&mut rx).await;
        assert_eq!(status.code(), tonic::Code::DeadlineExceeded);
        assert!(
            status.message().contains("--ext-proc-idle-timeout-ms"),
            "{status:?}"
        );
        task.await.unwrap();
        let timeouts = &epp.counters.stream_timeouts;
        assert_eq!(timeouts.with_label_values(&["headers"]).get(), 1);
        assert_eq!(timeouts.with_label_values(&["upstream"]).get(), 1);
    }

    /// A message resets the upstream wait: a stream that keeps talking is never cut.
    #[tokio::test(start_paused = true)]
    async fn each_message_restarts_the_idle_wait() {
        let limits = EppLimits {
            idle_timeout: Duration::from_secs(10),
            ..EppLimits::default()
        };
        let epp = epp(limits).await;
        let (inbound, mut rx, _task) = start(&epp);
        inbound.send(Ok(get_models())).await.unwrap();
        rx.recv().await.unwrap().unwrap();
        let body = || {
            use envoy_types::pb::envoy::service::ext_proc::v3::HttpBody;
            Ok(ProcessingRequest {
                request: Some(processing_request::Request::ResponseBody(HttpBody {
                    body: b"x".to_vec(),
                    ..Default::default()
                })),
                ..Default::default()
            })
        };
        for _ in 0..5 {
            tokio::time::sleep(Duration::from_secs(8)).await;
            inbound.send(body()).await.unwrap();
            assert!(rx.recv().await.unwrap().is_ok(), "answered, not ended");
        }
        assert!(quiet_for(&mut rx, Duration::from_secs(9)).await);
        assert_eq!(ended(&mut rx).await.code(), tonic::Code::DeadlineExceeded);
    }
}
