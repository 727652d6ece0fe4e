//! Router state, routes, and starting a server on a listener (tests and `demo` run it
//! in-process on 127.0.0.1:0).

use crate::metrics::Metrics;
use crate::upstream::Upstream;
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use pdgate_api::ApiKind;
use pdgate_coordinator::header_rules::ForwardRules;
use pdgate_fleet::discovery::{self, DiscoveryError};
use pdgate_fleet::{scrape, EndpointRegistry, EndpointSource};
use pdgate_scheduler::Scheduler;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;

pub use pdgate_core::defaults::{
    DEFAULT_MAX_BODY_BYTES, DEFAULT_SCRAPE_INTERVAL_MS, DEFAULT_SCRAPE_TIMEOUT_MS,
};

/// What a server needs to start.
pub struct ServeOptions {
    /// The scheduler (from a config).
    pub scheduler: Arc<Scheduler>,
    /// Where endpoints come from.
    pub endpoints: EndpointSource,
    /// Request body limit, bytes.
    pub max_body_bytes: usize,
    /// Engine metrics scrape interval.
    pub scrape_interval: Duration,
    /// Time allowed for one engine `/metrics` scrape (head and body).
    pub scrape_timeout: Duration,
    /// Upstream timeouts, retries, breakers and the prefill-unavailable policy.
    pub resilience: crate::resilience_args::Resilience,
    /// Per-role routers to coordinate instead of scheduling locally (layout (b)).
    pub routers: Option<PhaseRouters>,
    /// Response headers captured from phase responses and sent on later legs.
    pub forward_rules: ForwardRules,
    /// What clients may hold: header/body timeouts, connections, body bytes in flight.
    pub client_limits: crate::client_limits::ClientLimits,
    /// Who may send coordinator-to-router headers (default: nobody); a coordinator also
    /// presents its token on legs to routers.
    pub trust: crate::trust::TrustedCallers,
    /// InferenceObjective priorities (`--inference-objective`), for flow control.
    pub objectives: crate::flow_control::Objectives,
    /// Whom flow identity headers are honoured from (`--flow-headers-from`).
    pub flow_headers_from: pdgate_core::flow_key::FlowHeadersFrom,
    /// The `kv_transfer_params` contract of split requests (`--kv-connector`).
    pub kv_connector: pdgate_coordinator::KvConnector,
    /// The upstream connection pool.
    pub upstream_pool: crate::upstream::PoolSettings,
    /// The encode step's contract and fan-out (`--ec-connector`, `--encode-max-parallel`).
    pub encode: pdgate_coordinator::EncodeSettings,
    /// Steps run on each client request before its legs (`--render-address`).
    pub pre_steps: crate::pre_steps::PreSteps,
}

pub use crate::phase_routers::PhaseRouters;

impl ServeOptions {
    /// Options with the defaults above.
    pub fn new(scheduler: Arc<Scheduler>, endpoints: EndpointSource) -> Self {
        ServeOptions {
            scheduler,
            endpoints,
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            scrape_interval: Duration::from_millis(DEFAULT_SCRAPE_INTERVAL_MS),
            scrape_timeout: Duration::from_millis(DEFAULT_SCRAPE_TIMEOUT_MS),
            resilience: Default::default(),
            routers: None,
            forward_rules: ForwardRules::default(),
            client_limits: Default::default(),
            trust: Default::default(),
            objectives: Default::default(),
            flow_headers_from: Default::default(),
            kv_connector: Default::default(),
            upstream_pool: Default::default(),
            encode: Default::default(),
            pre_steps: Default::default(),
        }
    }
}

