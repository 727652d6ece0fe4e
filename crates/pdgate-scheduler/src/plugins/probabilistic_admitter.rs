//! `probabilistic-admitter` — sheds sheddable requests with a probability that rises steeply
//! with the pool's utilization.
//!
//! - **Type:** `probabilistic-admitter`
//! - **Extension points:** Admitter (once per client request, after the screeners and
//!   before any profile; [`crate::plugin::Admitter`]).
//! - **Parameters:** `queueDepthThreshold` (waiting requests, default
//!   [`DEFAULT_QUEUE_DEPTH_THRESHOLD`] = 5, > 0), `kvCacheUtilThreshold` (KV-cache fraction,
//!   default [`DEFAULT_KV_CACHE_UTIL_THRESHOLD`] = 0.8, > 0, no upper bound), `power`
//!   (default [`DEFAULT_POWER`] = 5.0, > 0), `k` (default [`DEFAULT_K`] = 300.0, > 0).
//! - **Inputs:** the request's priority (its InferenceObjective's, from
//!   `x-llm-d-inference-objective`; the server passes it), and per screened candidate the
//!   utilization gauges as the `utilization-detector` reads them ([`Reading`]): waiting =
//!   `max(scraped vllm:num_requests_waiting, this router's bookings − scraped running)`,
//!   KV = `vllm:kv_cache_usage_perc`.
//! - **Outputs:** a request of priority ≥ 0, or with no candidate, is admitted. Otherwise
//!   `sat = mean over candidates of max(waiting / queueDepthThreshold, kv /
//!   kvCacheUtilThreshold)` (an endpoint without gauges counts 1.0; no clamp, so sat may
//!   exceed 1), `p = min(sat^power × k, 1)`, and the request is refused when a uniform draw
//!   in [0, 1) is below `p`. With the defaults `p` reaches 1 at sat ≈ 0.32 and is ≈ 2.3 % at
//!   sat 0.15. A refusal is answered **429** with the body `request not admitted by
//!   `<plugin name>`: rejected, saturation=S prob=P` (S to 3 decimals, P to 2).
//! - **Limitations:** llm-d answers this refusal with **500**: its director wraps every
//!   admitter error as an internal error (`request cannot be admitted: …`), although the
//!   admitter itself raises ResourceExhausted. pdgate answers 429 deliberately — the request
//!   was shed under load and may be retried later, which is what 429 says, and what llm-d's
//!   own legacy and flow-control shedding answer. pdgate's waiting count includes the
//!   requests it booked since the last scrape (llm-d reads the scraped gauge only), so a
//!   burst sees its own load. After a failed scrape pdgate has no gauges for the endpoint
//!   and counts it 1.0, where llm-d keeps using the last good values (neither checks
//!   staleness otherwise). Runs in `pdgate serve` (the HTTP router), not in `pdgate epp`,
//!   which has no admission step.
//!
//! Source: llm-d-router `pkg/epp/framework/plugins/requestcontrol/admitter/
//! probabilisticadmitter/plugin.go`.

use crate::endpoint::EndpointState;
use crate::flow::detector::{known, Reading, Thresholds};
use crate::plugin::Admitter;
use crate::plugin_build::{decode, effective, BuildCtx, Built, PluginError, PluginType, Stage};
use crate::request::RequestCtx;
use serde::{Deserialize, Serialize};
use serde_yaml_ng::Value;
use std::sync::Arc;

/// Registry entry.
pub const TYPE: PluginType = PluginType {
    name: "probabilistic-admitter",
    stage: Stage::Consumer,
    build,
};

/// Default `queueDepthThreshold`, waiting requests.
pub const DEFAULT_QUEUE_DEPTH_THRESHOLD: i64 = 5;
/// Default `kvCacheUtilThreshold`, fraction of the KV cache.
pub const DEFAULT_KV_CACHE_UTIL_THRESHOLD: f64 = 0.8;
/// Default `power` (exponent of the saturation).
pub const DEFAULT_POWER: f64 = 5.0;
/// Default `k` (scale of the shedding probability).
pub const DEFAULT_K: f64 = 300.0;

