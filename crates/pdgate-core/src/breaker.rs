//! Per-endpoint circuit breakers: stop sending traffic to an endpoint that keeps failing,
//! then let a few probes test it before closing again.
//!
//! The circuit breaker pattern (Nygard, *Release It!*) as in Envoy outlier detection
//! (`consecutive_5xx`, ejection for `base_ejection_time`) and linkerd failure accrual
//! (consecutive failures, then probes): `failure_threshold` consecutive failures open the
//! breaker for `open_for`; after that it is half-open and admits up to `half_open_probes`
//! concurrent probes; a successful probe closes it, a failed probe reopens it for another
//! `open_for`. There is no exponential ejection growth.
//!
//! The caller decides what a failure is, by design: the breaker only counts [`Outcome`]s.
//! That is the failure rule's [`crate::failure::BreakerEffect`] (transport errors, 502/503/504
//! and stalled bodies count; a 4xx, a 500, a deadline or a client that left do not). Time is passed in as a [`tokio::time::Instant`]
//! so tests drive it explicitly. State is keyed by endpoint name, like `EndpointLoad`, so it
//! survives snapshot rebuilds; call [`Breakers::forget`] when endpoints leave.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// Default consecutive failures that open a breaker (Envoy `consecutive_5xx` default: 5).
pub const DEFAULT_FAILURE_THRESHOLD: u32 = 5;
/// Default time a breaker stays open before probing, 5 s.
pub const DEFAULT_OPEN_FOR: Duration = Duration::from_secs(5);
/// Default concurrent probes admitted while half-open.
pub const DEFAULT_HALF_OPEN_PROBES: u32 = 1;

/// Breaker tuning, shared by every endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BreakerConfig {
    /// Consecutive failures that open the breaker (0 is read as 1).
    pub failure_threshold: u32,
    /// How long an opened breaker refuses traffic before probing.
    pub open_for: Duration,
    /// Concurrent probes admitted while half-open (0 is read as 1, else it would never close).
    pub half_open_probes: u32,
}

impl Default for BreakerConfig {
    fn default() -> Self {
        BreakerConfig {
            failure_threshold: DEFAULT_FAILURE_THRESHOLD,
            open_for: DEFAULT_OPEN_FOR,
            half_open_probes: DEFAULT_HALF_OPEN_PROBES,
        }
    }
}

/// The result of one request, as the failure rule judged it ([`crate::failure::rule`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The endpoint worked.
    Success,
    /// The endpoint failed (see the failure rule).
    Failure,
}

/// A breaker's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BreakerState {
    /// Normal traffic.
    Closed,
    /// Refusing traffic (its `open_for` may have elapsed: the next admit turns it half-open).
    Open,
    /// Admitting probes only.
    HalfOpen,
}

/// What [`Breakers::admit`] decided for one request.
#[must_use]
#[derive(Debug)]
pub enum Admission {
    /// Breaker closed: send normally.
    Closed,
    /// Half-open: send as a probe; hold the guard until the outcome is recorded.
    Probe(ProbeGuard),
    /// Open, or half-open with every probe slot taken: skip this endpoint.
    Open,
}

impl Admission {
    /// True unless [`Admission::Open`].
    pub fn admitted(&self) -> bool {
        !matches!(self, Admission::Open)
    }
}

#[derive(Debug, Clone, Copy, Default)]
enum Mode {
    #[default]
    Closed,
    Open {
        until: Instant,
    },
    HalfOpen,
}

#[derive(Debug, Default)]
struct Entry {
    mode: Mode,
    failures: u32,
    probes: u32,
    /// Identifies one half-open period; a guard from an earlier one frees nothing.
    epoch: u64,
}

#[derive(Debug, Default)]
struct Inner {
    map: HashMap<String, Entry>,
    /// Last epoch handed out (global, so a re-added endpoint never reuses one).
    epoch: u64,
}

/// Frees its probe slot on drop unless the half-open period already ended (an outcome was
/// recorded, or the endpoint was forgotten).
#[derive(Debug)]
pub struct ProbeGuard {
    inner: Arc<Mutex<Inner>>,
    endpoint: String,
    epoch: u64,
}

impl Drop for ProbeGuard {
    fn drop(&mut self) {
        let mut inner = self.inner.lock();
        if let Some(e) = inner.map.get_mut(&self.endpoint) {
            if matches!(e.mode, Mode::HalfOpen) && e.epoch == self.epoch {
                e.probes = e.probes.saturating_sub(1);
            }
        }
    }
}

