//! The EPP's shared state: the same scheduler, endpoint registry, discovery and engine
//! scraping as `pdgate serve` (from `pdgate-fleet`), plus the session table and metrics.

use crate::limits::EppLimits;
use pdgate_coordinator::header_rules::ForwardRules;
use pdgate_core::body_budget::BodyBudget;
use pdgate_core::flow_control::{FlowController, Objectives};
use pdgate_core::flow_key::FlowHeadersFrom;
use pdgate_core::front::ConnectionSlots;
use pdgate_core::metrics::Metrics;
use pdgate_core::session::SessionTable;
use pdgate_fleet::discovery::{self, DiscoveryError};
use pdgate_fleet::{scrape, EndpointRegistry, EndpointSource};
use pdgate_scheduler::Scheduler;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// What an EPP needs to start.
pub struct EppOptions {
    /// The scheduler (from an EndpointPickerConfig).
    pub scheduler: Arc<Scheduler>,
    /// Where endpoints come from.
    pub endpoints: EndpointSource,
    /// Request body limit, bytes (over it: an immediate 413).
    pub max_body_bytes: usize,
    /// InferenceObjective priorities (`--inference-objective`), for flow control.
    pub objectives: Objectives,
    /// Whom flow identity headers are honoured from (`--flow-headers-from`): the EPP has
    /// no trusted callers, so `trusted` (the default) ignores them; `any` reads them from
    /// every request, for a gateway that sets or overwrites them (llm-d's behaviour).
    pub flow_headers_from: FlowHeadersFrom,
    /// Engine `/metrics` scrape interval.
    pub scrape_interval: Duration,
    /// Time allowed for one scrape (head and body).
    pub scrape_timeout: Duration,
    /// What a data plane may hold: connections, streams, timeouts, body bytes in flight
    /// ([`crate::limits`]).
    pub limits: EppLimits,
}

impl EppOptions {
    /// Options with `pdgate serve`'s defaults.
    pub fn new(scheduler: Arc<Scheduler>, endpoints: EndpointSource) -> Self {
        use pdgate_core::defaults::{
            DEFAULT_MAX_BODY_BYTES, DEFAULT_SCRAPE_INTERVAL_MS, DEFAULT_SCRAPE_TIMEOUT_MS,
        };
        EppOptions {
            scheduler,
            endpoints,
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            objectives: Objectives::default(),
            flow_headers_from: FlowHeadersFrom::default(),
            scrape_interval: Duration::from_millis(DEFAULT_SCRAPE_INTERVAL_MS),
            scrape_timeout: Duration::from_millis(DEFAULT_SCRAPE_TIMEOUT_MS),
            limits: EppLimits::default(),
        }
    }
}

/// The EPP's own counters (in the same registry as the rest of its metrics).
pub struct EppCounters {
    /// `pdgate_epp_picks_total{kind}`: destinations answered — `scheduled` (aggregated),
    /// `split` (P/D, with `x-prefiller-host-port`), `random` (a request the scheduler does
    /// not read).
    pub picks: prometheus::IntCounterVec,
    /// `pdgate_epp_fallbacks_total{outcome}`: responses served by another endpoint than the
    /// pick (`moved`: the booking followed; `unknown_endpoint`: not in the pool).
    pub fallbacks: prometheus::IntCounterVec,
    /// `pdgate_epp_stream_resets_total`: streams that ended before their response did.
    pub resets: prometheus::IntCounter,
    /// `pdgate_epp_usage_tokens_total{kind}`: tokens of the answers' `usage` — `prompt`,
    /// `completion`, `cached` (`prompt_tokens_details.cached_tokens`); answers without
    /// `usage` add nothing.
    pub tokens: prometheus::IntCounterVec,
    /// `pdgate_epp_streams`: ext_proc streams open (set at each render).
    pub streams: prometheus::IntGauge,
    /// `pdgate_epp_streams_refused_total`: streams answered `RESOURCE_EXHAUSTED` over
    /// `--max-ext-proc-streams`.
    pub streams_refused: prometheus::IntCounter,
    /// `pdgate_epp_stream_timeouts_total{phase}`: streams ended for waiting too long —
    /// `headers` (no request headers within the header timeout), `body` (the body did not
    /// end within the body timeout: 408), `upstream` (no message within the idle timeout
    /// once the request went upstream), `closing` (not closed after the answer).
    pub stream_timeouts: prometheus::IntCounterVec,
    /// `pdgate_epp_refusals_total{reason}`: requests refused for the shape of their headers
    /// — `too_many_headers`, `headers_too_large` (431), `duplicate_request_headers` (400).
    pub refusals: prometheus::IntCounterVec,
    /// `pdgate_epp_usage_unread_total{reason}`: answers whose `usage` was not read to the
    /// end because they passed a bound (`line_too_long`, `event_too_long`,
    /// `answer_too_large`; [`crate::usage`]); the answer itself passed unchanged.
    pub usage_unread: prometheus::IntCounterVec,
}

