//! The router's own Prometheus metrics (prefix `pdgate_`, design.md §5.4).

use pdgate_scheduler::Snapshot;
use prometheus::{
    Encoder, GaugeVec, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry, TextEncoder,
};

/// The engine gauges the scorers read, per endpoint (label `endpoint`), as last scraped from
/// its `/metrics`; set at exposition time from the current snapshot, so an endpoint that left
/// has no series and an unknown gauge (not exported, or the scrape failed) is absent, never 0.
pub struct EngineGaugeVecs {
    /// `pdgate_endpoint_requests_running{endpoint}`: Σ `vllm:num_requests_running`.
    pub running: GaugeVec,
    /// `pdgate_endpoint_requests_waiting{endpoint}`: Σ `vllm:num_requests_waiting`.
    pub waiting: GaugeVec,
    /// `pdgate_endpoint_kv_cache_usage_perc{endpoint}`: mean `vllm:kv_cache_usage_perc`, 0..1.
    pub kv_usage: GaugeVec,
    /// `pdgate_endpoint_up{endpoint}`: 1 when its last `/metrics` scrape answered, 0 when it
    /// failed (absent before the first scrape).
    pub up: GaugeVec,
}

/// Every metric the router exports, registered in one registry.
pub struct Metrics {
    registry: Registry,
    /// `pdgate_requests_total{api, status}`: client requests by final status.
    pub requests: IntCounterVec,
    /// `pdgate_phase_requests_total{phase, status}`: phase legs by upstream status
    /// (`error` when none came).
    pub phase_requests: IntCounterVec,
    /// `pdgate_scheduling_duration_seconds`: time to pick endpoints for a request.
    pub scheduling: Histogram,
    /// `pdgate_upstream_duration_seconds{phase}`: leg time to the response head.
    pub upstream: HistogramVec,
    /// `pdgate_pd_decisions_total{mode}`: `split` or `aggregated`.
    pub pd_decisions: IntCounterVec,
    /// `pdgate_in_flight{endpoint}`: bookings per endpoint, set at exposition time.
    pub in_flight: IntGaugeVec,
    /// `pdgate_conditional_decode_probes_total{result}`: served / deferred / error.
    pub conditional_decode: IntCounterVec,
    /// `pdgate_retries_total{phase}`: legs retried on another endpoint.
    pub retries: IntCounterVec,
    /// `pdgate_pin_rejections_total{reason}`: client pins refused (design.md §5.4).
    pub pin_rejections: IntCounterVec,
    /// `pdgate_stream_errors_total{kind}`: streams ended by an error event after streaming
    /// began (`idle`, `deadline`, `broken`, `engine_error`).
    pub stream_errors: IntCounterVec,
    /// `pdgate_pre_steps_total{step, outcome}`: coordinator steps run on a request before its
    /// legs (`render`), by outcome (`changed`, `unchanged`, `failed`).
    pub pre_steps: IntCounterVec,
    /// `pdgate_client_fields_dropped_total{field}`: router-owned body fields
    /// (`kv_transfer_params`, `ec_transfer_params`) removed from client requests.
    pub client_fields_dropped: IntCounterVec,
    /// `pdgate_upstream_failures_total{phase, kind}`: legs that produced no usable response,
    /// by failure kind (`failure::kind_label`), every try counted.
    pub upstream_failures: IntCounterVec,
    /// `pdgate_prefill_fallbacks_total{policy}`: split requests whose prefill phase was
    /// unavailable, by the policy applied (`aggregated`, `fail`).
    pub prefill_fallbacks: IntCounterVec,
    /// `pdgate_scrape_errors_total`: failed engine `/metrics` scrapes.
    pub scrape_errors: IntCounter,
    /// `pdgate_engine_restarts_total`: engine restarts seen by the scraper (each drops the
    /// endpoint's prefix-cache credit).
    pub engine_restarts: IntCounter,
    /// `pdgate_prefix_block_size_adopted_total`: times an approximate prefix index with
    /// `autoTune` adopted an engine's KV block size (`vllm:cache_config_info{block_size}`)
    /// that differed from its own.
    pub block_size_adopted: IntCounter,
    /// `pdgate_untrusted_headers_dropped_total{header}`: coordinator-to-router headers sent
    /// by callers that are not trusted coordinators (`crate::trust`), dropped unread.
    pub untrusted_headers_dropped: IntCounterVec,
    /// `pdgate_tokenizations_total{backend, outcome}`: prompts seen by the `token-producer`
    /// (`tokenized`, `already_tokens`, `estimate`, `other_model`, `fallback`).
    pub tokenizations: IntCounterVec,
    /// `pdgate_tokenization_fallbacks_total{backend, reason}`: prompts left at the byte
    /// estimate because the backend failed (`status`, `timeout`, `transport`,
    /// `bad_response`, `no_engine`, `local`).
    pub tokenization_fallbacks: IntCounterVec,
    /// `pdgate_accept_errors_total`: failed accepts (e.g. descriptors exhausted).
    pub accept_errors: IntCounter,
    /// `pdgate_client_connections`: client connections open (set at each render).
    pub client_connections: IntGauge,
    /// `pdgate_client_connections_refused_total`: connections over `--max-client-connections`.
    pub client_connections_refused: IntCounter,
    /// `pdgate_client_timeouts_total{kind}`: client connections closed for sending their
    /// headers (`header`, idle keep-alive included) or body (`body`) too slowly.
    pub client_timeouts: IntCounterVec,
    /// `pdgate_inflight_body_bytes`: request body bytes held (set at each render).
    pub inflight_body_bytes: IntGauge,
    /// `pdgate_body_budget_refusals_total`: requests refused 429 by `--max-inflight-body-bytes`.
    pub body_budget_refusals: IntCounter,
    /// Engine gauges per endpoint, as the scorers read them.
    pub engine: EngineGaugeVecs,
    /// Scheduler plugins' own metrics (revision shares, strict misses, …).
    pub plugins: crate::plugin_metrics::PluginFamilies,
    hot: Hot,
}

