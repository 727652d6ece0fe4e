//! In-flight eviction (`flowControl.enableEviction: true`): when a band with queued requests
//! is blocked by pool saturation, dispatched *sheddable* requests (priority < 0) of a lower
//! priority are evicted to reclaim capacity. Pure and sync; the controller
//! (`pdgate_server::flow_control`) tracks requests, signals the evicted ones and confirms
//! when their streams end.
//!
//! Semantics and constants from llm-d-router (`flowcontrol/controller/internal/
//! reclamation.go`, `flowcontrol/controller/config.go`, `framework/plugins/flowcontrol/
//! eviction/{filtering,ordering}`):
//! - **Victims**: tracked requests with priority < 0 (`eviction-sheddable-filter`), lowest
//!   priority first, then the most recently dispatched (`eviction-priority-then-time-
//!   ordering`: least KV-cache invested), and always strictly below the blocked band.
//! - **Trigger**: the highest-priority band with queued items is blocked
//!   (`saturation ≥ ceiling`, ceiling > 0) and its priority is above the next victim's.
//! - **Sizing** (saturation-gauge units): `credit = saturation / in_flight`, `n = max(1,
//!   ceil((saturation − ceiling − pending) / credit))`, capped at
//!   [`MAX_REVOCATIONS_PER_DECISION`] and at the evictable count.
//! - **Pacing** (stop-and-wait): a new decision only when every revocation is confirmed
//!   (its stream ended) and [`CONFIRMATION_GRACE_MS`] has passed since; a revocation never
//!   confirmed counts as confirmed after [`CONFIRMATION_TIMEOUT_MS`]. pdgate adds one
//!   condition: the detector's gauges must be newer than the end of the grace (a scrape
//!   taken after the engine aborted), so a slow scrape never makes it evict again on the
//!   load it already reclaimed.
//!
//! The evicted client gets 429 with `x-llm-d-request-dropped-reason: evicted` before its
//! answer began, else an error event ending its stream.

use std::cmp::Reverse;
use std::collections::{BTreeSet, HashMap};

/// Revocations one decision issues at most (llm-d `defaultMaxRevocationsPerDecision`).
pub const MAX_REVOCATIONS_PER_DECISION: usize = 2;
/// Wait after a confirmation before the next decision, ms: the engine's abort, its KV
/// freeing and the next scrape (llm-d `defaultEvictionConfirmationGrace`).
pub const CONFIRMATION_GRACE_MS: u64 = 500;
/// An unconfirmed revocation holds the gate at most this long, ms (llm-d
/// `defaultEvictionConfirmationTimeout`).
pub const CONFIRMATION_TIMEOUT_MS: u64 = 10_000;

/// How a revocation ended (the `outcome` label of
/// `llm_d_epp_flow_control_revocations_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RevocationOutcome {
    /// The evicted request's stream ended.
    Confirmed,
    /// It did not end within [`CONFIRMATION_TIMEOUT_MS`].
    TimedOut,
}

impl RevocationOutcome {
    /// llm-d's label value.
    pub fn as_str(self) -> &'static str {
        match self {
            RevocationOutcome::Confirmed => "confirmed",
            RevocationOutcome::TimedOut => "timed_out",
        }
    }
}

/// One decision's revocations.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    /// The requests to evict (tracking ids), in eviction order.
    pub victims: Vec<u64>,
    /// The deficit that sized it, saturation units (`saturation − ceiling`).
    pub reclaim_target: f64,
    /// The blocked band's priority.
    pub demand_priority: i32,
}

/// Dispatched requests and the revocations in progress (see the module docs).
#[derive(Debug, Default)]
pub struct Eviction {
    /// Every tracked request: id → (priority, dispatch sequence).
    tracked: HashMap<u64, (i32, u64)>,
    /// Sheddable tracked requests not yet evicted, in victim order.
    victims: BTreeSet<(i32, Reverse<u64>, u64)>,
    next_seq: u64,
    /// Issued, unconfirmed revocations: id → (credit, issued at ms).
    outstanding: HashMap<u64, (f64, u64)>,
    /// Confirmed revocations whose debit still holds: (credit, expires at ms).
    cooling: Vec<(f64, u64)>,
    pending: f64,
}

