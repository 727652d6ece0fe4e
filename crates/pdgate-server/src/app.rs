//! Routes and starting a server on a listener (the state is [`crate::state`]) (tests and `demo` run it
//! in-process on 127.0.0.1:0).

use crate::metrics::Metrics;
use crate::upstream::Upstream;
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use pdgate_api::ApiKind;
use pdgate_fleet::discovery::{self, DiscoveryError};
use pdgate_fleet::{scrape, EndpointRegistry};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;

pub use crate::state::{AppState, PhaseRouters, ServeOptions};
pub use pdgate_core::defaults::{
    DEFAULT_MAX_BODY_BYTES, DEFAULT_SCRAPE_INTERVAL_MS, DEFAULT_SCRAPE_TIMEOUT_MS,
};

/// A running server; stops its tasks when dropped.
pub struct ServerHandle {
    /// Bound address.
    pub addr: SocketAddr,
    /// Shared state (for tests: in-flight counts, metrics).
    pub state: Arc<AppState>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl ServerHandle {
    /// Waits until the server task ends (it runs until aborted).
    pub async fn wait(mut self) {
        if let Some(server) = self.tasks.pop() {
            let _ = server.await;
        }
    }
}

impl Drop for ServerHandle {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// The routes.
pub fn router(state: Arc<AppState>) -> Router {
    // Every inference API (pdgate_api::ApiKind: completions, chat, messages, responses,
    // embeddings, generate, tokenize, detokenize) takes the one request path.
    let inference = ApiKind::ALL.into_iter().fold(Router::new(), |r, api| {
        r.route(
            api.path(),
            post(move |State(s): State<Arc<AppState>>, req: Request| infer(s, api, req)),
        )
    });
    inference
        .route("/v1/models", get(models))
        .route("/health", get(health))
        .route("/live", get(|| async { "ok" }))
        .route("/metrics", get(metrics))
        .route("/debug/kv-index", get(kv_index_dump))
        .fallback(no_route)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(state)
}

async fn no_route(method: http::Method, uri: http::Uri) -> Response {
    crate::errors::ApiError::NoRoute {
        method: method.to_string(),
        path: uri.path().to_string(),
    }
    .into_response_for(ApiKind::error_form_for_path(uri.path()))
}

async fn method_not_allowed(method: http::Method, uri: http::Uri) -> Response {
    crate::errors::ApiError::MethodNotAllowed {
        method: method.to_string(),
        path: uri.path().to_string(),
    }
    .into_response_for(ApiKind::error_form_for_path(uri.path()))
}

/// The source address of the request's connection (set by [`crate::listener`]).
fn peer_ip(ext: &http::Extensions) -> Option<std::net::IpAddr> {
    ext.get::<axum::extract::ConnectInfo<SocketAddr>>()
        .map(|c| c.0.ip())
}

/// One inference request on `api`.
async fn infer(s: Arc<AppState>, api: ApiKind, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    let peer = peer_ip(&parts.extensions);
    crate::proxy::handle(s, api, parts.headers, body, peer).await
}

async fn models(State(s): State<Arc<AppState>>) -> Response {
    if let Some(r) = &s.routers {
        // A coordinator knows no endpoints: the decode router's list is the fleet's.
        let got = s
            .upstream
            .get(
                &r.decode.name,
                &r.decode.address,
                "/v1/models",
                Duration::from_secs(5),
            )
            .await;
        return match got {
            Ok((200, body)) => {
                ([(http::header::CONTENT_TYPE, "application/json")], body).into_response()
            }
            Ok((status, _)) => crate::errors::ApiError::UpstreamServerError {
                phase: "models",
                endpoint: r.decode.name.clone(),
                status,
                detail: "listing models".into(),
            }
            .into_response(),
            Err(e) => {
                crate::errors::ApiError::Pipeline(pdgate_coordinator::PipelineError::Dispatch {
                    phase: pdgate_api::Phase::Decode,
                    source: e,
                })
                .into_response()
            }
        };
    }
    let data = scrape::merge_model_cards(&s.registry.snapshot());
    axum::Json(serde_json::json!({"object": "list", "data": data})).into_response()
}

/// Readiness: 200 while at least one endpoint can serve (schedulable and its last scrape not
/// failed; a coordinator defers to its routers), else 503. Liveness is `/live`.
async fn health(State(s): State<Arc<AppState>>) -> Response {
    let snap = s.registry.snapshot();
    let serving = (snap.endpoints.iter())
        .filter(|e| e.endpoint.schedulable() && e.load.reachable() != Some(false))
        .count();
    let total = snap.endpoints.len();
    let draining = s.flow.is_shutting_down();
    let ready = (serving > 0 || s.routers.is_some()) && !draining;
    let body = serde_json::json!({
        "status": if ready { "ready" } else { "not ready" },
        "endpoints": total,
        "serving": serving,
        "reason": (!ready).then_some(if draining {
            "shutting down"
        } else if total == 0 {
            "no endpoints known"
        } else {
            "no endpoint can serve (none Ready, or every one failing its /metrics scrape)"
        }),
    });
    let status = if ready {
        http::StatusCode::OK
    } else {
        http::StatusCode::SERVICE_UNAVAILABLE
    };
    (status, axum::Json(body)).into_response()
}

async fn metrics(State(s): State<Arc<AppState>>) -> Response {
    s.metrics.refresh(&s.scheduler, &s.registry.snapshot());
    s.metrics
        .client_connections
        .set(s.connections.open() as i64);
    s.metrics
        .inflight_body_bytes
        .set(s.body_budget.used() as i64);
    let mut text = s.metrics.render();
    crate::metrics::render_fleet_counters(s.registry.counters(), &mut text);
    if let Some(feed) = &s.kv_feed {
        feed.render_metrics(&mut text);
    }
    (
        [(http::header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        text,
    )
        .into_response()
}

/// Most sample hashes `/debug/kv-index` lists per endpoint.
pub const KV_INDEX_MAX_SAMPLE: usize = 1024;

/// `GET /debug/kv-index?sample=N`: the precise prefix indexes as JSON (settings, totals,
/// per-endpoint blocks with up to N sample hashes, default 8, at most
/// [`KV_INDEX_MAX_SAMPLE`]); 400 naming `sample` when N is not a number in that range; 404
/// (unknown path) without a precise index.
async fn kv_index_dump(
    State(s): State<Arc<AppState>>,
    axum::extract::Query(q): axum::extract::Query<std::collections::HashMap<String, String>>,
) -> Response {
    let sample = match q.get("sample").map(|v| v.parse::<usize>()) {
        None => 8,
        Some(Ok(n)) if n <= KV_INDEX_MAX_SAMPLE => n,
        Some(_) => {
            return crate::errors::ApiError::InvalidQuery {
                param: "sample",
                reason: format!("must be a whole number from 0 to {KV_INDEX_MAX_SAMPLE}"),
            }
            .into_response()
        }
    };
    match &s.kv_feed {
        Some(feed) => axum::Json(feed.dump(sample)).into_response(),
        // No precise index: the path is not served, as any unknown path.
        None => crate::errors::ApiError::NoRoute {
            method: "GET".into(),
            path: "/debug/kv-index".into(),
        }
        .into_response(),
    }
}

/// Starts discovery and engine scraping and returns the shared router state (not serving
/// yet) with the background tasks.
///
/// Errors: the endpoint source is invalid (bad file, duplicate names).
pub async fn start_state(
    opts: ServeOptions,
) -> Result<(Arc<AppState>, Vec<tokio::task::JoinHandle<()>>), DiscoveryError> {
    let tokens = crate::prompt_tokens::PromptTokens::load(&opts.scheduler)?;
    let registry = Arc::new(EndpointRegistry::default());
    let breakers = Arc::new(crate::breaker::Breakers::new(opts.resilience.breaker));
    crate::bounds::forget_departed(&registry, opts.scheduler.clone(), breakers.clone());
    let mut tasks = Vec::new();
    if let Some(t) = discovery::start(opts.endpoints, registry.clone()).await? {
        tasks.push(t);
    }
    let upstream = Upstream::new(opts.resilience.timeouts.connect, opts.upstream_pool);
    let metrics = Arc::new(Metrics::new());
    let settings = scrape::ScrapeSettings {
        interval: opts.scrape_interval,
        timeout: opts.scrape_timeout,
        models_every: 25,
        data: opts.scheduler.data_layer().clone(),
    };
    let effects = crate::bounds::ScrapeEffects::new(opts.scheduler.clone(), metrics.clone());
    let client = scrape::client::ScrapeClient::new(opts.resilience.timeouts.connect);
    tasks.push(scrape::start(
        registry.clone(),
        client,
        settings,
        Arc::new(effects),
    ));
    let flow = crate::flow_control::FlowController::new(
        opts.scheduler.flow().clone(),
        &opts.objectives,
        registry.clone(),
        metrics.registry(),
    );
    let scrape_period = opts
        .scheduler
        .data_layer()
        .metrics_period(opts.scrape_interval);
    opts.scheduler
        .flow()
        .detector
        .set_scrape_interval(scrape_period);
    tasks.push(tokio::spawn(flow.clone().run()));
    let kv_feed = crate::kv_feed::KvFeed::start(&registry, &opts.scheduler);
    let state = Arc::new(AppState {
        kv_feed,
        scheduler: opts.scheduler,
        registry,
        upstream,
        metrics,
        max_body_bytes: opts.max_body_bytes,
        routers: opts.routers,
        forward_rules: opts.forward_rules,
        sessions: Arc::default(),
        breakers,
        timeouts: opts.resilience.timeouts,
        retry: opts.resilience.retry,
        prefill_fallback: opts.resilience.prefill_fallback,
        client_limits: opts.client_limits,
        connections: Arc::default(),
        body_budget: crate::body_budget::BodyBudget::new(
            opts.client_limits.max_inflight_body_bytes,
        ),
        trust: opts.trust,
        objectives: opts.objectives,
        flow_headers_from: opts.flow_headers_from,
        flow,
        tokens,
        kv_connector: opts.kv_connector,
        encode: opts.encode,
        pre_steps: opts.pre_steps,
        active: Default::default(),
    });
    Ok((state, tasks))
}

/// Serves the routes of `state` on `listener` until the task is aborted, under its client
/// limits ([`crate::listener`]).
pub fn spawn_listener(listener: TcpListener, state: Arc<AppState>) -> tokio::task::JoinHandle<()> {
    let app = router(state.clone());
    tokio::spawn(crate::listener::accept_loop(listener, app, state))
}

/// Starts discovery, scraping and the HTTP server on `listener`, all on the current runtime
/// (tests and `demo`; `pdgate serve` runs one server thread per core instead).
///
/// Errors: the endpoint source is invalid (bad file, duplicate names).
pub async fn serve_on(
    listener: TcpListener,
    opts: ServeOptions,
) -> Result<ServerHandle, DiscoveryError> {
    let addr = listener.local_addr().map_err(|e| DiscoveryError {
        source_name: "listener".into(),
        message: e.to_string(),
    })?;
    let (state, mut tasks) = start_state(opts).await?;
    tasks.push(spawn_listener(listener, state.clone()));
    Ok(ServerHandle { addr, state, tasks })
}