/// Shared state of one router.
pub struct AppState {
    /// The scheduler.
    pub scheduler: Arc<Scheduler>,
    /// Current endpoints.
    pub registry: Arc<EndpointRegistry>,
    /// Pooled upstream client (the in-process dispatcher).
    pub upstream: Upstream,
    /// Own metrics.
    pub metrics: Arc<Metrics>,
    /// Request body limit, bytes.
    pub max_body_bytes: usize,
    /// Per-role routers, when this server coordinates them instead of scheduling.
    pub routers: Option<PhaseRouters>,
    /// `forward_response_headers` (design.md §5.3).
    pub forward_rules: ForwardRules,
    /// `x-session-id` bindings, shared by every server thread.
    pub sessions: Arc<crate::session::SessionTable>,
    /// Per-endpoint circuit breakers, shared by every server thread.
    pub breakers: Arc<crate::breaker::Breakers>,
    /// Upstream timeouts (design.md §5.5).
    pub timeouts: crate::timeouts::UpstreamTimeouts,
    /// Retry budget and backoff of engine legs.
    pub retry: crate::retry::RetryPolicy,
    /// What a split request does when no prefill endpoint can serve it.
    pub prefill_fallback: pdgate_coordinator::PrefillFallback,
    /// What clients may hold (issue 10).
    pub client_limits: crate::client_limits::ClientLimits,
    /// Client connections open now, shared by every server thread.
    pub connections: Arc<crate::listener::ConnectionSlots>,
    /// Request body bytes held now, shared by every server thread.
    pub body_budget: Arc<crate::body_budget::BodyBudget>,
    /// Who may send coordinator-to-router headers ([`crate::trust`]).
    pub trust: crate::trust::TrustedCallers,
    /// InferenceObjective priorities.
    pub objectives: crate::flow_control::Objectives,
    /// Whom flow identity headers are honoured from.
    pub flow_headers_from: pdgate_core::flow_key::FlowHeadersFrom,
    /// Admission before scheduling ([`crate::flow_control`]), shared by every server thread.
    pub flow: Arc<crate::flow_control::FlowController>,
    /// Engines' KV events feeding the precise prefix indexes; `None` without one.
    pub kv_feed: Option<Arc<crate::kv_feed::KvFeed>>,
    /// The `token-producer` step ([`crate::prompt_tokens`]), when configured.
    pub tokens: Option<Arc<crate::prompt_tokens::PromptTokens>>,
    /// The `kv_transfer_params` contract of split requests.
    pub kv_connector: pdgate_coordinator::KvConnector,
    /// The encode step's contract and fan-out.
    pub encode: pdgate_coordinator::EncodeSettings,
    /// Steps run on each client request before its legs.
    pub pre_steps: crate::pre_steps::PreSteps,
    /// Client requests being answered (draining waits for them).
    pub active: crate::active::ActiveRequests,
}

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

impl AppState {
    /// Model ids served by the current endpoints (union of the lists known so far).
    /// (`/v1/models` answers the engines' own objects, [`scrape::merge_model_cards`].)
    pub fn fleet_models(&self) -> std::collections::BTreeSet<String> {
        let snap = self.registry.snapshot();
        snap.endpoints
            .iter()
            .filter_map(|e| e.load.models())
            .flat_map(|m| m.iter().cloned().collect::<Vec<_>>())
            .collect()
    }

    /// The handles the one intake of both fronts reads ([`pdgate_core::intake`]).
    pub fn intake_handles(&self) -> pdgate_core::intake::IntakeHandles<'_> {
        pdgate_core::intake::IntakeHandles {
            scheduler: &self.scheduler,
            registry: &self.registry,
            metrics: &self.metrics,
            sessions: &self.sessions,
            tokens: self.tokens.as_deref(),
            flow: &self.flow,
            objectives: &self.objectives,
            flow_headers_from: self.flow_headers_from,
            forward_rules: &self.forward_rules,
        }
    }

    /// False only when every endpoint's model list is known and none has `model`: the
    /// request is then answered 404. Unknown lists keep the request (fail open).
    pub fn model_may_exist(&self, model: &str) -> bool {
        self.registry.model_may_exist(model)
    }

    /// Sum of in-flight bookings over every current endpoint (idle router: 0).
    pub fn in_flight_total(&self) -> u32 {
        self.registry.in_flight_total()
    }

    /// The same shared state (scheduler, endpoints, metrics, models) with an upstream
    /// connection pool of its own, for a server thread with its own runtime: its upstream
    /// connections then live on that thread.
    pub fn with_own_upstream(&self) -> AppState {
        AppState {
            scheduler: self.scheduler.clone(),
            registry: self.registry.clone(),
            upstream: self.upstream.fresh_pool(),
            metrics: self.metrics.clone(),
            max_body_bytes: self.max_body_bytes,
            routers: self.routers.clone(),
            forward_rules: self.forward_rules.clone(),
            sessions: self.sessions.clone(),
            breakers: self.breakers.clone(),
            timeouts: self.timeouts,
            retry: self.retry,
            prefill_fallback: self.prefill_fallback,
            kv_connector: self.kv_connector,
            encode: self.encode,
            pre_steps: self.pre_steps.clone(),
            active: self.active.clone(),
            client_limits: self.client_limits,
            connections: self.connections.clone(),
            body_budget: self.body_budget.clone(),
            trust: self.trust.clone(),
            objectives: self.objectives.clone(),
            flow_headers_from: self.flow_headers_from,
            flow: self.flow.clone(),
            kv_feed: self.kv_feed.clone(),
            tokens: self.tokens.clone(),
        }
    }
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
