//! Saturation detectors: how full the pool is, as one number (≥ 1.0 saturated, below it the
//! fraction used), read by flow control's dispatch and by legacy admission. Both also act as
//! profile filters. Source: llm-d-router `framework/plugins/flowcontrol/saturationdetector`.
//!
//! - `utilization-detector` {queueDepthThreshold 5, kvCacheUtilThreshold 0.8,
//!   metricsStalenessThreshold 200ms, headroom 0}: per endpoint
//!   `max(waiting / queueDepthThreshold, kv / kvCacheUtilThreshold)`, an endpoint whose
//!   gauges are older than the staleness threshold (or never scraped) counts 1.0; the pool
//!   value is the mean. As a filter it drops stale endpoints and keeps those under
//!   `threshold × (1 + headroom)` on both gauges, returning the input when it would empty it.
//!   pdgate's waiting count is `max(scraped waiting, bookings − scraped running)`, so requests
//!   this router sent since the last scrape count at once.
//! - `concurrency-detector` {concurrencyMode `requests`, maxConcurrency 100, headroom 0}:
//!   `Σ bookings / (N × maxConcurrency)`; as a filter it keeps endpoints with fewer than
//!   `maxConcurrency × (1 + headroom)` bookings (no fail-open). The `tokens` and `hybrid`
//!   modes are refused at load (pdgate books requests, not tokens).
//!
//! `pending` (requests flow control dispatched that have not booked an endpoint yet) is
//! spread evenly over the endpoints, so a burst of dispatches sees its own effect.
//!
//! Both are also scheduling **filters** when a profile lists them (llm-d registers each as
//! SaturationDetector + Filter). One definition of each rule serves both uses:
//! [`UtilizationDetector::thresholds`] with [`Reading`] (score `max(w/q, kv/k)` for the
//! detector, `w < q' && kv < k'` for the filter, where `'` means `× (1 + headroom)`), and
//! [`ConcurrencyDetector::limit`] (`Σ bookings / (N × limit(1))` for the detector, `bookings
//! < limit(1 + headroom)` for the filter). `probabilistic-admitter` scores endpoints with the
//! same [`Thresholds::score`].

use super::duration::{self, GoDuration};
pub use super::saturation::{pool_saturation, SaturationDetector, Stages};
use crate::endpoint::EndpointState;
use crate::plugin::{Candidates, Filter};
use crate::plugin_build::{decode, effective, BuildCtx, Built, PluginError, PluginType, Stage};
use crate::request::RequestCtx;
use serde::{Deserialize, Serialize};
use serde_yaml_ng::Value;
use std::sync::Arc;
use std::time::Duration;

/// `utilization-detector` parameters.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct UtilizationParams {
    /// Waiting requests at which an endpoint counts as full (default 5; > 0).
    #[serde(default = "default_queue_depth")]
    pub queue_depth_threshold: u32,
    /// KV-cache usage (0..1] at which an endpoint counts as full (default 0.8).
    #[serde(default = "default_kv")]
    pub kv_cache_util_threshold: f64,
    /// Gauges older than this count as unknown (Go duration; default `200ms`).
    #[serde(
        default = "default_staleness",
        serialize_with = "ser_duration",
        deserialize_with = "de_duration"
    )]
    pub metrics_staleness_threshold: Duration,
    /// Filter slack: thresholds × (1 + headroom) (default 0; ≥ 0).
    #[serde(default)]
    pub headroom: f64,
}

fn default_queue_depth() -> u32 {
    5
}
fn default_kv() -> f64 {
    0.8
}
fn default_staleness() -> Duration {
    Duration::from_millis(200)
}
fn ser_duration<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&duration::format(*d))
}
fn de_duration<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    GoDuration::deserialize(d).map(|g| g.0)
}

impl Default for UtilizationParams {
    fn default() -> Self {
        UtilizationParams {
            queue_depth_threshold: default_queue_depth(),
            kv_cache_util_threshold: default_kv(),
            metrics_staleness_threshold: default_staleness(),
            headroom: 0.0,
        }
    }
}

/// The `utilization-detector` (see the module docs).
#[derive(Debug, Default)]
pub struct UtilizationDetector {
    /// Its parameters.
    pub params: UtilizationParams,
    /// Two scrape intervals, ms: gauges younger than that are never stale, whatever
    /// `metricsStalenessThreshold` says (llm-d scrapes every 50 ms, pdgate every 200 ms by
    /// default, so llm-d's 200 ms threshold would flap).
    min_staleness_ms: std::sync::atomic::AtomicU64,
}

impl UtilizationDetector {
    /// A detector with `params`.
    pub fn new(params: UtilizationParams) -> Self {
        UtilizationDetector {
            params,
            min_staleness_ms: Default::default(),
        }
    }

    fn fresh(&self, e: &EndpointState, now_ms: u64) -> bool {
        let max_age = (self.params.metrics_staleness_threshold.as_millis() as u64).max(
            self.min_staleness_ms
                .load(std::sync::atomic::Ordering::Relaxed),
        );
        // Gauges this detector reads must be known too (an engine that exports neither
        // waiting nor KV use tells it nothing).
        known(e)
            && e.load
                .scraped_at_ms()
                .is_some_and(|t| now_ms.saturating_sub(t) <= max_age)
    }