/// Parameters, as llm-d names them.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct AdmitterParams {
    /// Waiting requests at which an endpoint counts as full (> 0).
    #[serde(default = "default_queue_depth")]
    pub queue_depth_threshold: i64,
    /// KV-cache usage fraction at which an endpoint counts as full (> 0).
    #[serde(default = "default_kv")]
    pub kv_cache_util_threshold: f64,
    /// Exponent applied to the saturation (> 0).
    #[serde(default = "default_power")]
    pub power: f64,
    /// Multiplier of `sat^power` (> 0).
    #[serde(default = "default_k")]
    pub k: f64,
}

fn default_queue_depth() -> i64 {
    DEFAULT_QUEUE_DEPTH_THRESHOLD
}
fn default_kv() -> f64 {
    DEFAULT_KV_CACHE_UTIL_THRESHOLD
}
fn default_power() -> f64 {
    DEFAULT_POWER
}
fn default_k() -> f64 {
    DEFAULT_K
}

impl Default for AdmitterParams {
    fn default() -> Self {
        AdmitterParams {
            queue_depth_threshold: DEFAULT_QUEUE_DEPTH_THRESHOLD,
            kv_cache_util_threshold: DEFAULT_KV_CACHE_UTIL_THRESHOLD,
            power: DEFAULT_POWER,
            k: DEFAULT_K,
        }
    }
}

impl AdmitterParams {
    /// Checks every value (llm-d: each must be > 0).
    ///
    /// Errors: the first bad field, named.
    fn validate(&self) -> Result<(), PluginError> {
        if self.queue_depth_threshold <= 0 {
            return Err(PluginError::invalid(
                "queueDepthThreshold",
                format!("must be > 0, got {}", self.queue_depth_threshold),
            ));
        }
        for (field, v) in [
            ("kvCacheUtilThreshold", self.kv_cache_util_threshold),
            ("power", self.power),
            ("k", self.k),
        ] {
            if !(v.is_finite() && v > 0.0) {
                return Err(PluginError::invalid(
                    field,
                    format!("must be a finite number > 0, got {v}"),
                ));
            }
        }
        Ok(())
    }
}

/// A source of uniform draws in [0, 1).
pub type Draw = Box<dyn Fn() -> f64 + Send + Sync>;

/// The admitter.
pub struct ProbabilisticAdmitter {
    thresholds: Thresholds,
    power: f64,
    k: f64,
    draw: Draw,
}

impl std::fmt::Debug for ProbabilisticAdmitter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProbabilisticAdmitter")
            .field("thresholds", &self.thresholds)
            .field("power", &self.power)
            .field("k", &self.k)
            .finish_non_exhaustive()
    }
}

impl ProbabilisticAdmitter {
    /// An admitter with `params` (already validated) drawing from the thread RNG.
    pub fn new(params: &AdmitterParams) -> Self {
        ProbabilisticAdmitter {
            thresholds: Thresholds {
                queue: params.queue_depth_threshold as f64,
                kv: params.kv_cache_util_threshold,
            },
            power: params.power,
            k: params.k,
            draw: Box::new(rand::random::<f64>),
        }
    }

    /// The same admitter drawing from `draw` (values in [0, 1)): tests make it exact.
    pub fn with_draw(mut self, draw: Draw) -> Self {
        self.draw = draw;
        self
    }

    /// The pool saturation over `candidates`: the mean of each endpoint's utilization score,
    /// 1.0 for one without gauges; 0 for an empty set (never read then).
    pub fn saturation(&self, candidates: &[&Arc<EndpointState>]) -> f64 {
        if candidates.is_empty() {
            return 0.0;
        }
        let sum: f64 = candidates
            .iter()
            .map(|e| match known(e) {
                true => self.thresholds.score(Reading::of(e, 0.0)),
                false => 1.0,
            })
            .sum();
        sum / candidates.len() as f64
    }