impl EppCounters {
    fn new(registry: &prometheus::Registry) -> prometheus::Result<Self> {
        let picks = prometheus::IntCounterVec::new(
            prometheus::Opts::new("pdgate_epp_picks_total", "Destinations answered, by kind"),
            &["kind"],
        )?;
        let fallbacks = prometheus::IntCounterVec::new(
            prometheus::Opts::new(
                "pdgate_epp_fallbacks_total",
                "Responses served by another endpoint than the pick",
            ),
            &["outcome"],
        )?;
        let resets = prometheus::IntCounter::new(
            "pdgate_epp_stream_resets_total",
            "ext_proc streams that ended before their response did",
        )?;
        let tokens = prometheus::IntCounterVec::new(
            prometheus::Opts::new(
                "pdgate_epp_usage_tokens_total",
                "Tokens reported in the answers' usage, by kind",
            ),
            &["kind"],
        )?;
        let streams = prometheus::IntGauge::new("pdgate_epp_streams", "ext_proc streams open")?;
        let streams_refused = prometheus::IntCounter::new(
            "pdgate_epp_streams_refused_total",
            "ext_proc streams answered RESOURCE_EXHAUSTED over --max-ext-proc-streams",
        )?;
        let stream_timeouts = prometheus::IntCounterVec::new(
            prometheus::Opts::new(
                "pdgate_epp_stream_timeouts_total",
                "ext_proc streams ended for waiting too long, by phase",
            ),
            &["phase"],
        )?;
        let refusals = prometheus::IntCounterVec::new(
            prometheus::Opts::new(
                "pdgate_epp_refusals_total",
                "Requests refused for the shape of their headers, by reason",
            ),
            &["reason"],
        )?;
        let usage_unread = prometheus::IntCounterVec::new(
            prometheus::Opts::new(
                "pdgate_epp_usage_unread_total",
                "Answers whose usage was not read because they passed a bound, by reason",
            ),
            &["reason"],
        )?;
        registry.register(Box::new(streams.clone()))?;
        registry.register(Box::new(streams_refused.clone()))?;
        registry.register(Box::new(stream_timeouts.clone()))?;
        registry.register(Box::new(refusals.clone()))?;
        registry.register(Box::new(usage_unread.clone()))?;
        registry.register(Box::new(tokens.clone()))?;
        registry.register(Box::new(picks.clone()))?;
        registry.register(Box::new(fallbacks.clone()))?;
        registry.register(Box::new(resets.clone()))?;
        Ok(EppCounters {
            picks,
            fallbacks,
            resets,
            tokens,
            streams,
            streams_refused,
            stream_timeouts,
            refusals,
            usage_unread,
        })
    }
}

/// Connections open now on the EPP's ports, one slot pool each (a flood on one port never
/// takes another's slots).
#[derive(Debug, Default)]
pub struct EppConnections {
    /// The ext_proc port (`--max-client-connections`).
    pub ext_proc: Arc<ConnectionSlots>,
    /// The gRPC health port ([`crate::limits::MAX_SIDE_PORT_CONNECTIONS`]).
    pub health: Arc<ConnectionSlots>,
    /// The metrics port ([`crate::limits::MAX_SIDE_PORT_CONNECTIONS`]).
    pub metrics: Arc<ConnectionSlots>,
}

impl EppConnections {
    /// Connections open on every port.
    pub fn open(&self) -> usize {
        self.ext_proc.open() + self.health.open() + self.metrics.open()
    }
}

