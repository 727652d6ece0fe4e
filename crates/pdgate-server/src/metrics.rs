//! The router's own Prometheus metrics (prefix `pdgate_`, design.md §5.4).

use prometheus::{
    Encoder, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGaugeVec, Opts,
    Registry, TextEncoder,
};

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
    /// `pdgate_stream_errors_total`: upstream failures after streaming began.
    pub stream_errors: IntCounter,
    /// `pdgate_scrape_errors_total`: failed engine `/metrics` scrapes.
    pub scrape_errors: IntCounter,
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
        Metrics {
            requests: reg(
                &r,
                IntCounterVec::new(
                    Opts::new(
                        "pdgate_requests_total",
                        "Client requests by API and final status.",
                    ),
                    &["api", "status"],
                )
                .expect("valid metric"),
            ),
            phase_requests: reg(
                &r,
                IntCounterVec::new(
                    Opts::new(
                        "pdgate_phase_requests_total",
                        "Phase legs by phase and upstream status.",
                    ),
                    &["phase", "status"],
                )
                .expect("valid metric"),
            ),
            scheduling: reg(
                &r,
                Histogram::with_opts(
                    HistogramOpts::new(
                        "pdgate_scheduling_duration_seconds",
                        "Time to pick the endpoints of a request.",
                    )
                    .buckets(buckets.clone()),
                )
                .expect("valid metric"),
            ),
            upstream: reg(
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
            ),
            pd_decisions: reg(
                &r,
                IntCounterVec::new(
                    Opts::new(
                        "pdgate_pd_decisions_total",
                        "Requests split into prefill and decode, or run aggregated.",
                    ),
                    &["mode"],
                )
                .expect("valid metric"),
            ),
            in_flight: reg(
                &r,
                IntGaugeVec::new(
                    Opts::new("pdgate_in_flight", "Requests booked on each endpoint."),
                    &["endpoint"],
                )
                .expect("valid metric"),
            ),
            conditional_decode: reg(
                &r,
                IntCounterVec::new(
                    Opts::new(
                        "pdgate_conditional_decode_probes_total",
                        "Conditional-decode probes by result.",
                    ),
                    &["result"],
                )
                .expect("valid metric"),
            ),
            stream_errors: reg(
                &r,
                IntCounter::new(
                    "pdgate_stream_errors_total",
                    "Upstream failures after streaming to the client began.",
                )
                .expect("valid metric"),
            ),
            scrape_errors: reg(
                &r,
                IntCounter::new(
                    "pdgate_scrape_errors_total",
                    "Failed engine /metrics scrapes.",
                )
                .expect("valid metric"),
            ),
            registry: r,
        }
    }

    /// Text exposition of every metric.
    pub fn render(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(4096);
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut out);
        out
    }
}