impl Eviction {
    /// Starts tracking dispatched request `id` of `priority`.
    pub fn track(&mut self, id: u64, priority: i32) {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.tracked.insert(id, (priority, seq));
        if super::sheddable(priority) {
            self.victims.insert((priority, Reverse(seq), id));
        }
    }

    /// Request `id` ended (answered, failed, gone or evicted) at `now_ms`. Returns
    /// `Some(issued_at_ms)` when it was an outstanding revocation, now confirmed.
    pub fn untrack(&mut self, id: u64, now_ms: u64) -> Option<u64> {
        if let Some((p, seq)) = self.tracked.remove(&id) {
            self.victims.remove(&(p, Reverse(seq), id));
        }
        let (credit, issued) = self.outstanding.remove(&id)?;
        self.cooling
            .push((credit, now_ms.saturating_add(CONFIRMATION_GRACE_MS)));
        Some(issued)
    }

    /// Tracked requests (all priorities).
    pub fn in_flight(&self) -> usize {
        self.tracked.len()
    }

    /// Tracked requests that could be evicted.
    pub fn evictable(&self) -> usize {
        self.victims.len()
    }

    /// Saturation already being reclaimed by revocations not yet visible in the gauge.
    pub fn pending_reclaim(&self) -> f64 {
        self.pending
    }

    /// True when a decision may run at `now_ms` with gauges current up to `gauges_ms`
    /// (nothing outstanding or cooling); retires timed-out revocations (returned, to count)
    /// and expired debits first. A debit expires once both clocks pass its grace.
    pub fn gate_open(&mut self, now_ms: u64, gauges_ms: u64) -> (bool, usize) {
        let timed_out: Vec<u64> = self
            .outstanding
            .iter()
            .filter(|(_, (_, at))| now_ms.saturating_sub(*at) >= CONFIRMATION_TIMEOUT_MS)
            .map(|(id, _)| *id)
            .collect();
        for id in &timed_out {
            if let Some((credit, _)) = self.outstanding.remove(id) {
                self.cooling
                    .push((credit, now_ms.saturating_add(CONFIRMATION_GRACE_MS)));
            }
        }
        let pending = &mut self.pending;
        self.cooling.retain(|&(credit, until)| {
            let keep = now_ms < until || gauges_ms < until;
            if !keep {
                *pending = (*pending - credit).max(0.0);
            }
            keep
        });
        let open = self.outstanding.is_empty() && self.cooling.is_empty();
        (open, timed_out.len())
    }

