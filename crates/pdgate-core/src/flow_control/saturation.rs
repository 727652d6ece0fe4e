//! The pool's saturation as the flow controller reads it: the detector over the schedulable
//! endpoints and the pending dispatches, published as gauges on every reading.

use super::FlowController;
use pdgate_scheduler::flow::detector;
use std::sync::atomic::Ordering;
use std::sync::Arc;

impl FlowController {
    /// The pool's effective saturation now (pending dispatches counted); sets the
    /// saturation gauges (`effective`, `prefill`, `decode`) and the detector's stale count.
    pub(super) fn saturation(&self) -> f64 {
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
    pub(super) fn gauges_as_of(&self) -> u64 {
        let snap = self.registry.snapshot();
        let now = pdgate_scheduler::monotonic_ms();
        self.settings
            .detector
            .gauges_as_of(&schedulable(&snap), now)
    }
}

/// The endpoints of `snap` that can take requests (what the detectors read).
fn schedulable(snap: &pdgate_scheduler::Snapshot) -> Vec<&Arc<pdgate_scheduler::EndpointState>> {
    snap.endpoints
        .iter()
        .filter(|e| e.endpoint.schedulable())
        .collect()
}