    /// The shedding probability at saturation `sat`: `min(sat^power × k, 1)`.
    pub fn probability(&self, sat: f64) -> f64 {
        (sat.powf(self.power) * self.k).min(1.0)
    }
}

impl Admitter for ProbabilisticAdmitter {
    fn admit(
        &self,
        _ctx: &RequestCtx<'_>,
        priority: i32,
        candidates: &[&Arc<EndpointState>],
    ) -> Result<(), String> {
        if !crate::flow::policy::sheddable(priority) || candidates.is_empty() {
            return Ok(());
        }
        let sat = self.saturation(candidates);
        let p = self.probability(sat);
        match (self.draw)() < p {
            true => Err(format!("rejected, saturation={sat:.3} prob={p:.2}")),
            false => Ok(()),
        }
    }
}

fn build(params: Option<&Value>, _: &mut BuildCtx<'_>) -> Result<Built, PluginError> {
    let p: AdmitterParams = decode(params)?;
    p.validate()?;
    Ok(Built {
        admitter: Some(Arc::new(ProbabilisticAdmitter::new(&p))),
        params: effective(&p),
        ..Built::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::endpoint::InFlightGuard;
    use crate::plugins::testutil::{ep, with_ctx};
    use pdgate_api::PromptInput;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn admitter(draw: f64) -> ProbabilisticAdmitter {
        ProbabilisticAdmitter::new(&AdmitterParams::default()).with_draw(Box::new(move || draw))
    }

    fn admit(
        a: &ProbabilisticAdmitter,
        priority: i32,
        c: &[&Arc<EndpointState>],
    ) -> Result<(), String> {
        with_ctx(&PromptInput::Tokens(vec![1]), |ctx| {
            a.admit(ctx, priority, c)
        })
    }

    fn build_with(yaml: &str) -> Result<Built, PluginError> {
        let v: Value = serde_yaml_ng::from_str(yaml).unwrap();
        let mut ctx = BuildCtx {
            built: &[],
            profiles: &[],
            next_slot: 0,
        };
        build(Some(&v), &mut ctx)
    }

    #[test]
    fn sheds_with_the_hand_computed_probability() {
        let (a, b) = (ep("a", None), ep("b", None));
        // a: max(1/5, 0.2/0.8) = 0.25; b: max(0/5, 0.08/0.8) = 0.1.
        a.load.set_scraped(Some(0.0), Some(1.0), Some(0.2));
        b.load.set_scraped(Some(0.0), Some(0.0), Some(0.08));
        let c = [&a, &b];
        let x = admitter(0.0);
        // sat = 0.175; p = 0.175^5 × 300 = 0.000164130859375 × 300 = 0.0492392578125.
        assert!((x.saturation(&c) - 0.175).abs() < 1e-15);
        assert!((x.probability(0.175) - 0.0492392578125).abs() < 1e-15);
        // A draw below p refuses, at or above it admits.
        assert_eq!(
            admit(&admitter(0.049), -1, &c),
            Err("rejected, saturation=0.175 prob=0.05".into())
        );
        assert_eq!(admit(&admitter(0.0493), -1, &c), Ok(()));
        // An endpoint never scraped counts 1.0: sat = (0.25 + 0.1 + 1) / 3 = 0.45,
        // p = min(0.45^5 × 300 = 5.5358…, 1) = 1: even the highest draw refuses.
        let u = ep("u", None);
        assert_eq!(
            admit(&admitter(0.999_999), -2, &[&a, &b, &u]),
            Err("rejected, saturation=0.450 prob=1.00".into())
        );
        // An idle pool: p = 0, and a draw of 0 is not below it.
        let i = ep("i", None);
        i.load.set_scraped(Some(0.0), Some(0.0), Some(0.0));
        assert_eq!(admit(&admitter(0.0), -1, &[&i]), Ok(()));
    }

    #[test]
    fn bookings_since_the_scrape_count_as_waiting() {
        let a = ep("a", None);
        a.load.set_scraped(Some(0.0), Some(0.0), Some(0.0));
        let _g: Vec<InFlightGuard> = (0..3).map(|_| InFlightGuard::book(&a.load)).collect();
        // waiting = max(0, 3 − 0) = 3 → 3/5 = 0.6; p = min(0.6^5 × 300 = 23.3, 1) = 1.
        let x = admitter(0.5);
        assert!((x.saturation(&[&a]) - 0.6).abs() < 1e-15);
        assert_eq!(
            admit(&x, -1, &[&a]),
            Err("rejected, saturation=0.600 prob=1.00".into())
        );
    }

    #[test]
    fn only_sheddable_requests_with_candidates_are_drawn_for() {
        let calls = Arc::new(AtomicUsize::new(0));
        let seen = calls.clone();
        let x =
            ProbabilisticAdmitter::new(&AdmitterParams::default()).with_draw(Box::new(move || {
                seen.fetch_add(1, Ordering::Relaxed);
                0.0
            }));
        let u = ep("u", None); // no gauges: sat 1, p 1
        assert_eq!(admit(&x, 0, &[&u]), Ok(()));
        assert_eq!(admit(&x, 10, &[&u]), Ok(()));
        assert_eq!(admit(&x, -1, &[]), Ok(()));
        assert_eq!(calls.load(Ordering::Relaxed), 0);
        assert!(admit(&x, -1, &[&u]).is_err());
        assert_eq!(calls.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn parameters_take_llm_d_names_and_defaults() {
        let b = build_with("{}").unwrap();
        assert!(b.admitter.is_some());
        let p: AdmitterParams = serde_yaml_ng::from_value(b.params).unwrap();
        assert_eq!(p, AdmitterParams::default());
        let b = build_with("queueDepthThreshold: 10\nkvCacheUtilThreshold: 1.5\npower: 2\nk: 4")
            .unwrap();
        let p: AdmitterParams = serde_yaml_ng::from_value(b.params).unwrap();
        assert_eq!(
            p,
            AdmitterParams {
                queue_depth_threshold: 10,
                kv_cache_util_threshold: 1.5,
                power: 2.0,
                k: 4.0
            }
        );
        // With those: an endpoint at waiting 5, kv 0.3 → max(0.5, 0.2) = 0.5;
        // p = 0.5² × 4 = 1.
        let x = ProbabilisticAdmitter::new(&p);
        let a = ep("a", None);
        a.load.set_scraped(Some(0.0), Some(5.0), Some(0.3));
        assert_eq!(x.saturation(&[&a]), 0.5);
        assert_eq!(x.probability(0.5), 1.0);
        assert_eq!(x.probability(0.25), 0.25);
    }

    #[test]
    fn bad_parameters_name_the_field() {
        for (yaml, field) in [
            ("queueDepthThreshold: 0", "queueDepthThreshold"),
            ("queueDepthThreshold: -3", "queueDepthThreshold"),
            ("kvCacheUtilThreshold: 0", "kvCacheUtilThreshold"),
            ("power: -1", "power"),
            ("k: 0", "k"),
            ("k: .nan", "k"),
        ] {
            let e = build_with(yaml).err().unwrap();
            assert_eq!(e.path.as_deref(), Some(field), "{yaml}: {e:?}");
            assert!(e.message.starts_with("must be"), "{yaml}: {e:?}");
        }
        let e = build_with("threshold: 1").err().unwrap();
        assert_eq!(e.key.as_deref(), Some("threshold"));
        assert!(e.message.contains("unknown field"), "{e:?}");
        let e = build_with("queueDepthThreshold: many").err().unwrap();
        assert_eq!(e.path.as_deref(), Some("queueDepthThreshold"), "{e:?}");
    }
}
