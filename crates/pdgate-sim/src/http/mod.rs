//! The worker's HTTP API: the engine APIs (`/v1/completions`, `/v1/chat/completions`,
//! `/v1/messages`, `/v1/responses`, `/v1/embeddings`, `/inference/v1/generate`), `/tokenize`,
//! `/detokenize`, the render routes, `/v1/models`, `/health`, `/metrics`, the internal side
//! channels `/kv/pull` (KV) and `/ec/pull` (encoder output), `/sim/info`, and
//! `/debug/responses/{request_id}` (the response recorder, `recorder.rs`).
//! Every response carries `x-sim-worker`, `x-sim-role`, `x-sim-revision` and echoes
//! `x-request-id`.

mod answer;
mod embeddings;
mod encode;
mod generate;
mod infer;
mod messages;
pub mod recorder;
mod render;
mod responses;
pub mod shape;
mod storage;
mod tokenize;
pub mod writer;

use crate::config::{SimConfig, WorkerSpec};
use crate::ec_handoff::EC_PULL_PATH;
use crate::engine::Engine;
use crate::handoff::{PullRequest, PULL_PATH};
use crate::kv_events::config::KvEventSource;
use crate::metrics::Metrics;
use crate::pull::{Pull, PullRejection};
use crate::storage::{SharedStorage, Writer};
use crate::transfer_config::EcRole;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use bytes::Bytes;
use http::{header, HeaderValue, StatusCode};
use pdgate_api::{headers, ApiKind, ErrorBody, Role};
use serde_json::json;
use std::net::SocketAddr;
use std::sync::Arc;

/// Largest accepted request body.
const BODY_LIMIT: usize = 64 * 1024 * 1024;

/// What every handler of one worker shares.
pub struct Worker {
    /// Identity (role canonicalized).
    pub spec: WorkerSpec,
    /// `spec.role`, parsed.
    pub role: Role,
    /// Engine settings.
    pub cfg: SimConfig,
    /// The engine.
    pub engine: Arc<Engine>,
    /// The worker's registry.
    pub metrics: Arc<Metrics>,
    /// Listening address.
    pub addr: SocketAddr,
    /// Host advertised in `kv_transfer_params.remote_host`.
    pub advertise_host: String,
    /// Client for KV and encoder pulls.
    pub client: reqwest::Client,
    /// When this worker's encoder is free again (encoding is FIFO per worker).
    pub encoder_free_at: parking_lot::Mutex<tokio::time::Instant>,
    /// This worker's KV-event publisher, as `GET /kv_event_sources` lists it.
    pub kv_source: Option<KvEventSource>,
    /// The KV shared storage (`ExampleConnector`); `None` = NIXL handoff.
    pub kv_storage: Option<SharedStorage>,
    /// The encoder-output shared storage (`ECExampleConnector`) and this worker's `ec_role`;
    /// `None` = `ec_transfer_params` pulls.
    pub ec_storage: Option<(SharedStorage, EcRole)>,
    /// This worker as the writer of shared-storage records.
    pub writer: Writer,
    /// The response recorder (`--record-responses`); `None` = off.
    pub recorder: Option<recorder::Recorder>,
    name_header: HeaderValue,
    role_header: HeaderValue,
    revision_header: Option<HeaderValue>,
}

impl Worker {
    /// Builds the shared state; errors when the role is unknown, the name or revision cannot
    /// be a header value, or a `shared_storage_path` cannot be created.
    pub fn new(
        spec: WorkerSpec,
        cfg: SimConfig,
        engine: Arc<Engine>,
        metrics: Arc<Metrics>,
        addr: SocketAddr,
        advertise_host: String,
        kv_source: Option<KvEventSource>,
    ) -> anyhow::Result<Self> {
        let value = |what: &str, v: &str| {
            HeaderValue::from_str(v)
                .map_err(|_| anyhow::anyhow!("worker {what} {v:?} is not a valid header value"))
        };
        let role = spec.role.parse::<Role>()?;
        let kv_storage = cfg
            .kv_shared_storage()
            .map(SharedStorage::open)
            .transpose()?;
        let ec_storage = match &cfg.ec_transfer {
            Some(ec) => Some((SharedStorage::open(&ec.shared_storage_path)?, ec.ec_role)),
            None => None,
        };
        let writer = Writer {
            model: cfg.model.clone(),
            revision: spec.revision.clone(),
            engine_id: engine.engine_id.clone(),
            worker: spec.name.clone(),
        };
        Ok(Worker {
            recorder: recorder::Recorder::new(cfg.record_responses),
            kv_storage,
            ec_storage,
            writer,
            role,
            encoder_free_at: parking_lot::Mutex::new(tokio::time::Instant::now()),
            name_header: value("name", &spec.name)?,
            role_header: value("role", &spec.role)?,
            revision_header: spec
                .revision
                .as_deref()
                .map(|r| value("revision", r))
                .transpose()?,
            client: reqwest::Client::builder()
                .connect_timeout(std::time::Duration::from_secs(2))
                .build()?,
            spec,
            cfg,
            engine,
            metrics,
            addr,
            advertise_host,
            kv_source,
        })
    }
}

