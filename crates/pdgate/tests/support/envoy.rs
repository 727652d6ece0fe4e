//! A stand-in for Envoy's ext_proc filter (`FULL_DUPLEX_STREAMED` request and response body
//! modes), driving pdgate's EPP over real gRPC with the message sequence Envoy sends:
//! request headers, request body chunks (`end_of_stream` on the last), then — after the test
//! has called the destination itself, as Envoy would — response headers (with the
//! `…-served` metadata) and response body chunks. Also starts an EPP in-process on
//! 127.0.0.1:0.

use super::{endpoints, sim_config, sim_workers, spec};
use envoy_types::pb::envoy::config::core::v3::{HeaderMap, HeaderValue, Metadata};
use envoy_types::pb::envoy::service::ext_proc::v3::external_processor_client::ExternalProcessorClient;
use envoy_types::pb::envoy::service::ext_proc::v3::{
    body_mutation::Mutation, processing_request::Request, processing_response::Response,
    CommonResponse, HttpBody, HttpHeaders, ProcessingRequest, ProcessingResponse,
};
use envoy_types::pb::google::protobuf::{value::Kind, ListValue, Struct, Value};
use pdgate_epp::{Epp, EppOptions};
use pdgate_scheduler::DEFAULT_CONFIG_YAML;
use pdgate_scheduler::{Endpoint, Scheduler};
use serde_json::{json, Value as Json};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

/// An EPP running in-process: its state, its ext_proc and health addresses.
pub struct EppUnderTest {
    /// Shared state (bookings, sessions, metrics).
    pub epp: Arc<Epp>,
    /// The ext_proc gRPC address.
    pub grpc: SocketAddr,
    /// The gRPC health address.
    pub health: SocketAddr,
    _servers: Servers,
}

/// An in-process EPP's background tasks (its own and its servers'): aborted when dropped.
pub struct Servers(pub Vec<tokio::task::JoinHandle<()>>);

impl Drop for Servers {
    fn drop(&mut self) {
        for t in &self.0 {
            t.abort();
        }
    }
}

/// Serves `epp`'s ext_proc on a fresh 127.0.0.1 port, the task joining `servers`: its address.
pub async fn serve_ext_proc(epp: &Arc<Epp>, servers: &mut Servers) -> SocketAddr {
    let grpc = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = grpc.local_addr().unwrap();
    let e = epp.clone();
    servers.0.push(tokio::spawn(async move {
        pdgate_epp::service::serve_ext_proc(e, grpc, std::future::pending())
            .await
            .unwrap();
    }));
    addr
}

impl EppUnderTest {
    /// In-flight bookings of the endpoint at `address` (0 when unknown).
    pub fn in_flight(&self, address: &str) -> u32 {
        let snap = self.epp.registry.snapshot();
        (snap.endpoints.iter())
            .find(|e| e.endpoint.address == address)
            .map_or(0, |e| e.load.in_flight())
    }

    /// A new ext_proc stream (one HTTP request through Envoy).
    pub async fn stream(&self) -> Stream {
        Stream::open(self.grpc).await
    }
}

/// Starts an EPP over `endpoints` with `config_yaml`.
pub async fn epp(endpoints: Vec<Endpoint>, config_yaml: &str) -> EppUnderTest {
    let scheduler = Arc::new(Scheduler::from_yaml(config_yaml, "test config").unwrap());
    let opts = EppOptions::new(scheduler, pdgate_fleet::EndpointSource::Static(endpoints));
    let (epp, tasks) = Epp::start(opts).await.unwrap();
    let mut servers = Servers(tasks);
    let grpc = serve_ext_proc(&epp, &mut servers).await;
    let health = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let health_addr = health.local_addr().unwrap();
    let e = epp.clone();
    servers.0.push(tokio::spawn(async move {
        pdgate_epp::service::serve_health(e, health).await.unwrap();
    }));
    EppUnderTest {
        epp,
        grpc,
        health: health_addr,
        _servers: servers,
    }
}

/// One ext_proc stream.
pub struct Stream {
    tx: mpsc::Sender<ProcessingRequest>,
    rx: tonic::Streaming<ProcessingResponse>,
}