/// The breakers of every endpoint, by name. Cheap to share (`Send + Sync`). Endpoints never
/// seen are closed and cost nothing until their first failure: while no endpoint has a
/// failure on record, every call reads one atomic and takes no lock (the per-request path of
/// a healthy fleet); otherwise one short lock per call.
#[derive(Debug, Default)]
pub struct Breakers {
    config: BreakerConfig,
    inner: Arc<Mutex<Inner>>,
    /// Entries in the map (0: every breaker closed with no failure on record).
    tracked: AtomicUsize,
}

impl Breakers {
    /// Breakers with the given tuning.
    pub fn new(config: BreakerConfig) -> Self {
        Breakers {
            config,
            inner: Arc::default(),
            tracked: AtomicUsize::new(0),
        }
    }

    /// The tuning in use.
    pub fn config(&self) -> &BreakerConfig {
        &self.config
    }

    /// Decides whether a request may go to `endpoint` at `now`. An open breaker whose
    /// `open_for` has elapsed turns half-open here and hands out probe slots.
    pub fn admit(&self, endpoint: &str, now: Instant) -> Admission {
        if self.tracked.load(Ordering::Acquire) == 0 {
            return Admission::Closed;
        }
        let mut inner = self.inner.lock();
        let Inner { map, epoch } = &mut *inner;
        let Some(e) = map.get_mut(endpoint) else {
            return Admission::Closed;
        };
        if let Mode::Open { until } = e.mode {
            if now < until {
                return Admission::Open;
            }
            *epoch += 1;
            (e.mode, e.probes, e.epoch) = (Mode::HalfOpen, 0, *epoch);
        }
        match e.mode {
            Mode::Closed => Admission::Closed,
            Mode::HalfOpen if e.probes < self.config.half_open_probes.max(1) => {
                e.probes += 1;
                Admission::Probe(ProbeGuard {
                    inner: Arc::clone(&self.inner),
                    endpoint: endpoint.to_owned(),
                    epoch: e.epoch,
                })
            }
            _ => Admission::Open,
        }
    }

    /// Records a request's outcome. Closed: a success resets the consecutive count, a failure
    /// adds one and the `failure_threshold`-th opens the breaker until `now + open_for`.
    /// Half-open: a success closes it, a failure reopens it for another `open_for` (outcomes
    /// arriving then are taken as probe results). Open: ignored (they come from requests sent
    /// before it opened; only probes decide).
    pub fn record(&self, endpoint: &str, outcome: Outcome, now: Instant) {
        if outcome == Outcome::Success && self.tracked.load(Ordering::Acquire) == 0 {
            return;
        }
        let mut inner = self.inner.lock();
        let Inner { map, epoch } = &mut *inner;
        let e = match (map.get_mut(endpoint), outcome) {
            (Some(e), _) => e,
            (None, Outcome::Success) => return,
            (None, Outcome::Failure) => {
                self.tracked.store(map.len() + 1, Ordering::Release);
                map.entry(endpoint.to_owned()).or_default()
            }
        };
        let before = state_of(e.mode);
        let half_open = matches!(e.mode, Mode::HalfOpen);
        match (e.mode, outcome) {
            (Mode::Open { .. }, _) => return,
            (_, Outcome::Success) => {
                e.mode = Mode::Closed;
                e.failures = 0;
            }
            (_, Outcome::Failure) => {
                e.failures = e.failures.saturating_add(1);
                if half_open || e.failures >= self.config.failure_threshold.max(1) {
                    e.mode = Mode::Open {
                        until: now + self.config.open_for,
                    };
                }
            }
        }
        if half_open {
            *epoch += 1;
            (e.probes, e.epoch) = (0, *epoch);
        }
        let after = state_of(e.mode);
        let healthy = after == BreakerState::Closed && e.failures == 0;
        if before != after {
            match after {
                BreakerState::Open => tracing::warn!(
                    endpoint,
                    failures = e.failures,
                    open_ms = self.config.open_for.as_millis() as u64,
                    "circuit breaker opened"
                ),
                _ => tracing::info!(endpoint, state = ?after, "circuit breaker changed"),
            }
        }
        if healthy {
            // Nothing on record: forget the entry, so a healthy fleet takes no lock.
            map.remove(endpoint);
            self.tracked.store(map.len(), Ordering::Release);
        }
    }

