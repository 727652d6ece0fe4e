//! The router's state: what a server needs to start ([`ServeOptions`]) and what every
//! request handler shares ([`AppState`]). Stages name it; it names no stage's handler, so
//! the request path's modules do not import each other through it in a circle.

use crate::metrics::Metrics;
use crate::upstream::Upstream;
use pdgate_coordinator::header_rules::ForwardRules;
use pdgate_core::defaults::{
    DEFAULT_MAX_BODY_BYTES, DEFAULT_SCRAPE_INTERVAL_MS, DEFAULT_SCRAPE_TIMEOUT_MS,
};
use pdgate_fleet::{EndpointRegistry, EndpointSource};
use pdgate_scheduler::Scheduler;
use std::sync::Arc;
use std::time::Duration;

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

pub use crate::dispatch::phase_routers::PhaseRouters;

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
    pub connections: Arc<pdgate_core::front::ConnectionSlots>,
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

impl AppState {
    /// Model ids served by the current endpoints (union of the lists known so far).
    /// (`/v1/models` answers the engines' own objects, [`pdgate_fleet::scrape::merge_model_cards`].)
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
