//! Shared helpers of the end-to-end tests in `crates/pdgate/tests` (each test file says
//! `mod support;`): sending a request and reading the answer ([`send`], [`Reply`]), reading
//! Prometheus text ([`metric`], [`gauge`], [`metrics`]), starting simulator workers
//! ([`sim_worker`], [`sim_workers`]) and routers ([`router`], [`coordinator`]), a recording
//! fake engine ([`fake_engine`]), endpoint lists ([`endpoints`], [`endpoints_yaml`]), request
//! bodies ([`body`]) and a bounded [`wait_until`]. Everything listens on 127.0.0.1, port 0.
//!
//! [`vllm`] adds a fake vLLM engine with a configurable `/metrics` and `/v1/models`;
//! [`rollout`] runs the revision rollout and asserts every check; [`real_vllm`] installs and
//! runs a real vLLM (the CPU build) with a tiny model; [`kv_events`] runs simulators
//! publishing KV events and routers with the precise prefix index. [`envoy`] is a stand-in
//! Envoy for `pdgate epp`; [`limited_epp`] runs an EPP under chosen limits and
//! [`raw_ext_proc`] drives one of its streams message by message.
//!
//! Not every test file uses every helper, hence the module-wide `dead_code` allowance.
#![allow(dead_code)]

pub mod envoy;
pub mod flow;
pub mod kube;
pub mod kv_events;
pub mod limited_epp;
pub mod process;
pub mod raw_ext_proc;
pub mod real_vllm;
pub mod real_vllm_http;
pub mod rollout;
pub mod vllm;

use axum::response::Response;
use bytes::Bytes;
use http::HeaderMap;
use pdgate_scenario::fleet;
use pdgate_scheduler::{Endpoint, DEFAULT_CONFIG_YAML};
use pdgate_server::app::PhaseRouters;
use pdgate_server::ServerHandle;
use pdgate_sim::{spawn_fleet, spawn_worker, SimConfig, WorkerHandle, WorkerSpec};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

// ---------------------------------------------------------------------------------------
// Requests

/// A server's answer: status, headers and the body as JSON (`Null` when it is not JSON).
#[derive(Debug)]
pub struct Reply {
    /// HTTP status.
    pub status: u16,
    /// Response headers.
    pub headers: HeaderMap,
    /// The body parsed as JSON, `Value::Null` when it is not JSON.
    pub body: Value,
}

impl Reply {
    /// Header `name` as a string, "" when absent.
    pub fn header(&self, name: &str) -> String {
        header_of(&self.headers, name)
    }

    /// The headers saying who served the request: `[x-pdgate-pd-mode,
    /// x-pdgate-prefill-endpoint, x-pdgate-decode-endpoint]`, "" for each one absent.
    pub fn served(&self) -> [String; 3] {
        served_of(&self.headers)
    }
}

/// Header `name` of `h` as a string, "" when absent.
pub fn header_of(h: &HeaderMap, name: &str) -> String {
    h.get(name)
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default()
}

/// `[x-pdgate-pd-mode, x-pdgate-prefill-endpoint, x-pdgate-decode-endpoint]` of `h`.
pub fn served_of(h: &HeaderMap) -> [String; 3] {
    [
        "x-pdgate-pd-mode",
        "x-pdgate-prefill-endpoint",
        "x-pdgate-decode-endpoint",
    ]
    .map(|n| header_of(h, n))
}

/// POSTs `body` as JSON to `{url}/v1/completions` with the extra `headers`.
pub async fn send(url: &str, headers: &[(&str, &str)], body: &Value) -> Reply {
    send_to(
        url,
        "/v1/completions",
        headers,
        serde_json::to_vec(body).unwrap(),
    )
    .await
}

/// POSTs the raw `body` (`content-type: application/json`) to `{url}{path}` with the extra
/// `headers`.
pub async fn send_to(
    url: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: impl Into<reqwest::Body>,
) -> Reply {
    let mut r = reqwest::Client::new()
        .post(format!("{url}{path}"))
        .header("content-type", "application/json")
        .body(body);
    for (k, v) in headers {
        r = r.header(*k, *v);
    }
    let r = r.send().await.unwrap();
    let status = r.status().as_u16();
    let headers = r.headers().clone();
    let body = r.json().await.unwrap_or(Value::Null);
    Reply {
        status,
        headers,
        body,
    }
}