/// A header list as Envoy sends it (`raw_value`).
pub fn envoy_headers(h: &[(&str, &str)]) -> HeaderMap {
    HeaderMap {
        headers: h
            .iter()
            .map(|(k, v)| HeaderValue {
                key: k.to_string(),
                raw_value: v.as_bytes().to_vec(),
                ..Default::default()
            })
            .collect(),
    }
}

/// Filter metadata `{namespace: {key: value}}`.
pub fn metadata(namespace: &str, key: &str, value: Value) -> Metadata {
    Metadata {
        filter_metadata: [(
            namespace.to_string(),
            Struct {
                fields: [(key.to_string(), value)].into(),
            },
        )]
        .into(),
        ..Default::default()
    }
}

/// A protobuf string value.
pub fn string(s: &str) -> Value {
    Value {
        kind: Some(Kind::StringValue(s.to_string())),
    }
}

/// A protobuf list of strings.
pub fn list(items: &[&str]) -> Value {
    Value {
        kind: Some(Kind::ListValue(ListValue {
            values: items.iter().map(|s| string(s)).collect(),
        })),
    }
}

/// What the EPP answered to a request's headers and body.
#[derive(Debug, Default)]
pub struct Routing {
    /// The status of an immediate response (the EPP refused the request).
    pub immediate: Option<u16>,
    /// Headers of the immediate response.
    pub immediate_headers: BTreeMap<String, String>,
    /// Body of the immediate response.
    pub immediate_body: Vec<u8>,
    /// Headers the request-headers answer sets.
    pub set: BTreeMap<String, String>,
    /// Headers it removes.
    pub removed: Vec<String>,
    /// `envoy.lb` / `x-gateway-destination-endpoint` of the dynamic metadata.
    pub metadata_destination: Option<String>,
    /// Whether the route cache is cleared.
    pub clear_route_cache: bool,
    /// The request body chunks sent back.
    pub chunks: Vec<Vec<u8>>,
}

impl Routing {
    /// The first address of the destination header.
    pub fn destination(&self) -> String {
        let all = self
            .set
            .get("x-gateway-destination-endpoint")
            .cloned()
            .unwrap_or_default();
        all.split(',').next().unwrap_or_default().to_string()
    }

    /// The request body as Envoy forwards it (the chunks joined).
    pub fn body(&self) -> Vec<u8> {
        self.chunks.concat()
    }

    /// The immediate response's body as JSON.
    pub fn immediate_json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.immediate_body).unwrap_or_default()
    }
}

fn set_headers(c: &CommonResponse) -> BTreeMap<String, String> {
    let m = c.header_mutation.as_ref();
    m.map(|m| m.set_headers.as_slice())
        .unwrap_or_default()
        .iter()
        .filter_map(|o| o.header.as_ref())
        .map(|h| {
            (
                h.key.clone(),
                String::from_utf8_lossy(&h.raw_value).into_owned(),
            )
        })
        .collect()
}

fn streamed(c: &CommonResponse) -> (Vec<u8>, bool) {
    match c.body_mutation.as_ref().and_then(|m| m.mutation.as_ref()) {
        Some(Mutation::StreamedResponse(s)) => (s.body.clone(), s.end_of_stream),
        other => panic!("body answer is not a streamed response: {other:?}"),
    }
}

impl Stream {
    /// Opens a stream to the EPP at `addr`.
    pub async fn open(addr: SocketAddr) -> Stream {
        let mut client = ExternalProcessorClient::connect(format!("http://{addr}"))
            .await
            .unwrap();
        let (tx, rx) = mpsc::channel(256);
        let rx = client
            .process(tokio_stream::wrappers::ReceiverStream::new(rx))
            .await
            .unwrap()
            .into_inner();
        Stream { tx, rx }
    }

    /// Sends one message.
    pub async fn send(&self, request: Request, meta: Option<Metadata>) {
        let msg = ProcessingRequest {
            request: Some(request),
            metadata_context: meta,
            ..Default::default()
        };
        self.tx.send(msg).await.unwrap();
    }

    /// The next answer (within 5 s).
    pub async fn recv(&mut self) -> ProcessingResponse {
        tokio::time::timeout(Duration::from_secs(5), self.rx.message())
            .await
            .expect("an answer within 5 s")
            .expect("a gRPC message")
            .expect("the stream still open")
    }