    /// True when [`admit`](Self::admit) would refuse `endpoint` at `now` (open and not yet
    /// due, or half-open with every probe slot taken): exclude it from candidates.
    pub fn is_open(&self, endpoint: &str, now: Instant) -> bool {
        if self.tracked.load(Ordering::Acquire) == 0 {
            return false;
        }
        let inner = self.inner.lock();
        inner.map.get(endpoint).is_some_and(|e| match e.mode {
            Mode::Closed => false,
            Mode::Open { until } => now < until,
            Mode::HalfOpen => e.probes >= self.config.half_open_probes.max(1),
        })
    }

    /// The stored state of `endpoint` (`Closed` when never seen).
    pub fn state(&self, endpoint: &str) -> BreakerState {
        let inner = self.inner.lock();
        inner
            .map
            .get(endpoint)
            .map_or(BreakerState::Closed, |e| state_of(e.mode))
    }

    /// Every tracked endpoint: (name, state, consecutive failures, probes in flight), by name.
    pub fn snapshot(&self) -> Vec<(String, BreakerState, u32, u32)> {
        let inner = self.inner.lock();
        let mut v: Vec<_> = (inner.map.iter())
            .map(|(n, e)| (n.clone(), state_of(e.mode), e.failures, e.probes))
            .collect();
        v.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        v
    }

    /// Drops the state of every endpoint for which `keep` is false (endpoints that left).
    /// Outstanding probe guards of a dropped endpoint then free nothing.
    pub fn forget(&self, keep: impl Fn(&str) -> bool) {
        let mut inner = self.inner.lock();
        inner.map.retain(|name, _| keep(name));
        self.tracked.store(inner.map.len(), Ordering::Release);
    }
}