    /// The thresholds scaled by `slack`: `× 1` for saturation, `× (1 + headroom)` for the
    /// filter — the one place both read them.
    pub fn thresholds(&self, slack: f64) -> Thresholds {
        Thresholds {
            queue: self.params.queue_depth_threshold as f64 * slack,
            kv: self.params.kv_cache_util_threshold * slack,
        }
    }

    /// What the detector reads of `e` at `now_ms`, with `extra` requests added to its
    /// waiting count; `None` when its gauges are stale or unknown.
    fn reading(&self, e: &EndpointState, now_ms: u64, extra: f64) -> Option<Reading> {
        self.fresh(e, now_ms).then(|| Reading::of(e, extra))
    }
}

/// An endpoint's utilization gauges as the utilization rule reads them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Reading {
    /// Waiting requests: `max(scraped waiting, bookings − scraped running)` plus any extra.
    pub waiting: f64,
    /// KV-cache usage, 0..1 (0 when the engine does not export it).
    pub kv: f64,
}

impl Reading {
    /// The gauges of `e` with `extra` requests added to the waiting count. Bookings this
    /// router made since the last scrape count as waiting at once.
    pub fn of(e: &EndpointState, extra: f64) -> Reading {
        let l = &e.load;
        let booked_not_running = l.in_flight() as f64 - l.running().unwrap_or(0.0);
        Reading {
            waiting: l.waiting().unwrap_or(0.0).max(booked_not_running) + extra,
            kv: l.kv_usage().unwrap_or(0.0),
        }
    }
}

/// True when `e` has utilization gauges at all (a scrape told its waiting count or its KV
/// use; a failed scrape leaves both unknown).
pub fn known(e: &EndpointState) -> bool {
    e.load.scraped_at_ms().is_some() && (e.load.waiting().is_some() || e.load.kv_usage().is_some())
}

/// The utilization rule's two thresholds (waiting requests, KV-cache fraction), shared by
/// the `utilization-detector` (saturation and filter) and `probabilistic-admitter`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Thresholds {
    /// Waiting requests.
    pub queue: f64,
    /// KV-cache usage fraction.
    pub kv: f64,
}

impl Thresholds {
    /// `max(waiting / queue, kv / kv threshold)`: 1.0 at the threshold, may exceed 1.
    pub fn score(&self, r: Reading) -> f64 {
        (r.waiting / self.queue).max(r.kv / self.kv)
    }

    /// True when both gauges are strictly under their thresholds.
    pub fn under(&self, r: Reading) -> bool {
        r.waiting < self.queue && r.kv < self.kv
    }
}

impl SaturationDetector for UtilizationDetector {
    fn saturation(&self, endpoints: &[&Arc<EndpointState>], pending: u32, now_ms: u64) -> f64 {
        if endpoints.is_empty() {
            return 1.0;
        }
        let extra = pending as f64 / endpoints.len() as f64;
        let t = self.thresholds(1.0);
        let sum: f64 = endpoints
            .iter()
            .map(|e| self.reading(e, now_ms, extra).map_or(1.0, |r| t.score(r)))
            .sum();
        sum / endpoints.len() as f64
    }

    fn stale(&self, endpoints: &[&Arc<EndpointState>], now_ms: u64) -> usize {
        endpoints.iter().filter(|e| !self.fresh(e, now_ms)).count()
    }

    fn gauges_as_of(&self, endpoints: &[&Arc<EndpointState>], _now_ms: u64) -> u64 {
        endpoints
            .iter()
            .map(|e| e.load.scraped_at_ms().unwrap_or(0))
            .min()
            .unwrap_or(0)
    }

    fn type_name(&self) -> &'static str {
        UTILIZATION.name
    }

    fn set_scrape_interval(&self, interval: Duration) {
        self.min_staleness_ms.store(
            2 * interval.as_millis() as u64,
            std::sync::atomic::Ordering::Relaxed,
        );
    }
}

impl UtilizationDetector {
    /// The filter at `now_ms` (ms, [`crate::monotonic_ms`] clock; [`Filter::filter`] passes
    /// the request's [`RequestCtx::now_ms`]): keeps the endpoints with fresh gauges under
    /// `threshold × (1 + headroom)` on both; the input when none is.
    pub fn filter_at(&self, candidates: &mut Candidates<'_>, now_ms: u64) {
        let t = self.thresholds(1.0 + self.params.headroom);
        let passes =
            |e: &&Arc<EndpointState>| self.reading(e, now_ms, 0.0).is_some_and(|r| t.under(r));
        // Fails open: an emptied set would turn a metrics hiccup into a 429 for everyone.
        if candidates.iter().any(passes) {
            candidates.retain(passes);
        }
    }
}

impl Filter for UtilizationDetector {
    fn filter(&self, ctx: &RequestCtx<'_>, candidates: &mut Candidates<'_>) {
        self.filter_at(candidates, ctx.now_ms());
    }
}