    /// Sends a request (`POST path` with `headers`, `body` in chunks of `chunk` bytes; a
    /// header-only request when `body` is empty) with the optional subset hint, and reads
    /// the EPP's answers up to the end of the request body (or its immediate response).
    pub async fn request(
        &mut self,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
        chunk: usize,
        subset: Option<Value>,
    ) -> Routing {
        let method = if body.is_empty() { "GET" } else { "POST" };
        let mut h = vec![
            (":method", method),
            (":path", path),
            (":authority", "gateway"),
        ];
        h.extend_from_slice(headers);
        let meta = subset.map(|v| {
            metadata(
                "envoy.lb.subset_hint",
                "x-gateway-destination-endpoint-subset",
                v,
            )
        });
        let headers_msg = Request::RequestHeaders(HttpHeaders {
            headers: Some(envoy_headers(&h)),
            end_of_stream: body.is_empty(),
            ..Default::default()
        });
        self.send(headers_msg, meta.clone()).await;
        let pieces: Vec<&[u8]> = body.chunks(chunk.max(1)).collect();
        for (i, piece) in pieces.iter().enumerate() {
            let b = Request::RequestBody(HttpBody {
                body: piece.to_vec(),
                end_of_stream: i + 1 == pieces.len(),
                ..Default::default()
            });
            self.send(b, None).await;
        }
        let mut out = Routing::default();
        loop {
            let answer = self.recv().await;
            match answer.response.expect("an answer") {
                Response::ImmediateResponse(i) => {
                    out.immediate = i.status.map(|s| s.code as u16);
                    out.immediate_body = i.body;
                    out.immediate_headers = i
                        .headers
                        .map(|m| {
                            set_headers(&CommonResponse {
                                header_mutation: Some(m),
                                ..Default::default()
                            })
                        })
                        .unwrap_or_default();
                    return out;
                }
                Response::RequestHeaders(r) => {
                    let c = r.response.unwrap_or_default();
                    out.set = set_headers(&c);
                    out.removed = c
                        .header_mutation
                        .map(|m| m.remove_headers)
                        .unwrap_or_default();
                    out.clear_route_cache = c.clear_route_cache;
                    out.metadata_destination = answer.dynamic_metadata.and_then(|m| {
                        match m.fields.get("envoy.lb")?.kind.as_ref()? {
                            Kind::StructValue(s) => match s
                                .fields
                                .get("x-gateway-destination-endpoint")?
                                .kind
                                .as_ref()?
                            {
                                Kind::StringValue(v) => Some(v.clone()),
                                _ => None,
                            },
                            _ => None,
                        }
                    });
                    if body.is_empty() {
                        return out;
                    }
                }
                Response::RequestBody(b) => {
                    let (bytes, end) = streamed(&b.response.unwrap_or_default());
                    out.chunks.push(bytes);
                    if end {
                        return out;
                    }
                }
                other => panic!("unexpected answer before the request went upstream: {other:?}"),
            }
        }
    }

    /// Calls the destination as Envoy would — `POST http://{destination}{path}` with the
    /// client's headers, the headers the EPP set and the body it sent back — then feeds the
    /// answer through the stream ([`Self::respond`]). Returns the upstream status and
    /// headers, the headers the EPP set on the response, and the body the client gets.
    pub async fn call_destination(
        &mut self,
        routing: &Routing,
        path: &str,
        headers: &[(&str, &str)],
        served: Option<&str>,
    ) -> Upstream {
        let mut req = reqwest::Client::new()
            .post(format!("http://{}{path}", routing.destination()))
            .body(routing.body());
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        for (k, v) in &routing.set {
            req = req.header(k, v);
        }
        let mut resp = req.send().await.unwrap();
        let status = resp.status().as_u16();
        let upstream_headers = resp.headers().clone();
        let pairs: Vec<(String, String)> = (resp.headers().iter())
            .map(|(k, v)| (k.to_string(), v.to_str().unwrap_or_default().to_string()))
            .collect();
        let mut chunks = Vec::new();
        while let Some(chunk) = resp.chunk().await.unwrap() {
            chunks.push(chunk.to_vec());
        }
        let (set, body) = self.respond(status, &pairs, &chunks, served).await;
        Upstream {
            status,
            headers: upstream_headers,
            set,
            body,
        }
    }

