//! The KV events of one engine step, recorded as the prefix cache changes (vLLM's
//! `BlockPool` event queue): a full block that gets a hash is `BlockStored`, an evicted cached
//! block is `BlockRemoved`, a reset is `AllBlocksCleared`. The engine loop takes them after each
//! step and publishes them as one batch, in this order.
//!
//! Source: vLLM `vllm/v1/core/block_pool.py` (`cache_full_blocks`, `_maybe_evict_cached_block`,
//! `reset_prefix_cache`) and the capture `shared/fixtures/vllm-0.32-cpu/kv-events.raw.jsonl`.

use pdgate_api::kv_events::{BlockRemoved, BlockStored, EngineHash, KvEvent};

/// Storage medium of every simulated block.
pub const MEDIUM: &str = "GPU";
/// KV-cache spec kind of the simulator's one group.
pub const SPEC_KIND: &str = "full_attention";

/// Pending events of the current step. When disabled (no `--kv-events-config`), nothing is
/// recorded, so memory does not grow without a publisher.
#[derive(Debug, Default)]
pub struct CacheEvents {
    enabled: bool,
    block_size: u32,
    pending: Vec<KvEvent>,
}

impl CacheEvents {
    /// Recording events of `block_size`-token blocks when `enabled`.
    pub fn new(enabled: bool, block_size: usize) -> Self {
        CacheEvents {
            enabled,
            block_size: block_size as u32,
            pending: Vec::new(),
        }
    }

    /// Whether events are recorded.
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// `BlockStored` of a chain of full blocks: `hashes` (first to last), the hash of the block
    /// before the first (`None` for a prompt's first block), and their tokens
    /// (`hashes.len() × block_size` ids).
    pub fn stored(&mut self, hashes: Vec<EngineHash>, parent: Option<EngineHash>, tokens: &[u32]) {
        if !self.enabled || hashes.is_empty() {
            return;
        }
        debug_assert_eq!(tokens.len(), hashes.len() * self.block_size as usize);
        self.pending.push(KvEvent::BlockStored(BlockStored {
            block_hashes: hashes,
            parent_block_hash: parent,
            token_ids: tokens.to_vec(),
            block_size: self.block_size,
            lora_id: None,
            lora_name: None,
            medium: Some(MEDIUM.into()),
            group_idx: Some(0),
            kv_cache_spec_kind: Some(SPEC_KIND.into()),
            has_extra_keys: false,
        }));
    }

    /// `BlockRemoved` of one evicted block (vLLM sends one event per hash).
    pub fn removed(&mut self, hash: EngineHash) {
        if self.enabled {
            self.pending.push(KvEvent::BlockRemoved(BlockRemoved {
                block_hashes: vec![hash],
                medium: Some(MEDIUM.into()),
                group_idx: Some(0),
            }));
        }
    }

    /// `AllBlocksCleared`.
    pub fn cleared(&mut self) {
        if self.enabled {
            self.pending.push(KvEvent::AllBlocksCleared);
        }
    }

    /// The events recorded since the last call, in order.
    pub fn take(&mut self) -> Vec<KvEvent> {
        std::mem::take(&mut self.pending)
    }
}

#[cfg(test)]
#[path = "events_tests.rs"]
mod tests;
