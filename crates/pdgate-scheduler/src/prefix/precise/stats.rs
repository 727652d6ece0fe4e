//! Counts of what the precise index did with engine events and speculative credits, per
//! batch ([`KvEventCounts`] returned by `apply`) and since start (the index's totals), and
//! the debug dump ([`PreciseDump`]).

use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

macro_rules! counts {
    ($($(#[doc = $doc:literal])* $field:ident,)*) => {
        /// Event and credit counts (per batch, or totals since the index was built). Blocks
        /// are canonical blocks (pdgate's block size) unless the field says engine blocks.
        #[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize)]
        pub struct KvEventCounts {
            $($(#[doc = $doc])* pub $field: u64,)*
        }

        impl KvEventCounts {
            /// `(field name, value)` pairs in declaration order, for an exporter.
            pub fn fields(&self) -> Vec<(&'static str, u64)> {
                vec![$((stringify!($field), self.$field),)*]
            }
        }

        /// Totals, updated once per batch.
        #[derive(Debug, Default)]
        pub(super) struct Totals {
            $($field: AtomicU64,)*
        }

        impl Totals {
            pub(super) fn add(&self, c: &KvEventCounts) {
                $(if c.$field != 0 {
                    self.$field.fetch_add(c.$field, Relaxed);
                })*
            }

            pub(super) fn snapshot(&self) -> KvEventCounts {
                KvEventCounts { $($field: self.$field.load(Relaxed),)* }
            }
        }
    };
}

counts! {
    /// Event batches applied.
    batches,
    /// Events applied (`BlockStored`, `BlockRemoved`, `AllBlocksCleared`), skipped ones
    /// included.
    events,
    /// Engine blocks of `BlockStored` events placed in the index.
    engine_blocks_stored,
    /// Engine blocks re-announced while already held (idempotent: nothing counted twice).
    duplicates,
    /// Engine blocks removed (`BlockRemoved` of a known block, or evicted by the bound).
    engine_blocks_removed,
    /// `BlockRemoved` hashes not held for that endpoint (never stored, skipped, or evicted).
    unknown_removed,
    /// Canonical blocks newly credited to an endpoint by its events.
    blocks_stored,
    /// Canonical block credits dropped (removal, eviction, clear).
    blocks_removed,
    /// Engine blocks of a `BlockStored` whose parent is unknown for the endpoint: their
    /// position in the prompt is unknown, so they are skipped, never guessed.
    orphans,
    /// Engine blocks of hybrid-attention groups (sliding window, mamba, ...): skipped.
    skipped_hybrid,
    /// Engine blocks carrying extra keys (multimodal hashes, cache salt): skipped.
    skipped_extra_keys,
    /// Engine blocks of a LoRA adapter known by id only (no `lora_name`): skipped.
    skipped_lora,
    /// Engine blocks stored in or removed from a tier other than the GPU (`medium` `CPU`,
    /// disk: KV offloading): skipped, so that an offloaded copy's removal never drops the
    /// GPU copy's credit.
    skipped_medium,
    /// Engine blocks starting a prompt on an endpoint whose model is not known: skipped.
    model_unknown,
    /// Engine blocks of a malformed `BlockStored` (`block_size` 0, or `token_ids` not
    /// `block_hashes × block_size` long): skipped.
    malformed,
    /// Engine blocks evicted to keep the endpoint under its bound.
    evicted,
    /// Clears: `AllBlocksCleared` events and endpoints dropped (`clear_endpoint`).
    clears,
    /// Speculative credits added at pick time.
    speculative_added,
    /// Speculative credits confirmed by an event before they expired.
    speculative_confirmed,
    /// Speculative credits that expired unconfirmed (counted when swept).
    speculative_expired,
}

/// One endpoint in the debug dump.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EndpointDump {
    /// Endpoint name.
    pub name: String,
    /// Canonical blocks credited (confirmed and speculative).
    pub blocks_held: usize,
    /// Of which speculative (not confirmed yet; possibly expired but not swept).
    pub speculative: usize,
    /// Engine blocks held (the keys of removals).
    pub engine_blocks: usize,
    /// Tokens per engine block, from the last `BlockStored` seen.
    pub engine_block_size: Option<u32>,
    /// Sequence number of the last batch applied.
    pub last_seq: Option<u64>,
    /// Up to the requested number of held canonical hashes, as 16 hex digits.
    pub sample: Vec<String>,
}

/// The debug dump of a precise index.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PreciseDump {
    /// Canonical block size (tokens).
    pub block_tokens: usize,
    /// Bound per endpoint (canonical blocks).
    pub capacity_per_endpoint: usize,
    /// Speculative TTL (ms); `None` when speculative indexing is off.
    pub speculative_ttl_ms: Option<u64>,
    /// Distinct canonical blocks held by at least one endpoint.
    pub blocks: usize,
    /// Totals since start.
    pub counts: KvEventCounts,
    /// Per endpoint, by name.
    pub endpoints: Vec<EndpointDump>,
}