/// The worker's routes.
pub fn router(worker: Arc<Worker>) -> Router {
    let recording = worker.recorder.is_some();
    let routes = Router::new()
        .route("/v1/completions", post(infer::completions))
        .route("/v1/chat/completions", post(infer::chat_completions))
        .route("/v1/messages", post(infer::messages))
        .route("/v1/responses", post(infer::responses))
        .route("/v1/embeddings", post(embeddings::embeddings))
        .route("/inference/v1/generate", post(infer::generate))
        .route("/debug/responses/{request_id}", get(recorder::recorded))
        .route("/v1/completions/render", post(render::completions))
        .route(
            "/v1/chat/completions/render",
            post(render::chat_completions),
        )
        .route("/tokenize", post(tokenize::tokenize))
        .route("/detokenize", post(tokenize::detokenize))
        .route("/reset_prefix_cache", post(reset_prefix_cache))
        .route("/kv_event_sources", get(kv_event_sources))
        .route("/v1/models", get(models))
        .route("/health", get(|| async { StatusCode::OK }))
        .route("/metrics", get(metrics))
        .route("/sim/info", get(info))
        .route(PULL_PATH, post(kv_pull))
        .route(EC_PULL_PATH, post(encode::ec_pull))
        .fallback(|| async { error(404, "no such route") });
    let routes = match recording {
        true => routes.layer(axum::middleware::from_fn_with_state(
            worker.clone(),
            recorder::record,
        )),
        false => routes,
    };
    routes
        .layer(axum::middleware::from_fn_with_state(worker.clone(), stamp))
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .with_state(worker)
}

/// An OpenAI error response.
pub fn error(status: u16, message: impl Into<String>) -> Response {
    let code = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (code, Json(ErrorBody::new(code.as_u16(), message))).into_response()
}

/// An error response in `api`'s form ([`ErrorBody::to_bytes_for`]: Anthropic's on
/// `/v1/messages`, as vLLM 0.32's Anthropic router answers its errors; OpenAI's otherwise).
pub fn error_for(api: ApiKind, status: u16, message: impl Into<String>) -> Response {
    let code = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let body = ErrorBody::new(code.as_u16(), message).to_bytes_for(api);
    (
        code,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        body,
    )
        .into_response()
}

/// The request's `x-request-id`, else a random one.
fn request_id(headers: &http::HeaderMap) -> String {
    headers
        .get(headers::REQUEST_ID)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
        .unwrap_or_else(|| format!("{:016x}", rand::random::<u64>()))
}

async fn stamp(State(w): State<Arc<Worker>>, req: Request, next: Next) -> Response {
    let request_id = req.headers().get(headers::REQUEST_ID).cloned();
    let mut resp = next.run(req).await;
    let h = resp.headers_mut();
    h.insert(headers::SIM_WORKER, w.name_header.clone());
    h.insert(headers::SIM_ROLE, w.role_header.clone());
    if let Some(rev) = &w.revision_header {
        h.insert(headers::SIM_REVISION, rev.clone());
    }
    if let Some(id) = request_id {
        h.insert(headers::REQUEST_ID, id);
    }
    resp
}

async fn models(State(w): State<Arc<Worker>>) -> Response {
    let created = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    Json(json!({
        "object": "list",
        "data": [{
            "id": w.cfg.model,
            "object": "model",
            "created": created,
            "owned_by": "pdgate-sim",
            "root": w.cfg.model,
            "parent": null,
            "max_model_len": w.cfg.max_model_len,
            "permission": [],
        }],
    }))
    .into_response()
}

async fn metrics(State(w): State<Arc<Worker>>) -> Response {
    w.engine.refresh_metrics();
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        w.metrics.render(),
    )
        .into_response()
}

/// `POST /reset_prefix_cache`: empties the prefix cache (publishing `AllBlocksCleared`);
/// 200 with an empty body, as vLLM answers.
async fn reset_prefix_cache(State(w): State<Arc<Worker>>) -> Response {
    w.engine.reset_prefix_cache();
    tracing::info!(worker = %w.spec.name, "prefix cache reset");
    StatusCode::OK.into_response()
}

/// `GET /kv_event_sources`: vLLM's discovery list (a bare array; empty when KV events are off).
async fn kv_event_sources(State(w): State<Arc<Worker>>) -> Response {
    Json(w.kv_source.iter().collect::<Vec<_>>()).into_response()
}

async fn info(State(w): State<Arc<Worker>>) -> Response {
    Json(json!({
        "name": w.spec.name,
        "role": w.spec.role,
        "revision": w.spec.revision,
        "labels": w.spec.labels,
        "engine_id": w.engine.engine_id,
        "model": w.cfg.model,
        "addr": w.addr.to_string(),
        "advertise_host": w.advertise_host,
    }))
    .into_response()
}

async fn kv_pull(State(w): State<Arc<Worker>>, body: Bytes) -> Response {
    answer_pull(&w, &body, |req: &PullRequest, addr| {
        w.engine.pull(req, addr)
    })
}

/// Answers a `POST` on a side channel ([`Pull::PATH`]): `serve`'s grant, or its rejection
/// (and a body that does not parse, `malformed`) with the label in [`Pull::REJECT_HEADER`].
/// `serve` gets the pull and this worker's advertised `host:port`.
fn answer_pull<P: Pull>(
    w: &Worker,
    body: &[u8],
    serve: impl FnOnce(&P, &str) -> Result<P::Grant, PullRejection<P::Refusal>>,
) -> Response {
    let reject = |status: u16, label: &'static str, message: String| {
        let mut resp = error(status, message);
        resp.headers_mut()
            .insert(P::REJECT_HEADER, HeaderValue::from_static(label));
        resp
    };
    let req: P = match serde_json::from_slice(body) {
        Ok(r) => r,
        Err(e) => return reject(400, "malformed", format!("pull request is malformed: {e}")),
    };
    let addr = format!("{}:{}", w.advertise_host, w.addr.port());
    match serve(&req, &addr) {
        Ok(grant) => Json(grant).into_response(),
        Err(r) => reject(r.status(), r.label(), r.to_string()),
    }
}
