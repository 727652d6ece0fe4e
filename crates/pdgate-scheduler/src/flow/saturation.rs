//! The saturation-detector extension point: how full the pool is, as one number (≥ 1.0
//! saturated, below it the fraction used), and the pool's value per stage. The detectors
//! themselves are plugins ([`super::detector`]); flow control and legacy admission read them
//! through this trait only.

use crate::endpoint::EndpointState;
use pdgate_api::Role;
use std::sync::Arc;
use std::time::Duration;

/// Measures the pool's saturation.
pub trait SaturationDetector: Send + Sync {
    /// Saturation of `endpoints` (schedulable ones) at `now_ms` ([`crate::monotonic_ms`]) with
    /// `pending` dispatched-but-unbooked requests: 1.0 for an empty set.
    fn saturation(&self, endpoints: &[&Arc<EndpointState>], pending: u32, now_ms: u64) -> f64;
    /// Endpoints whose gauges are too old to use (`flow_control_stale_endpoints`).
    fn stale(&self, _endpoints: &[&Arc<EndpointState>], _now_ms: u64) -> usize {
        0
    }
    /// Time (ms, [`crate::monotonic_ms`]) up to which this detector's view of `endpoints` is
    /// current: `now_ms` for one that reads the router's own bookings; the oldest scrape for
    /// one that reads engine gauges. Eviction waits for it to pass a confirmation, so a
    /// decision never reads gauges taken before the last evicted request ended.
    fn gauges_as_of(&self, _endpoints: &[&Arc<EndpointState>], now_ms: u64) -> u64 {
        now_ms
    }
    /// The plugin type, for metrics and logs.
    fn type_name(&self) -> &'static str;
    /// Told the engines' scrape interval at start (gauges are never fresher than that).
    fn set_scrape_interval(&self, _interval: Duration) {}
}

/// Saturation per stage and the value the gate uses (`flow_control_pool_saturation{stage}`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Stages {
    /// Endpoints that run prefill (prefill, encode-prefill, and prefill-decode ones).
    pub prefill: Option<f64>,
    /// Endpoints that run decode (decode, no role, prefill-decode ones).
    pub decode: Option<f64>,
    /// The larger of the two; the whole pool's value when neither stage has endpoints.
    pub effective: f64,
}

/// The pool's saturation by stage, as llm-d's flow-control processor splits it by the
/// `llm-d.ai/role` label: prefill stage = prefill, encode-prefill, prefill-decode; decode
/// stage = decode, prefill-decode, encode-prefill-decode and endpoints without a role;
/// encode-only endpoints count in neither. Only schedulable endpoints count.
pub fn pool_saturation(
    detector: &dyn SaturationDetector,
    endpoints: &[Arc<EndpointState>],
    pending: u32,
    now_ms: u64,
) -> Stages {
    let live: Vec<&Arc<EndpointState>> = endpoints
        .iter()
        .filter(|e| e.endpoint.schedulable())
        .collect();
    let stage = |f: fn(Option<Role>) -> bool| -> Option<f64> {
        let eps: Vec<&Arc<EndpointState>> = live
            .iter()
            .copied()
            .filter(|e| f(e.endpoint.role))
            .collect();
        (!eps.is_empty()).then(|| detector.saturation(&eps, pending, now_ms))
    };
    let prefill = stage(|r| {
        matches!(
            r,
            Some(Role::Prefill | Role::EncodePrefill | Role::PrefillDecode)
        )
    });
    let decode = stage(|r| {
        matches!(
            r,
            None | Some(Role::Decode | Role::PrefillDecode | Role::EncodePrefillDecode)
        )
    });
    let effective = match (prefill, decode) {
        (None, None) => detector.saturation(&live, pending, now_ms),
        (p, d) => p.unwrap_or(0.0).max(d.unwrap_or(0.0)),
    };
    Stages {
        prefill,
        decode,
        effective,
    }
}