/// Pre-resolved series of the per-request path (a label lookup hashes the labels and takes
/// a lock; these are the series almost every request touches).
struct Hot {
    requests_ok: [IntCounter; 2],
    phase_ok: [IntCounter; 3],
    pd: [IntCounter; 2],
    upstream: [Histogram; 3],
}

/// Index of a phase label among the hot series: prefill, decode, aggregated.
fn phase_slot(phase: &str) -> Option<usize> {
    match phase {
        "prefill" => Some(0),
        "decode" => Some(1),
        "aggregated" => Some(2),
        _ => None,
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

fn reg<T: prometheus::core::Collector + Clone + 'static>(r: &Registry, m: T) -> T {
    // Names are static and unique within this registry, so registration cannot collide.
    let _ = r.register(Box::new(m.clone()));
    m
}

impl Metrics {
    /// Creates and registers every metric.
    pub fn new() -> Self {
        let r = Registry::new();
        let buckets = vec![
            0.00001, 0.00003, 0.0001, 0.0003, 0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0,
        ];
        let counter_vec = |name: &str, help: &str, labels: &[&str]| {
            reg(
                &r,
                IntCounterVec::new(Opts::new(name, help), labels).expect("valid metric"),
            )
        };
        let requests = counter_vec(
            "pdgate_requests_total",
            "Client requests by API and final status.",
            &["api", "status"],
        );
        let phase_requests = counter_vec(
            "pdgate_phase_requests_total",
            "Phase legs by phase and upstream status.",
            &["phase", "status"],
        );
        let pd_decisions = counter_vec(
            "pdgate_pd_decisions_total",
            "Requests split into prefill and decode, or run aggregated.",
            &["mode"],
        );
        let conditional_decode = counter_vec(
            "pdgate_conditional_decode_probes_total",
            "Conditional-decode probes by result.",
            &["result"],
        );
        let scheduling = reg(
            &r,
            Histogram::with_opts(
                HistogramOpts::new(
                    "pdgate_scheduling_duration_seconds",
                    "Time to pick the endpoints of a request.",
                )
                .buckets(buckets.clone()),
            )
            .expect("valid metric"),
        );
        let upstream = reg(
            &r,
            HistogramVec::new(
                HistogramOpts::new(
                    "pdgate_upstream_duration_seconds",
                    "Phase leg time to the upstream response head.",
                )
                .buckets(buckets),
                &["phase"],
            )
            .expect("valid metric"),
        );
        let in_flight = reg(
            &r,
            IntGaugeVec::new(
                Opts::new("pdgate_in_flight", "Requests booked on each endpoint."),
                &["endpoint"],
            )
            .expect("valid metric"),
        );
        let stream_errors = counter_vec(
            "pdgate_stream_errors_total",
            "Streams ended by an error event after streaming to the client began, by kind.",
            &["kind"],
        );
        let pre_steps = counter_vec(
            "pdgate_pre_steps_total",
            "Coordinator steps run on a request before its legs, by step and outcome.",
            &["step", "outcome"],
        );
        let client_fields_dropped = counter_vec(
            "pdgate_client_fields_dropped_total",
            "Router-owned body fields removed from client requests, by field.",
            &["field"],
        );
        let upstream_failures = counter_vec(
            "pdgate_upstream_failures_total",
            "Phase legs that produced no usable response, by phase and failure kind.",
            &["phase", "kind"],
        );
        let prefill_fallbacks = counter_vec(
            "pdgate_prefill_fallbacks_total",
            "Split requests whose prefill phase was unavailable, by the policy applied.",
            &["policy"],
        );
        let scrape_errors = reg(
            &r,
            IntCounter::new(
                "pdgate_scrape_errors_total",
                "Failed engine /metrics scrapes.",
            )
            .expect("valid metric"),
        );
        let engine_restarts = reg(
            &r,
            IntCounter::new(
                "pdgate_engine_restarts_total",
                "Engine restarts seen by the scraper (process_start_time_seconds changed, or back after failing).",
            )
            .expect("valid metric"),
        );
        let counter =
            |name: &str, help: &str| reg(&r, IntCounter::new(name, help).expect("valid metric"));
        let block_size_adopted = counter(
            "pdgate_prefix_block_size_adopted_total",
            "Approximate prefix indexes (autoTune) that adopted an engine's differing KV block size.",
        );
        let int_gauge =
            |name: &str, help: &str| reg(&r, IntGauge::new(name, help).expect("valid metric"));
        let untrusted_headers_dropped = counter_vec(
            "pdgate_untrusted_headers_dropped_total",
            "Coordinator-to-router headers from callers that are not trusted coordinators, dropped unread, by header.",
            &["header"],
        );
        let tokenizations = counter_vec(
            "pdgate_tokenizations_total",
            "Prompts seen by the token-producer, by backend and outcome.",
            &["backend", "outcome"],
        );
        let tokenization_fallbacks = counter_vec(
            "pdgate_tokenization_fallbacks_total",
            "Prompts left at the byte estimate because the token-producer backend failed, by backend and reason.",
            &["backend", "reason"],
        );
        let accept_errors = counter(
            "pdgate_accept_errors_total",
            "Failed accepts of client connections (e.g. descriptors exhausted).",
        );
        let client_connections = int_gauge("pdgate_client_connections", "Client connections open.");
        let client_connections_refused = counter(
            "pdgate_client_connections_refused_total",
            "Client connections answered 503 and closed over --max-client-connections.",
        );
        let client_timeouts = counter_vec(
            "pdgate_client_timeouts_total",
            "Client connections closed for sending headers (idle keep-alive included) or a body too slowly, by kind.",
            &["kind"],
        );
        let inflight_body_bytes = int_gauge(
            "pdgate_inflight_body_bytes",
            "Bytes of client request bodies held.",
        );
        let body_budget_refusals = counter(
            "pdgate_body_budget_refusals_total",
            "Requests refused 429 because their body would pass --max-inflight-body-bytes.",
        );
        let gauge = |name: &str, help: &str| {
            reg(
                &r,
                GaugeVec::new(Opts::new(name, help), &["endpoint"]).expect("valid metric"),
            )
        };
        let engine = EngineGaugeVecs {
            running: gauge(
                "pdgate_endpoint_requests_running",
                "Engine requests running per endpoint (vllm:num_requests_running, last scrape).",
            ),
            waiting: gauge(
                "pdgate_endpoint_requests_waiting",
                "Engine requests waiting per endpoint (vllm:num_requests_waiting, last scrape).",
            ),
            kv_usage: gauge(
                "pdgate_endpoint_kv_cache_usage_perc",
                "Engine KV-cache usage per endpoint, 0..1 (vllm:kv_cache_usage_perc, last scrape).",
            ),
            up: gauge(
                "pdgate_endpoint_up",
                "1 when the endpoint's last /metrics scrape answered, 0 when it failed.",
            ),
        };
        let phases = ["prefill", "decode", "aggregated"];
        let hot = Hot {
            requests_ok: ["completions", "chat_completions"]
                .map(|a| requests.with_label_values(&[a, "200"])),
            phase_ok: phases.map(|p| phase_requests.with_label_values(&[p, "200"])),
            pd: ["split", "aggregated"].map(|m| pd_decisions.with_label_values(&[m])),
            upstream: phases.map(|p| upstream.with_label_values(&[p])),
        };
        let pin_rejections = counter_vec(
            "pdgate_pin_rejections_total",
            "Client pins refused, by reason.",
            &["reason"],
        );
        let retries = counter_vec(
            "pdgate_retries_total",
            "Phase legs retried on another endpoint, by phase.",
            &["phase"],
        );
        Metrics {
            retries,
            pin_rejections,
            plugins: crate::plugin_metrics::PluginFamilies::new(r.clone()),
            registry: r,
            requests,
            phase_requests,
            scheduling,
            upstream,
            pd_decisions,
            in_flight,
            conditional_decode,
            stream_errors,
            pre_steps,
            client_fields_dropped,
            upstream_failures,
            prefill_fallbacks,
            scrape_errors,
            engine_restarts,
            block_size_adopted,
            untrusted_headers_dropped,
            tokenizations,
            tokenization_fallbacks,
            accept_errors,
            client_connections,
            client_connections_refused,
            client_timeouts,
            inflight_body_bytes,
            body_budget_refusals,
            engine,
            hot,
        }
    }

    /// Refreshes the series derived from state rather than counted: the plugins' own
    /// metrics and the per-endpoint gauges over `snapshot` (both front ends call it on every
    /// `/metrics` read).
    pub fn refresh(&self, scheduler: &pdgate_scheduler::Scheduler, snapshot: &Snapshot) {
        self.plugins.set(&scheduler.plugin_metrics(snapshot));
        self.set_endpoint_gauges(snapshot);
    }

    /// Sets the per-endpoint series (`pdgate_in_flight` and the engine gauges) from
    /// `snapshot`, dropping the series of endpoints that are not in it.
    pub fn set_endpoint_gauges(&self, snapshot: &Snapshot) {
        let e = &self.engine;
        self.in_flight.reset();
        for v in [&e.running, &e.waiting, &e.kv_usage, &e.up] {
            v.reset();
        }
        for ep in &snapshot.endpoints {
            let name = [ep.endpoint.name.as_str()];
            let load = &ep.load;
            self.in_flight
                .with_label_values(&name)
                .set(i64::from(load.in_flight()));
            for (vec, value) in [
                (&e.running, load.running()),
                (&e.waiting, load.waiting()),
                (&e.kv_usage, load.kv_usage()),
                (&e.up, load.reachable().map(|ok| f64::from(u8::from(ok)))),
            ] {
                if let Some(v) = value {
                    vec.with_label_values(&name).set(v);
                }
            }
        }
    }

    /// `pdgate_requests_total{api, status}` += 1 (`status` bounded by the one rule,
    /// [`crate::front::bounded_status_label`]).
    pub fn count_request(&self, api: &str, status: &str) {
        let status = crate::front::bounded_status_label(status);
        match (api, status) {
            ("completions", "200") => self.hot.requests_ok[0].inc(),
            ("chat_completions", "200") => self.hot.requests_ok[1].inc(),
            _ => self.requests.with_label_values(&[api, status]).inc(),
        }
    }

    /// `pdgate_phase_requests_total{phase, status}` += 1 (`status` an HTTP status, or
    /// `error` when the leg got no response; bounded by [`crate::front::bounded_status_label`]).
    pub fn count_phase(&self, phase: &str, status: &str) {
        let status = crate::front::bounded_status_label(status);
        match (phase_slot(phase), status) {
            (Some(i), "200") => self.hot.phase_ok[i].inc(),
            _ => self
                .phase_requests
                .with_label_values(&[phase, status])
                .inc(),
        }
    }

    /// `pdgate_pd_decisions_total{mode}` += 1.
    pub fn count_pd_decision(&self, split: bool) {
        self.hot.pd[usize::from(!split)].inc();
    }

    /// Observes a leg's time to its response head in `pdgate_upstream_duration_seconds`.
    pub fn observe_upstream(&self, phase: &str, seconds: f64) {
        match phase_slot(phase) {
            Some(i) => self.hot.upstream[i].observe(seconds),
            None => self.upstream.with_label_values(&[phase]).observe(seconds),
        }
    }

    /// The registry, for metrics kept beside their subsystem (flow control).
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// Text exposition of every metric.
    pub fn render(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(4096);
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut out);
        out
    }
}

/// Appends the fleet's own counters (`pdgate_fleet::registry::FleetCounters`) to a text
/// exposition, for both fronts' `/metrics`:
/// `pdgate_endpoint_unready_total` (endpoints taken out of the candidates after
/// consecutive unanswered scrapes), `pdgate_endpoint_ready_again_total` (back on an
/// answered scrape), `pdgate_models_answers_refused_total` (engine `/v1/models` answers over
/// a bound).
pub fn render_fleet_counters(c: &pdgate_fleet::registry::FleetCounters, out: &mut Vec<u8>) {
    use std::io::Write;
    let rows = [
        (
            "pdgate_endpoint_unready_total",
            "Endpoints taken out of the candidates after consecutive unanswered scrapes",
            c.unready_total(),
        ),
        (
            "pdgate_endpoint_ready_again_total",
            "Endpoints back among the candidates on an answered scrape",
            c.ready_again_total(),
        ),
        (
            "pdgate_models_answers_refused_total",
            "Engine /v1/models answers refused for being over a bound",
            c.models_refused_total(),
        ),
    ];
    for (name, help, value) in rows {
        let _ = write!(
            out,
            "# HELP {name} {help}\n# TYPE {name} counter\n{name} {value}\n"
        );
    }
}