fn state_of(mode: Mode) -> BreakerState {
    match mode {
        Mode::Closed => BreakerState::Closed,
        Mode::Open { .. } => BreakerState::Open,
        Mode::HalfOpen => BreakerState::HalfOpen,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EP: &str = "pod-a";

    /// `Instant`s `ms` after a fixed origin: time is an argument, so no clock is needed.
    fn clock() -> impl Fn(u64) -> Instant {
        let origin = Instant::now();
        move |ms| origin + Duration::from_millis(ms)
    }

    fn breakers(probes: u32) -> Breakers {
        Breakers::new(BreakerConfig {
            half_open_probes: probes,
            ..BreakerConfig::default()
        })
    }

    fn fail(b: &Breakers, n: u32, now: Instant) {
        (0..n).for_each(|_| b.record(EP, Outcome::Failure, now));
    }

    fn row(b: &Breakers) -> (BreakerState, u32, u32) {
        let s = b
            .snapshot()
            .into_iter()
            .find(|r| r.0 == EP)
            .expect("tracked");
        (s.1, s.2, s.3)
    }

    /// Opens the breaker at 0 ms; it is due for probing at 5000 ms.
    fn opened(probes: u32) -> (Breakers, impl Fn(u64) -> Instant) {
        let (b, t) = (breakers(probes), clock());
        fail(&b, 5, t(0));
        (b, t)
    }

    #[test]
    fn defaults() {
        let c = BreakerConfig::default();
        assert_eq!((c.failure_threshold, c.half_open_probes), (5, 1));
        assert_eq!(c.open_for, Duration::from_secs(5));
        fn send_sync<T: Send + Sync>() {}
        send_sync::<Breakers>();
        send_sync::<ProbeGuard>();
    }

    #[test]
    fn threshold_minus_one_stays_closed_threshold_opens() {
        let (b, t) = (breakers(1), clock());
        assert!(matches!(b.admit(EP, t(0)), Admission::Closed));
        assert!(b.snapshot().is_empty(), "unknown endpoints cost nothing");
        fail(&b, 4, t(0));
        assert_eq!(row(&b), (BreakerState::Closed, 4, 0));
        assert!(matches!(b.admit(EP, t(0)), Admission::Closed));
        assert!(!b.is_open(EP, t(0)));
        fail(&b, 1, t(0));
        assert_eq!(row(&b), (BreakerState::Open, 5, 0));
        assert!(matches!(b.admit(EP, t(0)), Admission::Open));
        assert!(b.is_open(EP, t(0)));
        assert_eq!(b.state("other"), BreakerState::Closed);
    }

    #[test]
    fn open_rejects_until_open_for_elapses() {
        let (b, t) = opened(1);
        assert!(matches!(b.admit(EP, t(4_999)), Admission::Open));
        assert!(b.is_open(EP, t(4_999)));
        assert!(!b.is_open(EP, t(5_000)));
        assert_eq!(b.state(EP), BreakerState::Open);
        assert!(matches!(b.admit(EP, t(5_000)), Admission::Probe(_)));
        assert_eq!(b.state(EP), BreakerState::HalfOpen);
    }

    #[test]
    fn half_open_admits_exactly_the_probe_budget() {
        let (b, t) = opened(2);
        let p1 = b.admit(EP, t(5_000));
        let p2 = b.admit(EP, t(5_001));
        assert!(matches!(
            (&p1, &p2),
            (Admission::Probe(_), Admission::Probe(_))
        ));
        assert_eq!(row(&b), (BreakerState::HalfOpen, 5, 2));
        assert!(matches!(b.admit(EP, t(5_002)), Admission::Open));
        assert!(b.is_open(EP, t(5_002)));
        drop(p1); // no outcome recorded: the slot is freed
        assert_eq!(row(&b), (BreakerState::HalfOpen, 5, 1));
        assert!(!b.is_open(EP, t(5_003)));
        let p3 = b.admit(EP, t(5_003));
        assert!(p3.admitted());
        assert!(!b.admit(EP, t(5_004)).admitted());
    }

    #[test]
    fn failed_probe_reopens_for_a_full_open_for() {
        let (b, t) = opened(1);
        let probe = b.admit(EP, t(6_000));
        b.record(EP, Outcome::Failure, t(6_500));
        drop(probe); // the half-open period ended: frees nothing
        assert_eq!(row(&b), (BreakerState::Open, 6, 0));
        assert!(matches!(b.admit(EP, t(11_499)), Admission::Open));
        assert!(matches!(b.admit(EP, t(11_500)), Admission::Probe(_)));
    }

    #[test]
    fn successful_probe_closes_and_resets() {
        let (b, t) = opened(1);
        let probe = b.admit(EP, t(5_000));
        b.record(EP, Outcome::Success, t(5_100));
        drop(probe);
        assert_eq!(b.state(EP), BreakerState::Closed);
        assert!(
            b.snapshot().is_empty(),
            "closed with nothing on record: untracked"
        );
        assert!(matches!(b.admit(EP, t(5_100)), Admission::Closed));
        fail(&b, 4, t(5_200));
        assert_eq!(
            b.state(EP),
            BreakerState::Closed,
            "a fresh count of 5 is needed"
        );
    }

    #[test]
    fn outcomes_while_open_are_ignored() {
        let (b, t) = opened(1);
        b.record(EP, Outcome::Success, t(1_000));
        b.record(EP, Outcome::Failure, t(4_000)); // would extend to 9000 if counted
        assert_eq!(row(&b), (BreakerState::Open, 5, 0));
        assert!(b.admit(EP, t(5_000)).admitted());
    }

    #[test]
    fn a_success_in_between_resets_the_count() {
        let (b, t) = (breakers(1), clock());
        fail(&b, 4, t(0));
        b.record(EP, Outcome::Success, t(1));
        assert!(b.snapshot().is_empty(), "a healthy endpoint is not tracked");
        assert_eq!(b.state(EP), BreakerState::Closed);
        fail(&b, 4, t(2));
        assert_eq!(b.state(EP), BreakerState::Closed);
        fail(&b, 1, t(3));
        assert_eq!(b.state(EP), BreakerState::Open);
    }

    #[test]
    fn forget_drops_endpoints_that_left() {
        let (b, t) = opened(1);
        fail(&b, 1, t(0));
        b.record("pod-b", Outcome::Failure, t(0));
        let probe = b.admit(EP, t(5_000));
        b.forget(|name| name == "pod-b");
        drop(probe);
        let names: Vec<_> = b.snapshot().into_iter().map(|r| r.0).collect();
        assert_eq!(names, ["pod-b"]);
        assert_eq!(b.state(EP), BreakerState::Closed);
        assert!(matches!(b.admit(EP, t(5_000)), Admission::Closed));
    }
}