/// A server's answer read whole, its body as bytes (for byte-for-byte comparisons and
/// bodies that are not JSON).
#[derive(Debug)]
pub struct RawReply {
    /// HTTP status.
    pub status: u16,
    /// Response headers.
    pub headers: HeaderMap,
    /// The body, as received.
    pub bytes: Vec<u8>,
}

impl RawReply {
    /// Header `name` as a string, "" when absent.
    pub fn header(&self, name: &str) -> String {
        header_of(&self.headers, name)
    }

    /// `[x-pdgate-pd-mode, x-pdgate-prefill-endpoint, x-pdgate-decode-endpoint]`.
    pub fn served(&self) -> [String; 3] {
        served_of(&self.headers)
    }

    /// The body as text (lossy).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.bytes).into_owned()
    }
}

/// POSTs `body` as JSON to `{url}{path}` with `x-request-id: rid` and reads the whole answer.
pub async fn post_raw(url: &str, path: &str, rid: &str, body: &Value) -> RawReply {
    let resp = reqwest::Client::new()
        .post(format!("{url}{path}"))
        .header("x-request-id", rid)
        .json(body)
        .send()
        .await
        .unwrap();
    RawReply {
        status: resp.status().as_u16(),
        headers: resp.headers().clone(),
        bytes: resp.bytes().await.unwrap().to_vec(),
    }
}

/// POSTs `body` (a streamed request) as JSON to `{url}/v1/completions`; returns the status,
/// the `x-pdgate-pd-mode` header (empty when absent) and the whole body as text.
pub async fn stream_text(url: &str, body: &Value) -> (u16, String, String) {
    stream_read(url, &[], body, "x-pdgate-pd-mode").await
}

/// POSTs `body` as JSON to `{url}/v1/completions` with the extra `headers`; returns the
/// status, the response header `read` (empty when absent) and the whole body as text.
pub async fn stream_read(
    url: &str,
    headers: &[(&str, &str)],
    body: &Value,
    read: &str,
) -> (u16, String, String) {
    let mut req = reqwest::Client::new()
        .post(format!("{url}/v1/completions"))
        .json(body);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    let value = resp
        .headers()
        .get(read)
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    (status, value, resp.text().await.unwrap())
}

/// A completions body for model `pdgate-sim`: the `len` token ids `first..first + len` and
/// `max_tokens`.
pub fn body(first: u32, len: u32, max_tokens: u32) -> Value {
    json!({
        "model": "pdgate-sim",
        "prompt": (first..first + len).collect::<Vec<u32>>(),
        "max_tokens": max_tokens,
    })
}

/// `http://ADDR` of a router.
pub fn url(server: &ServerHandle) -> String {
    format!("http://{}", server.addr)
}

/// The Mooncake conversation trace in `shared/traces/` beside the checkout.
pub fn conversation_trace() -> std::path::PathBuf {
    std::path::PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/traces/mooncake_conversation.jsonl"
    ))
}

// ---------------------------------------------------------------------------------------
// Prometheus text

/// The value of the first sample of `text` whose line starts with `series` (metric name and
/// labels, exactly as exported) and holds an integer; 0 when there is none.
pub fn metric(text: &str, series: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or(0)
}

/// [`metric`] for a gauge: the first such sample as a float, 0 when there is none.
pub fn gauge(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or(0.0)
}

