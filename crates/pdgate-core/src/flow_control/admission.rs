//! Admission: the legacy check (gate off), [`FlowController::admit`] (gate on: at once or
//! after waiting in a band), and the guards that keep its accounting right — [`Admission`]
//! (pending load until the request books an endpoint) and `Queued` (a waiting request whose
//! client went away leaves its band).

use super::{FlowController, FlowKey, Waiter};
use crate::flow_eviction::InFlight;
use crate::flow_programs::ProgramTicket;
use pdgate_scheduler::flow::{Item, Outcome};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tokio::sync::oneshot;
use tokio::time::Instant;

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
}
