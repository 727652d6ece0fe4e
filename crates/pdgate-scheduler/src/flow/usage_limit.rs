//! Usage-limit policies: how the pool's saturation and a band's rank become the band's
//! dispatch ceiling (llm-d's `UsageLimitPolicy.ComputeLimit`), and the dispatch gate the flow
//! controller builds on them ([`Limiter`]).
//!
//! Every dispatch attempt computes one ceiling per band (saturation units, bands highest
//! priority first, every entry pre-filled with 1.0). Bands are then walked from the top: the
//! attempt stops at the first band whose ceiling is at or below the saturation, and otherwise
//! dispatches from the first band with queued requests — llm-d's processor
//! (`flowcontrol/controller/internal/processor.go` `dispatchCycle`). A gated band is not drawn
//! from; its requests stay queued (the ceiling gates dispatch, not admission).
//!
//! With `static-usage-limit-policy` every ceiling is the same threshold, so the gate is
//! exactly "dispatch while saturation < threshold".

pub use super::policy::UsageLimit;
use super::queues::Queues;

/// The dispatch gate of one flow controller: its policy, the policy's state (the
/// soft-reflective tick) and reusable buffers (no allocation per attempt once sized).
#[derive(Debug, Default)]
pub struct Limiter {
    policy: UsageLimit,
    tick: u64,
    priorities: Vec<i32>,
    ceilings: Vec<f64>,
    /// Index of the band the last attempt stopped at (`None`: it did not stop).
    stopped_at: Option<usize>,
}

impl Limiter {
    /// A gate for `policy`.
    pub fn new(policy: UsageLimit) -> Self {
        Limiter {
            policy,
            ..Limiter::default()
        }
    }

    /// The policy.
    pub fn policy(&self) -> UsageLimit {
        self.policy
    }

    /// One dispatch attempt at `saturation`: computes the ceilings of the bands of `queues`
    /// and says whether the target band may dispatch — the band of `arriving` (a band
    /// priority, for a request about to be queued into empty queues), else the highest band
    /// with queued requests. True iff saturation is below the ceiling of the target band and
    /// of every band above it; false when there is no target.
    pub fn open(&mut self, saturation: f64, queues: &Queues, arriving: Option<i32>) -> bool {
        self.priorities.clear();
        let mut target = None;
        for (i, (p, len, _)) in queues.bands().enumerate() {
            self.priorities.push(p);
            let hit = match arriving {
                Some(a) => p == a,
                None => len > 0,
            };
            if hit && target.is_none() {
                target = Some(i);
            }
        }
        self.ceilings.clear();
        self.ceilings.resize(self.priorities.len(), 1.0);
        self.policy.compute(
            saturation,
            &self.priorities,
            &mut self.ceilings,
            &mut self.tick,
        );
        let Some(target) = target else {
            self.stopped_at = None;
            return false;
        };
        // A NaN saturation stops too (fail closed, as the static gate does).
        self.stopped_at = self.ceilings[..=target]
            .iter()
            .position(|&c| saturation >= c || saturation.is_nan());
        self.stopped_at.is_none()
    }

    /// The ceilings of the last attempt, one per band, highest priority first.
    pub fn ceilings(&self) -> &[f64] {
        &self.ceilings
    }

    /// The blocked demand for eviction after an attempt that stopped, at `saturation`:
    /// `(band priority, its ceiling)` of the first band from where the attempt stopped that has
    /// queued requests, a ceiling > 0 (a zero ceiling no eviction can open) and saturation at
    /// or over it (llm-d `maybeReclaim`); else the highest band with queued requests and its
    /// ceiling (which the eviction rule then declines). `None` when nothing is queued.
    pub fn demand(&self, saturation: f64, queues: &Queues) -> Option<(i32, f64)> {
        let from = self.stopped_at.unwrap_or(0);
        let ceiling = |i: usize| self.ceilings.get(i).copied().unwrap_or(1.0);
        let mut first = None;
        for (i, (p, len, _)) in queues.bands().enumerate() {
            if len == 0 {
                continue;
            }
            first.get_or_insert((p, ceiling(i)));
            let c = ceiling(i);
            if i >= from && c > 0.0 && saturation >= c {
                return Some((p, c));
            }
        }
        first
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flow::queues::Item;
    use crate::flow::settings::FlowControlConfig;
    use std::sync::Arc;

    /// Queues with bands 10, 0 and -10 and one request queued at each of `queued`.
    fn queues(queued: &[i32]) -> Queues {
        let mut q = Queues::new(&FlowControlConfig::default(), [10, -10]);
        for (i, &p) in queued.iter().enumerate() {
            q.enqueue(Item {
                id: i as u64 + 1,
                priority: p,
                flow: Arc::from("f"),
                bytes: 1,
                enqueued_ms: 0,
                slo_ttft_ms: None,
            })
            .unwrap();
        }
        q
    }

    #[test]
    fn static_gate_is_saturation_below_threshold() {
        let mut l = Limiter::new(UsageLimit::Static(0.8));
        let q = queues(&[-10]);
        assert!(l.open(0.79, &q, None));
        assert_eq!(l.ceilings(), [0.8, 0.8, 0.8]);
        assert!(!l.open(0.8, &q, None));
        assert!(!l.open(f64::NAN, &q, None));
        // The arriving request's band, with nothing queued.
        let empty = queues(&[]);
        assert!(l.open(0.5, &empty, Some(0)));
        assert!(!l.open(0.9, &empty, Some(10)));
        assert!(!l.open(0.5, &empty, None), "no target");
        // Eviction demand: the highest queued band and the threshold, blocked or not.
        let q = queues(&[0, -10]);
        assert!(!l.open(0.9, &q, None));
        assert_eq!(l.demand(0.9, &q), Some((0, 0.8)));
        assert_eq!(l.demand(0.5, &q), Some((0, 0.8)));
        assert_eq!(l.demand(0.9, &queues(&[])), None);
    }

    #[test]
    fn soft_reflective_gate_holds_lower_bands_and_skips_zero_ceilings_for_eviction() {
        let mut l = Limiter::new(UsageLimit::SoftReflectiveCeiling);
        // Saturation 0.8, 3 bands: band 1 (1 − 0.4 = 0.6) and band 2 (0.2) reached; period
        // round(0.8 / 0.2) = 4: ticks 1, 2, 3 closed, tick 4 open.
        let low = queues(&[-10]);
        let got: Vec<bool> = (0..4).map(|_| l.open(0.8, &low, None)).collect();
        assert_eq!(got, [false, false, false, true]);
        // The top band is open below 1.0 whatever the tick (tick 5).
        let top = queues(&[10, -10]);
        assert!(l.open(0.8, &top, None));
        assert_eq!(l.ceilings(), [1.0, 0.0, 0.0]);
        // Stopped at band 1 (ceiling 0): no eviction can open it; the fallback is the
        // highest queued band (tick 6: closed).
        let mid = queues(&[0]);
        assert!(!l.open(0.8, &mid, None));
        assert_eq!(l.demand(0.8, &mid), Some((0, 0.0)));
        // At saturation 1.0 the top band stops too and is the demand.
        assert!(!l.open(1.0, &top, None));
        assert_eq!(l.ceilings(), [1.0, 0.0, 0.0]);
        assert_eq!(l.demand(1.0, &top), Some((10, 1.0)));
    }
}