/// The Prometheus text of `{url}/metrics`.
pub async fn metrics(url: &str) -> String {
    reqwest::get(format!("{url}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

// ---------------------------------------------------------------------------------------
// Simulator workers and endpoint lists

/// Labels `llm-d.ai/role = role`, plus `disaggregatedset.x-k8s.io/revision` when given.
pub fn labels(role: &str, revision: Option<&str>) -> BTreeMap<String, String> {
    let mut l = BTreeMap::from([(pdgate_api::labels::ROLE.to_string(), role.to_string())]);
    if let Some(r) = revision {
        l.insert(pdgate_api::labels::DS_REVISION.to_string(), r.to_string());
    }
    l
}

/// A worker identity `name` of `role` (and `revision`), labeled as [`labels`] says.
pub fn spec(name: &str, role: &str, revision: Option<&str>) -> WorkerSpec {
    WorkerSpec {
        name: name.to_string(),
        role: role.to_string(),
        revision: revision.map(str::to_string),
        labels: labels(role, revision),
    }
}

/// A member `name` of a disaggregated set in `revision` and `role`: [`spec`] plus the
/// `disaggregatedset.x-k8s.io/role` label the rollout screener counts.
pub fn member(name: &str, revision: &str, role: &str) -> WorkerSpec {
    let mut s = spec(name, role, Some(revision));
    s.labels
        .insert(pdgate_api::labels::DS_ROLE.to_string(), role.to_string());
    s
}

/// `GET {url}/health`: its status and JSON body.
pub async fn health(url: &str) -> (u16, Value) {
    let r = reqwest::get(format!("{url}/health")).await.unwrap();
    (r.status().as_u16(), r.json().await.unwrap())
}

/// Waits up to `limit` until `/health` answers `status`; returns its JSON body.
pub async fn health_becomes(url: &str, status: u16, limit: Duration) -> Value {
    vllm::wait_for(limit, &format!("/health to answer {status}"), || {
        let h = health(url);
        async move { h.await.0 == status }
    })
    .await;
    health(url).await.1
}

/// Simulator settings: the defaults with `speedup`.
pub fn sim_config(speedup: f64) -> SimConfig {
    SimConfig {
        speedup,
        ..SimConfig::default()
    }
}

/// One simulator worker on 127.0.0.1:0.
pub async fn sim_worker(spec: WorkerSpec, cfg: SimConfig) -> WorkerHandle {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    spawn_worker(spec, cfg, l).await.unwrap()
}

/// Simulator workers on 127.0.0.1, each on an ephemeral port, all with `cfg`.
pub async fn sim_workers(specs: Vec<WorkerSpec>, cfg: SimConfig) -> Vec<WorkerHandle> {
    spawn_fleet(specs, cfg, "127.0.0.1", 0).await.unwrap()
}

/// The endpoints of running workers: name, address and the labels of their spec.
pub fn endpoints<'a>(workers: impl IntoIterator<Item = &'a WorkerHandle>) -> Vec<Endpoint> {
    workers
        .into_iter()
        .map(|w| Endpoint::new(w.name(), w.addr().to_string(), w.spec().labels.clone()))
        .collect()
}

/// An endpoints file (the `--endpoints-file` format) listing `workers`, each labeled with
/// its role.
pub fn endpoints_yaml<'a>(workers: impl IntoIterator<Item = &'a WorkerHandle>) -> String {
    let mut s = String::from("endpoints:\n");
    for w in workers {
        s += &format!(
            "- name: {}\n  address: {}\n  labels: {{llm-d.ai/role: {}}}\n",
            w.name(),
            w.addr(),
            w.role()
        );
    }
    s
}

// ---------------------------------------------------------------------------------------
// Routers

/// A router on 127.0.0.1:0 scheduling `endpoints` with `config_yaml`, default options but
/// one: callers on 127.0.0.1 are trusted coordinators (as a coordinator sidecar on loopback
/// is, with `--trusted-coordinator-networks 127.0.0.1`), so tests may act as one.
pub async fn router(endpoints: Vec<Endpoint>, config_yaml: &str) -> ServerHandle {
    fleet::router_with(endpoints, config_yaml, |o| o.trust = loopback_trusted())
        .await
        .unwrap()
}

/// Trust for callers on 127.0.0.1.
pub fn loopback_trusted() -> pdgate_core::trust::TrustedCallers {
    let nets = pdgate_core::trust::parse_networks(&["127.0.0.1".into()]).unwrap();
    pdgate_core::trust::TrustedCallers::new(nets, None).unwrap()
}

/// A router with the built-in config in front of one engine at `addr`, endpoint `d0` with
/// the decode role (a fake engine's router).
pub async fn decode_router(addr: &str) -> ServerHandle {
    let role = BTreeMap::from([(pdgate_api::labels::ROLE.to_string(), "decode".to_string())]);
    router(vec![Endpoint::new("d0", addr, role)], DEFAULT_CONFIG_YAML).await
}

/// A coordinator (layout (b)): a router without endpoints that sends each phase to `routers`.
pub async fn coordinator(routers: PhaseRouters) -> ServerHandle {
    fleet::router_with(Vec::new(), DEFAULT_CONFIG_YAML, |o| {
        o.routers = Some(routers)
    })
    .await
    .unwrap()
}

/// The built-in default config with a `disaggregatedset-rollout-screener` (its defaults:
/// max-role, prefill and decode required) as first plugin.
pub fn screened_config() -> String {
    DEFAULT_CONFIG_YAML.replacen(
        "\nplugins:\n",
        "\nplugins:\n- type: disaggregatedset-rollout-screener\n",
        1,
    )
}

// ---------------------------------------------------------------------------------------
// Fake engine

/// One request a [`FakeEngine`] received.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// HTTP method, e.g. `POST`.
    pub method: String,
    /// Request path, e.g. `/v1/completions`.
    pub path: String,
    /// Request headers.
    pub headers: HeaderMap,
    /// Request body, as received.
    pub body: Bytes,
}