/// Shared state of one EPP.
pub struct Epp {
    /// The scheduler.
    pub scheduler: Arc<Scheduler>,
    /// Current endpoints and their loads.
    pub registry: Arc<EndpointRegistry>,
    /// `x-session-id` bindings.
    pub sessions: Arc<SessionTable>,
    /// Metrics (`pdgate_requests_total{api="ext_proc"}`, scrape counters, endpoint gauges).
    pub metrics: Arc<Metrics>,
    /// The EPP's own counters.
    pub counters: EppCounters,
    /// Request body limit, bytes.
    pub max_body_bytes: usize,
    /// What a data plane may hold ([`crate::limits`]).
    pub limits: EppLimits,
    /// Request body bytes buffered now, over every stream (`--max-inflight-body-bytes`).
    pub body_budget: Arc<BodyBudget>,
    /// ext_proc streams open now: one permit each, `--max-ext-proc-streams` in all.
    pub streams: Arc<tokio::sync::Semaphore>,
    /// Connections open now on each port.
    pub connections: EppConnections,
    /// Engines' KV events feeding the precise prefix indexes (serve's feed); `None` without one.
    pub kv_feed: Option<Arc<pdgate_core::kv_feed::KvFeed>>,
    /// The `token-producer` step (`pdgate_core::prompt_tokens`), when configured.
    pub tokens: Option<Arc<pdgate_core::prompt_tokens::PromptTokens>>,
    /// InferenceObjective priorities.
    pub objectives: Objectives,
    /// Whom flow identity headers are honoured from.
    pub flow_headers_from: FlowHeadersFrom,
    /// Admission before scheduling (the scheduler config's `flowControl`), as in `serve`.
    pub flow: Arc<FlowController>,
    /// Forwarded headers between hops: a client's copies are hidden from the scheduler
    /// (the EPP forwards none itself; the defaults name `x-llm-d-disagg-revision`).
    pub forward_rules: ForwardRules,
    draining: AtomicBool,
}

impl Epp {
    /// Starts discovery and engine scraping; returns the state and its background tasks
    /// (abort them to stop).
    ///
    /// Errors: the endpoint source is invalid (bad file, duplicate names).
    pub async fn start(
        opts: EppOptions,
    ) -> Result<(Arc<Epp>, Vec<tokio::task::JoinHandle<()>>), DiscoveryError> {
        let tokens = pdgate_core::prompt_tokens::PromptTokens::load(&opts.scheduler)?;
        let registry = Arc::new(EndpointRegistry::default());
        let metrics = Arc::new(Metrics::new());
        let counters = EppCounters::new(metrics.registry()).map_err(|e| DiscoveryError {
            source_name: "metrics".into(),
            message: e.to_string(),
        })?;
        // Envoy retries and falls back; the EPP keeps no breakers, but the helper that makes
        // the prefix index forget departed endpoints is shared with `serve`.
        let breakers = Arc::new(pdgate_core::breaker::Breakers::default());
        pdgate_core::bounds::forget_departed(&registry, opts.scheduler.clone(), breakers);
        let mut tasks = Vec::new();
        if let Some(t) = discovery::start(opts.endpoints, registry.clone()).await? {
            tasks.push(t);
        }
        let effects =
            pdgate_core::bounds::ScrapeEffects::new(opts.scheduler.clone(), metrics.clone());
        let settings = scrape::ScrapeSettings {
            interval: opts.scrape_interval,
            timeout: opts.scrape_timeout,
            models_every: 25,
            data: opts.scheduler.data_layer().clone(),
        };
        tasks.push(scrape::start(
            registry.clone(),
            scrape::client::ScrapeClient::new(Duration::from_secs(2)),
            settings,
            Arc::new(effects),
        ));
        let flow = FlowController::new(
            opts.scheduler.flow().clone(),
            &opts.objectives,
            registry.clone(),
            metrics.registry(),
        );
        opts.scheduler.flow().detector.set_scrape_interval(
            opts.scheduler
                .data_layer()
                .metrics_period(opts.scrape_interval),
        );
        tasks.push(tokio::spawn(flow.clone().run()));
        let kv_feed = pdgate_core::kv_feed::KvFeed::start(&registry, &opts.scheduler);
        let epp = Arc::new(Epp {
            kv_feed,
            scheduler: opts.scheduler,
            registry,
            sessions: Arc::default(),
            metrics,
            counters,
            max_body_bytes: opts.max_body_bytes,
            limits: opts.limits,
            body_budget: BodyBudget::new(opts.limits.client.max_inflight_body_bytes),
            streams: Arc::new(tokio::sync::Semaphore::new(opts.limits.max_streams)),
            connections: EppConnections::default(),
            tokens,
            objectives: opts.objectives,
            flow_headers_from: opts.flow_headers_from,
            flow,
            forward_rules: ForwardRules::default(),
            draining: AtomicBool::new(false),
        });
        Ok((epp, tasks))
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

    /// Ready to pick: the first endpoint list was applied and the EPP is not draining.
    pub fn ready(&self) -> bool {
        self.registry.is_known() && !self.draining.load(Ordering::Acquire)
    }

    /// Starts draining: readiness turns false; streams in progress go on.
    pub fn drain(&self) {
        self.draining.store(true, Ordering::Release);
        self.flow.shutdown();
    }
}
