//! The apply task: seq verdicts → sink calls (the rules are in the [module docs](super)).

use super::replay::{self, Need};
use super::SubscriberConfig;
use crate::log_limit::LogLimit;
use crate::metrics::KvEventMetrics;
use crate::seq::{SeqTracker, SeqVerdict};
use crate::sink::{ClearReason, KvEventSink};
use parking_lot::Mutex;
use pdgate_api::kv_events::EventBatch;
use std::ops::Range;
use std::sync::Arc;
use tokio::sync::mpsc;

/// What the receive task queues.
pub(crate) enum Item {
    /// A decoded message.
    Batch(EventBatch),
    /// The publisher's connection dropped.
    Disconnected,
}

struct Applier {
    config: Arc<SubscriberConfig>,
    sink: Arc<dyn KvEventSink>,
    metrics: Arc<KvEventMetrics>,
    tracker: SeqTracker,
    gap_warn: LogLimit,
    /// Over-size replies skipped by history replays.
    oversize_warn: LogLimit,
    /// False once the handle is stopped: sink calls are made under this lock, only while
    /// true.
    live: Arc<Mutex<bool>>,
}

pub(crate) async fn run(
    config: Arc<SubscriberConfig>,
    mut rx: mpsc::Receiver<Item>,
    sink: Arc<dyn KvEventSink>,
    metrics: Arc<KvEventMetrics>,
    live: Arc<Mutex<bool>>,
) {
    let mut a = Applier {
        live,
        config,
        sink,
        metrics,
        tracker: SeqTracker::new(),
        gap_warn: crate::log_limit::warn_limit(),
        oversize_warn: crate::log_limit::warn_limit(),
    };
    while let Some(item) = rx.recv().await {
        match item {
            Item::Batch(batch) => a.batch(batch).await,
            Item::Disconnected => {
                if a.tracker.last().is_some() {
                    a.clear(ClearReason::Disconnected);
                }
                a.tracker.reset();
            }
        }
    }
}

impl Applier {
    async fn batch(&mut self, batch: EventBatch) {
        match self.tracker.observe(batch.seq) {
            SeqVerdict::First if batch.seq > 0 => self.warm_start(batch.seq).await,
            SeqVerdict::First | SeqVerdict::InOrder => {}
            SeqVerdict::Restart { previous } => {
                KvEventMetrics::inc(&self.metrics.pdgate_kv_events_restarts_total);
                tracing::info!(
                    endpoint = %self.config.endpoint,
                    previous,
                    seq = batch.seq,
                    "kv-events: seq went back, engine restarted; clearing"
                );
                self.clear(ClearReason::Restart);
            }
            SeqVerdict::Gap { missing } => self.gap(missing).await,
        }
        self.apply(&batch);
    }

    /// The first batch of a stream (a new subscription, or after a reconnect) is `seq` > 0:
    /// the engine ran before we listened. With a replay socket, its buffered history
    /// `..seq` is applied first (as much of it as the engine still holds, contiguous up to
    /// `seq`), so blocks stored before the subscription are known. Without one, or if the
    /// replay fails, those blocks stay unknown (their children are orphans, skipped):
    /// nothing to clear.
    async fn warm_start(&mut self, seq: u64) {
        let Some(addr) = self.config.replay.clone() else {
            return;
        };
        let endpoint = self.config.endpoint.clone();
        match self.replay(&addr, 0..seq, Need::Tail).await {
            Ok(batches) => {
                KvEventMetrics::inc(&self.metrics.pdgate_kv_events_history_replays_total);
                tracing::info!(%endpoint, before = seq, batches, "kv-events: replayed the engine's buffered history on subscribe");
            }
            Err(e) => {
                KvEventMetrics::inc(&self.metrics.pdgate_kv_events_history_replays_failed_total);
                tracing::warn!(%endpoint, before = seq, error = %e, "kv-events: history replay on subscribe failed; starting from the live stream");
            }
        }
    }

    /// Fetches `range` from the replay socket at `addr` (as `need` requires) and applies
    /// what came back, in order; returns how many batches were applied.
    async fn replay(
        &mut self,
        addr: &str,
        range: Range<u64>,
        need: Need,
    ) -> Result<usize, replay::ReplayError> {
        let batches = replay::fetch(
            addr,
            range,
            need,
            &self.config,
            &self.metrics,
            &mut self.oversize_warn,
        )
        .await?;
        for b in &batches {
            self.apply(b);
        }
        Ok(batches.len())
    }

    /// Replays `missing` when possible, else clears.
    async fn gap(&mut self, missing: Range<u64>) {
        KvEventMetrics::inc(&self.metrics.pdgate_kv_events_seq_gaps_total);
        let endpoint = self.config.endpoint.clone();
        let Some(addr) = self.config.replay.clone() else {
            if let Some(n) = self.gap_warn.allow() {
                tracing::warn!(%endpoint, from = missing.start, to = missing.end, suppressed = n, "kv-events: seq gap and no replay socket; clearing");
            }
            self.clear(ClearReason::Gap);
            return;
        };
        KvEventMetrics::inc(&self.metrics.pdgate_kv_events_replays_requested_total);
        match self.replay(&addr, missing.clone(), Need::All).await {
            Ok(_) => {
                KvEventMetrics::inc(&self.metrics.pdgate_kv_events_replays_succeeded_total);
                tracing::info!(%endpoint, from = missing.start, to = missing.end, "kv-events: seq gap replayed");
            }
            Err(e) => {
                KvEventMetrics::inc(&self.metrics.pdgate_kv_events_replays_failed_total);
                if let Some(n) = self.gap_warn.allow() {
                    tracing::warn!(%endpoint, from = missing.start, to = missing.end, error = %e, suppressed = n, "kv-events: replay failed; clearing");
                }
                self.clear(ClearReason::Gap);
            }
        }
    }

    fn apply(&self, batch: &EventBatch) {
        let live = self.live.lock();
        if *live {
            self.sink.apply(&self.config.endpoint, batch);
            KvEventMetrics::inc(&self.metrics.pdgate_kv_events_applied_total);
        }
    }

    fn clear(&self, reason: ClearReason) {
        let live = self.live.lock();
        if *live {
            self.sink.clear(&self.config.endpoint, reason);
            KvEventMetrics::inc(&self.metrics.pdgate_kv_events_clears_total);
        }
    }
}