    /// Feeds a response through the stream as Envoy does: headers (`:status`, `headers`,
    /// `served` as the `…-served` metadata), each of `chunks`, then an empty last chunk with
    /// `end_of_stream`. Returns the headers the EPP set and the body it sent back.
    pub async fn respond(
        &mut self,
        status: u16,
        headers: &[(String, String)],
        chunks: &[Vec<u8>],
        served: Option<&str>,
    ) -> (BTreeMap<String, String>, Vec<u8>) {
        let status = status.to_string();
        let mut pairs = vec![(":status", status.as_str())];
        pairs.extend(headers.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        let meta = served.map(|s| {
            metadata(
                "envoy.lb",
                "x-gateway-destination-endpoint-served",
                string(s),
            )
        });
        self.send(
            Request::ResponseHeaders(HttpHeaders {
                headers: Some(envoy_headers(&pairs)),
                end_of_stream: false,
                ..Default::default()
            }),
            meta,
        )
        .await;
        let Response::ResponseHeaders(r) = self.recv().await.response.unwrap() else {
            panic!("the response headers were not answered first")
        };
        let set = set_headers(&r.response.unwrap_or_default());
        let mut all: Vec<(Vec<u8>, bool)> = chunks.iter().map(|c| (c.clone(), false)).collect();
        all.push((Vec::new(), true));
        let mut body = Vec::new();
        for (i, (chunk, end)) in all.into_iter().enumerate() {
            self.send(
                Request::ResponseBody(HttpBody {
                    body: chunk,
                    end_of_stream: end,
                    ..Default::default()
                }),
                None,
            )
            .await;
            let Response::ResponseBody(b) = self.recv().await.response.unwrap() else {
                panic!("response body chunk {i} not answered with a body answer")
            };
            let (bytes, answered_end) = streamed(&b.response.unwrap_or_default());
            body.extend_from_slice(&bytes);
            assert_eq!(answered_end, end, "only the last answer ends the stream");
        }
        (set, body)
    }
}

/// The upstream's answer as the test saw it through the EPP.
#[derive(Debug)]
pub struct Upstream {
    /// The model server's status.
    pub status: u16,
    /// The model server's headers.
    pub headers: reqwest::header::HeaderMap,
    /// Headers the EPP set on the response.
    pub set: BTreeMap<String, String>,
    /// The body the client gets.
    pub body: Vec<u8>,
}

/// The status of gRPC health service `service` at `addr`.
pub async fn health_status(addr: SocketAddr, service: &str) -> Result<i32, tonic::Code> {
    use tonic_health::pb::{health_client::HealthClient, HealthCheckRequest};
    let channel = tonic::transport::Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut c = HealthClient::new(channel);
    c.check(HealthCheckRequest {
        service: service.to_string(),
    })
    .await
    .map(|r| r.into_inner().status)
    .map_err(|s| s.code())
}

/// Polls `service` at `addr` for up to 1 s until it answers `status`; returns the last answer.
pub async fn health_becomes(
    addr: SocketAddr,
    service: &str,
    status: i32,
) -> Result<i32, tonic::Code> {
    let mut last = Err(tonic::Code::Unknown);
    for _ in 0..50 {
        last = health_status(addr, service).await;
        if last == Ok(status) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    last
}

/// The content type of every request body here.
pub const JSON: (&str, &str) = ("content-type", "application/json");

/// A completions body: `len` token ids from `first`, 4 tokens out.
pub fn completion(first: u32, len: u32, stream: bool) -> Json {
    let prompt: Vec<u32> = (first..first + len).collect();
    json!({"model": "pdgate-sim", "prompt": prompt, "max_tokens": 4, "stream": stream,
           "stream_options": {"include_usage": true}})
}

/// `n` decode-role simulator workers (a fleet without prefill: aggregated) and an EPP over
/// them with the built-in config.
pub async fn aggregated(n: usize) -> (Vec<pdgate_sim::WorkerHandle>, EppUnderTest) {
    let specs = (0..n)
        .map(|i| spec(&format!("w{i}"), "decode", None))
        .collect();
    let workers = sim_workers(specs, sim_config(50.0)).await;
    let epp = epp(endpoints(&workers), DEFAULT_CONFIG_YAML).await;
    (workers, epp)
}
