//! Admission before scheduling: llm-d's flow control (`featureGates: [flowControl]`) over
//! the pure queues of [`pdgate_scheduler::flow`], or, without the gate, llm-d's legacy
//! admission (sheddable requests refused while the pool is saturated).
//!
//! With the gate, [`FlowController::admit`] lets a request through at once when nothing is
//! queued and the pool's saturation is below the usage limit; otherwise it waits in its band
//! until the dispatcher (one task, a cycle on every arrival and every 1 ms while anything is
//! queued, as llm-d's processor) lets it go, its TTL runs out, or the client leaves. A
//! dispatched request counts as *pending* load until it has booked an endpoint (the
//! [`Admission`] guard), so a burst of dispatches sees itself. Outcomes map to statuses in
//! [`pdgate_scheduler::flow::Outcome::client_answer`]. With `enableEviction`, each dispatched
//! request also gets an [`InFlight`] ticket for the life of its answer, and a cycle whose
//! highest queued band stays blocked may evict sheddable ones ([`crate::flow_eviction`]).
//! When a band uses `program-aware-fairness`, each dispatched request also gets a
//! [`ProgramTicket`] that reports its cost when its answer ends ([`crate::flow_programs`]).

use crate::flow_eviction::{Evictions, InFlight};
pub use crate::flow_key::{flow_key, priority, FlowKey, Objectives};
use crate::flow_metrics::FlowMetrics;
use crate::flow_programs::{ProgramMetrics, ProgramTicket};
use parking_lot::Mutex;
use pdgate_fleet::EndpointRegistry;
use pdgate_scheduler::flow::usage_limit::Limiter;
use pdgate_scheduler::flow::{detector, FlowSettings, Item, Outcome, Queues};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{oneshot, Notify};
use tokio::time::Instant;

/// Dispatch cycle period while requests are queued (llm-d: 1 ms).
pub const CYCLE: Duration = Duration::from_millis(1);
/// Period of the saturation gauges' refresh while nothing is queued.
pub const GAUGE_REFRESH: Duration = Duration::from_secs(1);
/// TTL sweep period (llm-d: 1 s; finer here, the sweep is cheap).
pub const SWEEP_MS: u64 = 50;

struct Waiter {
    tx: oneshot::Sender<Outcome>,
    enqueued: Instant,
    priority: i32,
}

struct Inner {
    queues: Queues,
    waiters: HashMap<u64, Waiter>,
    next_id: u64,
    pool_empty: bool,
    /// When `pool_empty` last changed, ms since start.
    regime_since_ms: u64,
    last_sweep_ms: u64,
    /// The usage-limit gate: per-band dispatch ceilings and the policy's state.
    limiter: Limiter,
}

/// The flow controller (see the module docs). Shared by every server thread.
pub struct FlowController {
    settings: FlowSettings,
    registry: Arc<EndpointRegistry>,
    metrics: FlowMetrics,
    inner: Mutex<Inner>,
    /// Dispatched requests that have not booked an endpoint yet.
    pending: AtomicU32,
    /// Set by [`Self::shutdown`]; read on every request without the lock.
    shutting_down: AtomicBool,
    wake: Notify,
    start: Instant,
    /// With `enableEviction` (and the gate): the dispatched requests that can be evicted.
    evictions: Option<Arc<Evictions>>,
    /// With a program-aware band (and the gate): its gauges.
    programs: Option<ProgramMetrics>,
}

/// Held from admission until the request has booked its endpoint (drop it after
/// scheduling): until then the request counts as pending load.
pub struct Admission {
    ctl: Option<Arc<FlowController>>,
    ticket: Option<InFlight>,
    program: Option<ProgramTicket>,
}

impl Admission {
    /// The request's eviction ticket (with `enableEviction`): keep it with the answer.
    pub fn take_ticket(&mut self) -> Option<InFlight> {
        self.ticket.take()
    }

    /// The request's program ticket (with a program-aware band): keep it with the answer
    /// ([`crate::flow_programs::metered`]).
    pub fn take_program(&mut self) -> Option<ProgramTicket> {
        self.program.take()
    }
}