impl Recorded {
    /// The body parsed as JSON; panics when it is not JSON.
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap()
    }

    /// Header `name` as a string, `None` when absent.
    pub fn header(&self, name: &str) -> Option<String> {
        self.headers
            .get(name)
            .map(|v| v.to_str().unwrap().to_string())
    }
}

/// A fake engine (or fake router) on 127.0.0.1:0; it stops with the test's runtime.
pub struct FakeEngine {
    /// `host:port` it listens on.
    pub addr: String,
    seen: Arc<Mutex<Vec<Recorded>>>,
}

impl FakeEngine {
    /// Every request received so far, oldest first.
    pub fn requests(&self) -> Vec<Recorded> {
        self.seen.lock().unwrap().clone()
    }
}

/// Starts a fake engine serving `path` (any method): each request is recorded, then answered
/// with `reply(&request)`. Other paths (the router's `/metrics` and `/v1/models` scrapes) get
/// 404 and are not recorded.
pub async fn fake_engine(
    path: &str,
    reply: impl Fn(&Recorded) -> Response + Send + Sync + 'static,
) -> FakeEngine {
    let seen: Arc<Mutex<Vec<Recorded>>> = Arc::default();
    let reply = Arc::new(reply);
    let record = seen.clone();
    let handler = move |method: http::Method, uri: http::Uri, headers: HeaderMap, body: Bytes| {
        let (record, reply) = (record.clone(), reply.clone());
        async move {
            let request = Recorded {
                method: method.to_string(),
                path: uri.path().to_string(),
                headers,
                body,
            };
            let response = reply(&request);
            record.lock().unwrap().push(request);
            response
        }
    };
    let app = axum::Router::new().route(path, axum::routing::any(handler));
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap().to_string();
    tokio::spawn(async move { axum::serve(l, app).await.unwrap() });
    FakeEngine { addr, seen }
}

// ---------------------------------------------------------------------------------------
// Waiting

/// Polls `done` every 10 ms until it holds; panics naming `what` once `timeout` has passed.
pub async fn wait_until(timeout: Duration, what: &str, mut done: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + timeout;
    while !done() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: not reached within {timeout:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A TCP listener on loopback that counts the connections it gets: the place a hostile
/// client's `kv_transfer_params` points engines at. Returns its port and the count.
pub async fn trap() -> (u16, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    let hits = std::sync::Arc::new(AtomicUsize::new(0));
    let count = hits.clone();
    tokio::spawn(async move {
        while let Ok((_conn, _)) = l.accept().await {
            count.fetch_add(1, Ordering::SeqCst);
        }
    });
    (port, hits)
}
