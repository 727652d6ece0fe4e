//! What the flow controller records of its queues: each request's outcome (counted, timed,
//! a dropped one logged under the rate limit) and the per-band queue gauges.

use super::FlowController;
use pdgate_scheduler::flow::{Item, Outcome, Queues};
use tokio::time::Instant;

impl FlowController {
    /// Records how `item` left its queue (`enqueued`: when it entered one, for the wait
    /// histogram).
    pub(super) fn finished(&self, item: &Item, enqueued: Option<Instant>, outcome: Outcome) {
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

    /// Sets each band's queue size and bytes gauges from `q`.
    pub(super) fn gauges(&self, q: &Queues) {
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
}