impl Drop for Admission {
    fn drop(&mut self) {
        if let Some(c) = self.ctl.take() {
            c.pending.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// Removes a queued request whose client went away (the waiting future was dropped).
struct Queued {
    ctl: Arc<FlowController>,
    id: u64,
    rx: Option<oneshot::Receiver<Outcome>>,
}

impl Drop for Queued {
    fn drop(&mut self) {
        let Some(mut rx) = self.rx.take() else { return };
        let mut inner = self.ctl.inner.lock();
        if let Some(item) = inner.queues.remove(self.id) {
            let w = inner.waiters.remove(&self.id);
            self.ctl.finished(
                &item,
                w.map(|w| w.enqueued),
                Outcome::EvictedContextCancelled,
            );
            self.ctl.gauges(&inner.queues);
        } else if let Ok(Outcome::Dispatched) = rx.try_recv() {
            // Dispatched just as the client left: nobody will book, so no pending load.
            self.ctl.pending.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

impl FlowController {
    /// A controller for `settings`, bands for every priority in `objectives`.
    pub fn new(
        settings: FlowSettings,
        objectives: &Objectives,
        registry: Arc<EndpointRegistry>,
        registry_metrics: &prometheus::Registry,
    ) -> Arc<FlowController> {
        for w in &settings.warnings {
            tracing::warn!("{w}");
        }
        let queues = Queues::new(&settings.control, objectives.0.values().copied());
        let metrics = FlowMetrics::new(registry_metrics);
        let evictions = (settings.gate && settings.control.enable_eviction)
            .then(|| Evictions::new(metrics.clone()));
        let programs = (settings.gate && queues.program_aware())
            .then(|| ProgramMetrics::new(registry_metrics));
        Arc::new(FlowController {
            metrics,
            evictions,
            programs,
            inner: Mutex::new(Inner {
                queues,
                waiters: HashMap::new(),
                next_id: 1,
                pool_empty: false,
                regime_since_ms: 0,
                last_sweep_ms: 0,
                limiter: Limiter::new(settings.control.usage_limit),
            }),
            settings,
            registry,
            pending: AtomicU32::new(0),
            shutting_down: AtomicBool::new(false),
            wake: Notify::new(),
            start: Instant::now(),
        })
    }

    /// True when the `flowControl` gate is on.
    pub fn gated(&self) -> bool {
        self.settings.gate
    }

    fn now_ms(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }

    fn saturation(&self) -> f64 {
        let snap = self.registry.snapshot();
        let now = pdgate_scheduler::monotonic_ms();
        let s = detector::pool_saturation(
            self.settings.detector.as_ref(),
            &snap.endpoints,
            self.pending.load(Ordering::Acquire),
            now,
        );
        let live = schedulable(&snap);
        self.metrics
            .stale
            .with_label_values(&[self.settings.detector.type_name()])
            .set(self.settings.detector.stale(&live, now) as i64);
        let g = &self.metrics.saturation;
        g.with_label_values(&["effective"]).set(s.effective);
        if let Some(p) = s.prefill {
            g.with_label_values(&["prefill"]).set(p);
        }
        if let Some(d) = s.decode {
            g.with_label_values(&["decode"]).set(d);
        }
        s.effective
    }

    /// Up to when the detector's view of the schedulable endpoints is current (ms,
    /// [`pdgate_scheduler::monotonic_ms`]).
    fn gauges_as_of(&self) -> u64 {
        let snap = self.registry.snapshot();
        let now = pdgate_scheduler::monotonic_ms();
        self.settings
            .detector
            .gauges_as_of(&schedulable(&snap), now)
    }

    fn finished(&self, item: &Item, enqueued: Option<Instant>, outcome: Outcome) {
        let p = item.priority.to_string();
        let labels = [outcome.as_str(), p.as_str()];
        self.metrics.requests.with_label_values(&labels).inc();
        if let Some(t) = enqueued {
            self.metrics
                .queue_duration
                .with_label_values(&labels)
                .observe(t.elapsed().as_secs_f64());
        }
        if outcome != Outcome::Dispatched
            && crate::log_limit::allow(&crate::log_limit::FLOW_CONTROL)
        {
            tracing::info!(
                outcome = outcome.as_str(),
                priority = item.priority,
                flow = %item.flow,
                "flow control dropped a request"
            );
        }
    }

    fn gauges(&self, q: &Queues) {
        for (p, len, bytes) in q.bands() {
            let p = p.to_string();
            self.metrics
                .queue_size
                .with_label_values(&[&p])
                .set(len as i64);
            self.metrics
                .queue_bytes
                .with_label_values(&[&p])
                .set(bytes as i64);
        }
    }

    /// Legacy admission (gate off): a sheddable request (priority < 0) is refused while the
    /// pool is saturated (llm-d `LegacyAdmissionController`); others always pass.
    ///
    /// Errors: `Outcome::RejectedCapacity` (429 `rejected-saturated`); after
    /// [`Self::shutdown`], `Outcome::RejectedOther` for every request (503).
    pub fn legacy_check(&self, priority: i32) -> Result<(), Outcome> {
        if self.is_shutting_down() {
            return Err(Outcome::RejectedOther);
        }
        if !pdgate_scheduler::flow::sheddable(priority) || self.saturation() < 1.0 {
            return Ok(());
        }
        self.metrics
            .sheddable_rejected
            .with_label_values(&[&priority.to_string()])
            .inc();
        Err(Outcome::RejectedCapacity)
    }

    /// Admits `key` (gate on): at once, or after waiting in its band.
    ///
    /// Errors: the outcome that ended the wait (capacity, TTL, no endpoints, shutdown);
    /// a client that leaves simply drops the future (counted `EvictedContextCancelled`).
    pub async fn admit(self: &Arc<Self>, key: FlowKey) -> Result<Admission, Outcome> {
        let queued_item: Item;
        let (id, rx, band) = {
            let mut inner = self.inner.lock();
            let item = Item {
                id: inner.next_id,
                priority: inner.queues.band_priority(key.priority),
                flow: key.flow,
                bytes: key.bytes,
                enqueued_ms: self.now_ms(),
                slo_ttft_ms: key.slo_ttft_ms,
            };
            inner.next_id += 1;
            if self.is_shutting_down() {
                self.finished(&item, None, Outcome::RejectedOther);
                return Err(Outcome::RejectedOther);
            }
            if inner.queues.is_empty() && {
                let (s, g) = (self.saturation(), &mut *inner);
                g.limiter.open(s, &g.queues, Some(item.priority))
            } {
                self.pending.fetch_add(1, Ordering::AcqRel);
                self.finished(&item, Some(Instant::now()), Outcome::Dispatched);
                let program = self.program_dispatched(&mut inner.queues, &item);
                return Ok(self.admission(item.priority, program));
            }
            let id = item.id;
            let priority = item.priority;
            queued_item = item.clone();
            if inner.queues.enqueue(item.clone()).is_err() {
                let snap = self.registry.snapshot();
                let outcome = match snap.endpoints.iter().any(|e| e.endpoint.schedulable()) {
                    true => Outcome::RejectedCapacity,
                    false => Outcome::RejectedNoEndpoints,
                };
                self.finished(&item, None, outcome);
                return Err(outcome);
            }
            let (tx, rx) = oneshot::channel();
            inner.waiters.insert(
                id,
                Waiter {
                    tx,
                    enqueued: Instant::now(),
                    priority,
                },
            );
            self.gauges(&inner.queues);
            (id, rx, priority)
        };
        self.wake.notify_one();
        let mut queued = Queued {
            ctl: self.clone(),
            id,
            rx: Some(rx),
        };
        let outcome = match queued.rx.as_mut() {
            Some(rx) => rx.await.unwrap_or(Outcome::EvictedOther),
            None => Outcome::EvictedOther,
        };
        queued.rx = None; // finalized: nothing for the guard to undo
        match outcome {
            Outcome::Dispatched => {
                let program = match self.programs {
                    Some(_) => self.program_dispatched(&mut self.inner.lock().queues, &queued_item),
                    None => None,
                };
                Ok(self.admission(band, program))
            }
            other => Err(other),
        }
    }

    /// The guard of a request of `priority` just dispatched (pending load counted by the
    /// caller), with its eviction ticket when eviction is on and its `program` ticket.
    fn admission(self: &Arc<Self>, priority: i32, program: Option<ProgramTicket>) -> Admission {
        Admission {
            ctl: Some(self.clone()),
            ticket: self.evictions.as_ref().map(|e| e.track(priority)),
            program,
        }
    }

    /// Records the dispatch of `item` in the program ledgers (with a program-aware band):
    /// its program in flight, its queue wait; the ticket that reports its completion.
    fn program_dispatched(
        self: &Arc<Self>,
        queues: &mut Queues,
        item: &Item,
    ) -> Option<ProgramTicket> {
        let m = self.programs.as_ref()?;
        let now = self.now_ms();
        let waited = now.saturating_sub(item.enqueued_ms);
        queues.record_dispatch(&item.flow, item.priority, waited, now);
        if let Some(p) = queues.program(&item.flow) {
            m.avg_wait
                .with_label_values(&[&*item.flow])
                .set(p.avg_wait_ms);
        }
        if let Some(f) = queues.fairness_index() {
            m.fairness.set(f);
        }
        Some(ProgramTicket::new(self.clone(), item.flow.clone()))
    }

    /// A program-aware request of `program` ended, costing `cost` weighted tokens (`None`:
    /// its usage is unknown).
    pub(crate) fn program_completed(&self, program: &Arc<str>, cost: Option<f64>) {
        let Some(m) = &self.programs else { return };
        let now = self.now_ms();
        let service = self
            .inner
            .lock()
            .queues
            .record_completion(program, cost, now);
        if let Some(s) = service {
            m.service.with_label_values(&[&**program]).set(s);
        }
    }

    /// One dispatch cycle: expire what waited too long, then dispatch while the pool is
    /// below the usage limit.
    fn cycle(&self) {
        let now = self.now_ms();
        let snap = self.registry.snapshot();
        let empty = !snap.endpoints.iter().any(|e| e.endpoint.schedulable());
        let mut inner = self.inner.lock();
        let inner = &mut *inner;
        if empty != inner.pool_empty {
            inner.pool_empty = empty;
            inner.regime_since_ms = now;
        }
        if now.saturating_sub(inner.last_sweep_ms) >= SWEEP_MS {
            inner.last_sweep_ms = now;
            let c = &self.settings.control;
            let outcome = match empty {
                true => Outcome::EvictedNoEndpoints,
                false => Outcome::EvictedTtl,
            };
            let budget =
                |b: &pdgate_scheduler::flow::BandConfig| c.ttl(b, empty).as_millis() as u64;
            for item in inner.queues.expire(now, budget, inner.regime_since_ms) {
                if let Some(w) = inner.waiters.remove(&item.id) {
                    self.finished(&item, Some(w.enqueued), outcome);
                    let _ = w.tx.send(outcome);
                }
            }
        }
        if let Some(m) = &self.programs {
            for gone in inner.queues.sweep_programs(now) {
                m.forget(&gone);
            }
        }
        while !inner.queues.is_empty() && inner.limiter.open(self.saturation(), &inner.queues, None)
        {
            let Some(item) = inner.queues.pop_next(now) else {
                break;
            };
            let Some(w) = inner.waiters.remove(&item.id) else {
                continue;
            };
            debug_assert_eq!(w.priority, item.priority);
            self.pending.fetch_add(1, Ordering::AcqRel);
            self.finished(&item, Some(w.enqueued), Outcome::Dispatched);
            if w.tx.send(Outcome::Dispatched).is_err() {
                self.pending.fetch_sub(1, Ordering::AcqRel);
            }
        }
        // Still blocked with requests queued: maybe evict lower, sheddable ones.
        if let Some(ev) = &self.evictions {
            if !inner.queues.is_empty() {
                let saturation = self.saturation();
                if let Some((demand, limit)) = inner.limiter.demand(saturation, &inner.queues) {
                    ev.reclaim(saturation, limit, demand, self.gauges_as_of());
                }
            }
        }
        self.gauges(&inner.queues);
    }

    /// Runs the dispatcher until the task is aborted: a cycle on every arrival and every
    /// [`CYCLE`] while anything is queued; idle (or without the gate), the saturation gauges
    /// are refreshed every [`GAUGE_REFRESH`].
    pub async fn run(self: Arc<Self>) {
        loop {
            let idle = self.inner.lock().queues.is_empty();
            let wait = if idle { GAUGE_REFRESH } else { CYCLE };
            tokio::select! {
                _ = self.wake.notified() => {}
                _ = tokio::time::sleep(wait) => {}
            }
            if self.settings.gate {
                self.cycle();
            }
            if idle {
                self.saturation();
                if let Some(ev) = &self.evictions {
                    ev.sweep(self.gauges_as_of());
                }
            }
        }
    }

    /// Refuses new requests and ends every queued one with `RejectedOther`/`EvictedOther`
    /// (503 `rejected-shutting-down`).
    pub fn shutdown(&self) {
        let mut inner = self.inner.lock();
        self.shutting_down.store(true, Ordering::Release);
        for item in inner.queues.drain() {
            if let Some(w) = inner.waiters.remove(&item.id) {
                self.finished(&item, Some(w.enqueued), Outcome::EvictedOther);
                let _ = w.tx.send(Outcome::EvictedOther);
            }
        }
        self.gauges(&inner.queues);
    }

    /// True once [`Self::shutdown`] was called: new requests are refused 503 and `/health`
    /// answers not ready, while running ones finish.
    pub fn is_shutting_down(&self) -> bool {
        self.shutting_down.load(Ordering::Acquire)
    }

    /// Requests queued now (tests, `/health` detail).
    pub fn queued(&self) -> u64 {
        self.inner.lock().queues.len()
    }
}

/// The endpoints of `snap` that can take requests (what the detectors read).
fn schedulable(snap: &pdgate_scheduler::Snapshot) -> Vec<&Arc<pdgate_scheduler::EndpointState>> {
    snap.endpoints
        .iter()
        .filter(|e| e.endpoint.schedulable())
        .collect()
}

#[cfg(test)]
#[path = "flow_control_tests.rs"]
mod tests;