/// `concurrency-detector` parameters.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ConcurrencyParams {
    /// `requests` (the only mode pdgate implements).
    #[serde(default = "default_mode")]
    pub concurrency_mode: String,
    /// Bookings per endpoint at which it counts as full (default 100; > 0).
    #[serde(default = "default_max_concurrency")]
    pub max_concurrency: u64,
    /// Accepted for compatibility; only read in the `tokens`/`hybrid` modes (default 1e6).
    #[serde(default = "default_max_tokens")]
    pub max_token_concurrency: u64,
    /// Filter slack: maxConcurrency × (1 + headroom) (default 0; ≥ 0).
    #[serde(default)]
    pub headroom: f64,
}

fn default_mode() -> String {
    "requests".into()
}
fn default_max_concurrency() -> u64 {
    100
}
fn default_max_tokens() -> u64 {
    1_000_000
}

/// The `concurrency-detector` (see the module docs).
#[derive(Debug, Clone)]
pub struct ConcurrencyDetector {
    /// Its parameters.
    pub params: ConcurrencyParams,
}

impl ConcurrencyDetector {
    /// Bookings at which an endpoint is full, scaled by `slack` (`× 1` for saturation,
    /// `× (1 + headroom)` for the filter), truncated to a whole count as llm-d does.
    pub fn limit(&self, slack: f64) -> u64 {
        (self.params.max_concurrency as f64 * slack) as u64
    }

    /// The load the rule counts on `e`: this router's bookings there.
    fn load(e: &EndpointState) -> u64 {
        e.load.in_flight() as u64
    }
}

impl SaturationDetector for ConcurrencyDetector {
    fn saturation(&self, endpoints: &[&Arc<EndpointState>], pending: u32, _now_ms: u64) -> f64 {
        if endpoints.is_empty() {
            return 1.0;
        }
        let booked: u64 = endpoints.iter().map(|e| Self::load(e)).sum();
        let capacity = endpoints.len() as f64 * self.limit(1.0) as f64;
        (booked + pending as u64) as f64 / capacity
    }

    fn type_name(&self) -> &'static str {
        CONCURRENCY.name
    }
}

impl Filter for ConcurrencyDetector {
    fn filter(&self, _ctx: &RequestCtx<'_>, candidates: &mut Candidates<'_>) {
        let limit = self.limit(1.0 + self.params.headroom);
        candidates.retain(|e| Self::load(e) < limit);
    }
}

/// Registry entry of `utilization-detector`.
pub const UTILIZATION: PluginType = PluginType {
    name: "utilization-detector",
    stage: Stage::Consumer,
    build: build_utilization,
};

/// Registry entry of `concurrency-detector`.
pub const CONCURRENCY: PluginType = PluginType {
    name: "concurrency-detector",
    stage: Stage::Consumer,
    build: build_concurrency,
};

fn build_utilization(params: Option<&Value>, _: &mut BuildCtx<'_>) -> Result<Built, PluginError> {
    let p: UtilizationParams = decode(params)?;
    if p.queue_depth_threshold == 0 {
        return Err(PluginError::invalid("queueDepthThreshold", "must be > 0"));
    }
    if !(p.kv_cache_util_threshold > 0.0 && p.kv_cache_util_threshold <= 1.0) {
        return Err(PluginError::invalid(
            "kvCacheUtilThreshold",
            "must be in (0, 1]",
        ));
    }
    if p.metrics_staleness_threshold.is_zero() {
        return Err(PluginError::invalid(
            "metricsStalenessThreshold",
            "must be > 0",
        ));
    }
    if p.headroom.is_nan() || p.headroom < 0.0 {
        return Err(PluginError::invalid("headroom", "must be ≥ 0"));
    }
    let d = Arc::new(UtilizationDetector::new(p.clone()));
    Ok(Built {
        filter: Some(d.clone()),
        saturation: Some(d),
        params: effective(&p),
        ..Built::default()
    })
}

fn build_concurrency(params: Option<&Value>, _: &mut BuildCtx<'_>) -> Result<Built, PluginError> {
    let p: ConcurrencyParams = decode(params)?;
    match p.concurrency_mode.as_str() {
        "requests" => {}
        "tokens" | "hybrid" => {
            return Err(PluginError::invalid(
                "concurrencyMode",
                format!(
                    "`{}` is not supported: pdgate counts in-flight requests, not tokens \
                     (use `requests`)",
                    p.concurrency_mode
                ),
            ))
        }
        other => {
            return Err(PluginError::invalid(
                "concurrencyMode",
                format!("`{other}` is not one of requests, tokens, hybrid"),
            ))
        }
    }
    if p.max_concurrency == 0 {
        return Err(PluginError::invalid("maxConcurrency", "must be > 0"));
    }
    if p.headroom.is_nan() || p.headroom < 0.0 {
        return Err(PluginError::invalid("headroom", "must be ≥ 0"));
    }
    let d = Arc::new(ConcurrencyDetector { params: p.clone() });
    Ok(Built {
        filter: Some(d.clone()),
        saturation: Some(d),
        params: effective(&p),
        ..Built::default()
    })
}

#[cfg(test)]
#[path = "detector_tests.rs"]
mod tests;
