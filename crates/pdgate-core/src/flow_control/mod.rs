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
//! request also gets an [`InFlight`](crate::flow_eviction::InFlight) ticket for the life of its
//! answer, and a cycle whose highest queued band stays blocked may evict sheddable ones
//! ([`crate::flow_eviction`]). When a band uses `program-aware-fairness`, each dispatched
//! request also gets a [`ProgramTicket`](crate::flow_programs::ProgramTicket) that reports its
//! cost when its answer ends ([`crate::flow_programs`]).
//!
//! The controller's state and life are here; its parts: `admission` (the legacy check,
//! `admit`, the [`Admission`] guard), `dispatcher` (the cycle and its task), `saturation` (the
//! pool's saturation as the detector reads it), `queue_metrics` (outcomes and queue gauges)
//! and `program_ledger` (a program-aware band's dispatches and completions).

mod admission;
mod dispatcher;
mod program_ledger;
mod queue_metrics;
mod saturation;

use crate::flow_eviction::Evictions;
pub use crate::flow_key::{flow_key, priority, FlowKey, Objectives};
use crate::flow_metrics::FlowMetrics;
use crate::flow_programs::ProgramMetrics;
pub use admission::Admission;
use parking_lot::Mutex;
use pdgate_fleet::EndpointRegistry;
use pdgate_scheduler::flow::usage_limit::Limiter;
use pdgate_scheduler::flow::{FlowSettings, Outcome, Queues};
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

#[cfg(test)]
mod tests;
