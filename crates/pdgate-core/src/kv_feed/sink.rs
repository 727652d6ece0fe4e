//! Applying one precise index's batches by endpoint name, holding back those that arrive
//! before the endpoint's model is known.
//!
//! A prompt's first block is keyed by the endpoint's model (its first `/v1/models` id, read
//! by the scraper), so a batch applied before the first scrape would skip its first blocks
//! as `model_unknown` and every child as an orphan. A new subscription often starts before
//! that scrape, and a late subscriber's replayed history arrives with its first batch: such
//! batches wait here, in order, and are applied as soon as the model is known (at the next
//! batch or the feed's once-a-second tick). At most [`PENDING_BATCHES`] wait per endpoint;
//! past that the waiting ones are dropped (logged): the index then lacks those blocks,
//! which is incomplete, not wrong.

use parking_lot::Mutex;
use pdgate_fleet::EndpointRegistry;
use pdgate_kvevents::{ClearReason, EventBatch, KvEventSink};
use pdgate_scheduler::monotonic_ms;
use pdgate_scheduler::prefix::PreciseIndex;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

/// Batches held per endpoint while its model is unknown.
pub const PENDING_BATCHES: usize = 1024;

/// The sink of one index.
pub(super) struct IndexSink {
    pub index: Arc<PreciseIndex>,
    pub registry: Arc<EndpointRegistry>,
    pending: Mutex<HashMap<String, VecDeque<EventBatch>>>,
}

impl IndexSink {
    pub fn new(index: Arc<PreciseIndex>, registry: Arc<EndpointRegistry>) -> Self {
        IndexSink {
            index,
            registry,
            pending: Mutex::default(),
        }
    }

    /// Applies the held batches of every endpoint whose model is now known.
    pub fn flush(&self) {
        let mut pending = self.pending.lock();
        if pending.is_empty() {
            return;
        }
        let snap = self.registry.snapshot();
        pending.retain(|name, held| {
            let Some(state) = snap.get(name) else {
                return false;
            };
            if state.load.models().is_none() {
                return true;
            }
            for b in held.drain(..) {
                self.index.apply(state, &b, monotonic_ms());
            }
            false
        });
    }

    /// Batches held for `endpoint`.
    #[cfg(test)]
    pub fn held(&self, endpoint: &str) -> usize {
        self.pending.lock().get(endpoint).map_or(0, VecDeque::len)
    }
}

impl KvEventSink for IndexSink {
    fn apply(&self, endpoint: &str, batch: &EventBatch) {
        let snap = self.registry.snapshot();
        let Some(state) = snap.get(endpoint) else {
            return;
        };
        let mut pending = self.pending.lock();
        if state.load.models().is_none() {
            let held = pending.entry(endpoint.to_string()).or_default();
            if held.len() == PENDING_BATCHES {
                tracing::warn!(
                    endpoint,
                    batches = held.len(),
                    "KV events: the endpoint's model is still unknown; its held batches are dropped"
                );
                held.clear();
            }
            held.push_back(batch.clone());
            return;
        }
        if let Some(held) = pending.remove(endpoint) {
            for b in &held {
                self.index.apply(state, b, monotonic_ms());
            }
        }
        drop(pending);
        self.index.apply(state, batch, monotonic_ms());
    }

    fn clear(&self, endpoint: &str, reason: ClearReason) {
        self.pending.lock().remove(endpoint);
        if self.index.clear_endpoint(endpoint) {
            tracing::info!(
                endpoint,
                reason = reason.as_str(),
                "KV-event index entries of endpoint cleared"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pdgate_api::kv_events::{BlockStored, KvEvent};
    use pdgate_scheduler::prefix::precise::{KvEventsConfig, PreciseSettings};
    use pdgate_scheduler::prefix::BlockHasher;
    use pdgate_scheduler::Endpoint;

    fn stored(
        seq: u64,
        first: u64,
        parent: Option<u64>,
        tokens: std::ops::Range<u32>,
    ) -> EventBatch {
        let tokens: Vec<u32> = tokens.collect();
        EventBatch {
            seq,
            ts: 0.0,
            dp_rank: None,
            events: vec![KvEvent::BlockStored(BlockStored {
                block_hashes: (first..first + tokens.len() as u64 / 16).collect(),
                parent_block_hash: parent,
                token_ids: tokens,
                block_size: 16,
                ..BlockStored::default()
            })],
        }
    }

    /// Batches before the first scrape (model unknown) wait, in order, and are applied once
    /// the model is known: at the next batch, or at a flush; a clear drops them.
    #[test]
    fn batches_wait_for_the_model_then_apply_in_order() {
        let registry = Arc::new(EndpointRegistry::default());
        registry.apply(vec![Endpoint::new("e0", "127.0.0.1:1", Default::default())]);
        let index = Arc::new(PreciseIndex::new(
            0,
            PreciseSettings {
                hasher: BlockHasher {
                    block_tokens: 16,
                    max_blocks: 1024,
                },
                capacity_per_endpoint: 1024,
                speculative_ttl_ms: None,
                events: KvEventsConfig::default(),
            },
        ));
        let sink = IndexSink::new(index.clone(), registry.clone());
        // A prompt's 2 first blocks, then 1 child block of it.
        sink.apply("e0", &stored(0, 1, None, 0..32));
        sink.apply("e0", &stored(1, 3, Some(2), 32..48));
        assert_eq!((sink.held("e0"), index.blocks_held("e0")), (2, 0));
        let load = registry.snapshot().get("e0").unwrap().load.clone();
        load.set_models(vec!["m".into()]);
        sink.flush();
        assert_eq!((sink.held("e0"), index.blocks_held("e0")), (0, 3));
        let c = index.counts();
        assert_eq!((c.model_unknown, c.orphans), (0, 0));
        // Held then cleared: nothing applied.
        let registry2 = Arc::new(EndpointRegistry::default());
        registry2.apply(vec![Endpoint::new("e1", "127.0.0.1:2", Default::default())]);
        let sink2 = IndexSink::new(index.clone(), registry2);
        sink2.apply("e1", &stored(0, 1, None, 0..32));
        sink2.clear("e1", ClearReason::Restart);
        assert_eq!(sink2.held("e1"), 0);
    }
}
