//! The dispatcher: one task running a cycle on every arrival and every [`CYCLE`] while
//! anything is queued — expiring what waited too long, dispatching while the pool is below
//! the usage limit, evicting sheddable requests while the highest band stays blocked.

use super::{FlowController, CYCLE, GAUGE_REFRESH, SWEEP_MS};
use pdgate_scheduler::flow::Outcome;
use std::sync::atomic::Ordering;
use std::sync::Arc;

impl FlowController {
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
}