    /// One decision at `now_ms` (gauges current up to `gauges_ms`): the blocked band of `demand_priority` (the highest band with
    /// queued requests) against the pool's `saturation` and the band's `ceiling`. Returns the
    /// revocations issued (their victims leave the victim set at once), or `None` when the
    /// gate is closed, nothing is evictable below the demand, the band is not blocked, or
    /// its ceiling is 0 (a band that must not dispatch at any load).
    pub fn decide(
        &mut self,
        now_ms: u64,
        gauges_ms: u64,
        saturation: f64,
        ceiling: f64,
        demand_priority: i32,
    ) -> Option<Decision> {
        if ceiling.is_nan() || ceiling <= 0.0 || saturation < ceiling || !saturation.is_finite() {
            return None;
        }
        let &(victim_priority, _, _) = self.victims.iter().next()?;
        if victim_priority >= demand_priority || !self.gate_open(now_ms, gauges_ms).0 {
            return None;
        }
        let credit = saturation / self.tracked.len().max(1) as f64;
        if credit.is_nan() || credit <= 0.0 || credit.is_infinite() {
            return None;
        }
        let reclaim_target = saturation - ceiling;
        let net = reclaim_target - self.pending;
        if net < 0.0 {
            return None;
        }
        // Unblocking needs strictly more than the deficit: at the boundary issue one.
        let n = ((net / credit).ceil() as usize)
            .clamp(1, MAX_REVOCATIONS_PER_DECISION)
            .min(self.victims.len());
        let chosen: Vec<(i32, Reverse<u64>, u64)> = self
            .victims
            .iter()
            .take_while(|(p, _, _)| *p < demand_priority)
            .take(n)
            .copied()
            .collect();
        for v in &chosen {
            self.victims.remove(v);
            self.outstanding.insert(v.2, (credit, now_ms));
            self.pending += credit;
        }
        Some(Decision {
            victims: chosen.into_iter().map(|v| v.2).collect(),
            reclaim_target,
            demand_priority,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn victims_lowest_priority_then_newest_and_only_sheddable() {
        let mut e = Eviction::default();
        e.track(1, -1); // oldest −1
        e.track(2, -5);
        e.track(3, 0); // never a victim
        e.track(4, -1); // newest −1
        e.track(5, -5); // newest −5
        assert_eq!((e.in_flight(), e.evictable()), (5, 4));
        // saturation 1.5 over ceiling 1.0, 5 in flight: credit 0.3, n = ceil(0.5/0.3) = 2.
        let d = e.decide(0, 0, 1.5, 1.0, 0).unwrap();
        assert_eq!(d.victims, vec![5, 2]);
        assert!((d.reclaim_target - 0.5).abs() < 1e-9);
        assert!((e.pending_reclaim() - 0.6).abs() < 1e-9);
        // Stop-and-wait: nothing more until both are confirmed and the grace has passed.
        assert_eq!(e.decide(1, 1, 1.5, 1.0, 0), None);
        assert_eq!(e.untrack(5, 100), Some(0));
        assert_eq!(e.decide(200, 200, 1.5, 1.0, 0), None);
        assert_eq!(e.untrack(2, 300), Some(0));
        assert_eq!(
            e.decide(799, 799, 1.5, 1.0, 0),
            None,
            "grace runs from the last confirmation"
        );
        // 3 in flight now: credit 0.5, n = 1; the newest −1 goes first.
        // Gauges older than the end of the grace keep the gate shut (a slow scrape).
        assert_eq!(e.decide(800, 799, 1.5, 1.0, 0), None);
        assert_eq!(e.decide(800, 800, 1.5, 1.0, 0).unwrap().victims, vec![4]);
        assert_eq!(e.pending_reclaim(), 0.5);
    }

    #[test]
    fn no_eviction_without_a_lower_victim_a_block_or_a_ceiling() {
        let mut e = Eviction::default();
        e.track(1, -1);
        e.track(2, 0);
        assert_eq!(e.decide(0, 0, 0.99, 1.0, 5), None, "not blocked");
        assert_eq!(
            e.decide(0, 0, 1.2, 0.0, 5),
            None,
            "ceiling 0: no reclaim unblocks it"
        );
        assert_eq!(e.decide(0, 0, 1.2, 1.0, -1), None, "same band: no churn");
        assert_eq!(e.decide(0, 0, 1.2, 1.0, -3), None, "a lower band");
        assert_eq!(e.decide(0, 0, f64::NAN, 1.0, 5), None);
        // A finished request is no victim.
        assert_eq!(e.untrack(1, 0), None);
        assert_eq!(e.decide(0, 0, 2.0, 1.0, 5), None);
    }

    #[test]
    fn an_unconfirmed_revocation_times_out_and_frees_the_gate() {
        let mut e = Eviction::default();
        e.track(1, -1);
        e.track(2, -1);
        // 2 in flight at saturation 1.0 over ceiling 1.0: credit 0.5, boundary → n = 1.
        assert_eq!(e.decide(0, 0, 1.0, 1.0, 0).unwrap().victims, vec![2]);
        assert_eq!(e.gate_open(9_999, 9_999), (false, 0));
        assert_eq!(
            e.gate_open(10_000, 10_000),
            (false, 1),
            "timed out, now cooling"
        );
        assert_eq!(e.gate_open(10_500, 10_500), (true, 0));
        assert_eq!(e.pending_reclaim(), 0.0);
        // The timed-out one ending later confirms nothing.
        assert_eq!(e.untrack(2, 11_000), None);
        assert_eq!(
            e.decide(11_000, 11_000, 1.0, 1.0, 0).unwrap().victims,
            vec![1]
        );
    }
}
