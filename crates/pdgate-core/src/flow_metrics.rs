//! Flow-control metrics, with llm-d's names (llm-d-router `pkg/epp/metrics`): the
//! `priority` label is the band's; llm-d's `fairness_id`, `inference_pool` and model labels
//! are left out (one pool per pdgate; fairness ids are client-chosen and unbounded).

use prometheus::{
    Gauge, GaugeVec, Histogram, HistogramOpts, HistogramVec, IntCounterVec, IntGaugeVec, Opts,
    Registry,
};

/// The flow-control metrics.
#[derive(Clone)]
pub struct FlowMetrics {
    /// `llm_d_epp_flow_control_requests_total{outcome, priority}`: one per terminal outcome.
    pub requests: IntCounterVec,
    /// `llm_d_epp_flow_control_request_queue_duration_seconds{outcome, priority}`.
    pub queue_duration: HistogramVec,
    /// `llm_d_epp_flow_control_queue_size{priority}`: queued requests.
    pub queue_size: IntGaugeVec,
    /// `llm_d_epp_flow_control_queue_bytes{priority}`: queued body bytes.
    pub queue_bytes: IntGaugeVec,
    /// `llm_d_epp_flow_control_pool_saturation{stage}` (prefill, decode, effective).
    pub saturation: GaugeVec,
    /// `llm_d_epp_flow_control_stale_endpoints{detector}`.
    pub stale: IntGaugeVec,
    /// `pdgate_sheddable_rejections_total`: sheddable requests refused without the gate.
    pub sheddable_rejected: IntCounterVec,
    /// `llm_d_epp_flow_control_revocations_issued_total{priority}`: in-flight evictions
    /// issued, by the blocked (demand) band's priority.
    pub revocations_issued: IntCounterVec,
    /// `llm_d_epp_flow_control_revocations_total{outcome}`: `confirmed` or `timed_out`.
    pub revocations: IntCounterVec,
    /// `llm_d_epp_flow_control_pending_reclaim`: saturation debited for revocations whose
    /// effect the gauge does not show yet.
    pub pending_reclaim: Gauge,
    /// `llm_d_epp_flow_control_reclaim_target`: the last decision's deficit.
    pub reclaim_target: Gauge,
    /// `llm_d_epp_flow_control_revocation_confirmation_duration_seconds`.
    pub confirmation: Histogram,
}

fn reg<T: prometheus::core::Collector + Clone + 'static>(r: &Registry, m: T) -> T {
    // Names are static and unique within the registry, so registration cannot collide.
    let _ = r.register(Box::new(m.clone()));
    m
}

impl FlowMetrics {
    /// Creates the metrics in `r`.
    pub fn new(r: &Registry) -> FlowMetrics {
        let buckets = vec![
            0.0001, 0.0005, 0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
            30.0, 60.0,
        ];
        let gauge = |name: &str, help: &str, label: &str| {
            reg(
                r,
                IntGaugeVec::new(Opts::new(name, help), &[label]).expect("valid metric"),
            )
        };
        FlowMetrics {
            requests: reg(
                r,
                IntCounterVec::new(
                    Opts::new(
                        "llm_d_epp_flow_control_requests_total",
                        "Requests by flow-control outcome and priority band.",
                    ),
                    &["outcome", "priority"],
                )
                .expect("valid metric"),
            ),
            queue_duration: reg(
                r,
                HistogramVec::new(
                    HistogramOpts::new(
                        "llm_d_epp_flow_control_request_queue_duration_seconds",
                        "Time from enqueue to the outcome, seconds.",
                    )
                    .buckets(buckets),
                    &["outcome", "priority"],
                )
                .expect("valid metric"),
            ),
            queue_size: gauge(
                "llm_d_epp_flow_control_queue_size",
                "Requests queued in each priority band.",
                "priority",
            ),
            queue_bytes: gauge(
                "llm_d_epp_flow_control_queue_bytes",
                "Body bytes queued in each priority band.",
                "priority",
            ),
            saturation: reg(
                r,
                GaugeVec::new(
                    Opts::new(
                        "llm_d_epp_flow_control_pool_saturation",
                        "Pool saturation (>= 1 saturated) by stage: prefill, decode, effective.",
                    ),
                    &["stage"],
                )
                .expect("valid metric"),
            ),
            stale: gauge(
                "llm_d_epp_flow_control_stale_endpoints",
                "Endpoints whose gauges are too old for the saturation detector.",
                "detector",
            ),
            sheddable_rejected: reg(
                r,
                IntCounterVec::new(
                    Opts::new(
                        "pdgate_sheddable_rejections_total",
                        "Sheddable requests (priority < 0) refused because the pool is saturated \
                         (flow-control gate off).",
                    ),
                    &["priority"],
                )
                .expect("valid metric"),
            ),
            revocations_issued: reg(
                r,
                IntCounterVec::new(
                    Opts::new(
                        "llm_d_epp_flow_control_revocations_issued_total",
                        "In-flight eviction revocations issued, by the demand band's priority.",
                    ),
                    &["priority"],
                )
                .expect("valid metric"),
            ),
            revocations: reg(
                r,
                IntCounterVec::new(
                    Opts::new(
                        "llm_d_epp_flow_control_revocations_total",
                        "Revocations by terminal outcome (confirmed, timed_out).",
                    ),
                    &["outcome"],
                )
                .expect("valid metric"),
            ),
            pending_reclaim: reg(
                r,
                Gauge::new(
                    "llm_d_epp_flow_control_pending_reclaim",
                    "Saturation debited for revocations not yet visible in the gauge.",
                )
                .expect("valid metric"),
            ),
            reclaim_target: reg(
                r,
                Gauge::new(
                    "llm_d_epp_flow_control_reclaim_target",
                    "The last reclamation decision's deficit (saturation - ceiling).",
                )
                .expect("valid metric"),
            ),
            confirmation: reg(
                r,
                Histogram::with_opts(
                    HistogramOpts::new(
                        "llm_d_epp_flow_control_revocation_confirmation_duration_seconds",
                        "Time from a revocation to the end of the evicted request's stream.",
                    )
                    .buckets(vec![0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0]),
                )
                .expect("valid metric"),
            ),
        }
    }
}
