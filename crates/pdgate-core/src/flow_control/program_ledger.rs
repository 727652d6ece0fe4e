//! The program ledgers of a `program-aware-fairness` band, kept by the flow controller: each
//! dispatch (its program in flight, its queue wait) and each completion (its cost), with the
//! gauges they move.

use super::FlowController;
use crate::flow_programs::ProgramTicket;
use pdgate_scheduler::flow::{Item, Queues};
use std::sync::Arc;

impl FlowController {
    /// Records the dispatch of `item` in the program ledgers (with a program-aware band):
    /// its program in flight, its queue wait; the ticket that reports its completion.
    pub(super) fn program_dispatched(
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
}
