//! The names and orders of vLLM's event fields: one table read by the decoder and the
//! encoder. Source: `vllm/distributed/kv_events.py` (`BlockStored`, `BlockRemoved`,
//! `AllBlocksCleared`; msgspec `tag=True` puts the class name under `type` in a map, or
//! first in an `array_like` array) and the vLLM 0.32 capture.

/// Tag of a stored-blocks event.
pub(crate) const TAG_STORED: &str = "BlockStored";
/// Tag of a removed-blocks event.
pub(crate) const TAG_REMOVED: &str = "BlockRemoved";
/// Tag of a cleared-cache event.
pub(crate) const TAG_CLEARED: &str = "AllBlocksCleared";
/// The tag's key in a tagged (map) event.
pub(crate) const TAG_KEY: &str = "type";

/// The batch's keys when it is a map (newer vLLM), in declaration order.
pub(crate) const BATCH_TS: &str = "ts";
pub(crate) const BATCH_EVENTS: &str = "events";
pub(crate) const BATCH_DP_RANK: &str = "data_parallel_rank";

/// A field we model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Field {
    BlockHashes,
    ParentBlockHash,
    TokenIds,
    BlockSize,
    LoraId,
    Medium,
    LoraName,
    ExtraKeys,
    GroupIdx,
    KvCacheSpecKind,
}

impl Field {
    /// The key in a tagged event (and the name in errors).
    pub(crate) fn key(self) -> &'static str {
        match self {
            Field::BlockHashes => "block_hashes",
            Field::ParentBlockHash => "parent_block_hash",
            Field::TokenIds => "token_ids",
            Field::BlockSize => "block_size",
            Field::LoraId => "lora_id",
            Field::Medium => "medium",
            Field::LoraName => "lora_name",
            Field::ExtraKeys => "extra_keys",
            Field::GroupIdx => "group_idx",
            Field::KvCacheSpecKind => "kv_cache_spec_kind",
        }
    }

    /// The field a tagged event's key names; `None` for keys we ignore
    /// (`kv_cache_spec_sliding_window`, anything newer).
    pub(crate) fn from_key(key: &str) -> Option<Field> {
        STORED_ORDER.iter().copied().find(|f| f.key() == key)
    }
}

/// `BlockStored`'s fields in declaration order (positional arrays: index 1 onwards).
/// vLLM 0.32 also declares `kv_cache_spec_sliding_window` after these (ignored).
pub(crate) const STORED_ORDER: [Field; 10] = [
    Field::BlockHashes,
    Field::ParentBlockHash,
    Field::TokenIds,
    Field::BlockSize,
    Field::LoraId,
    Field::Medium,
    Field::LoraName,
    Field::ExtraKeys,
    Field::GroupIdx,
    Field::KvCacheSpecKind,
];

/// `BlockRemoved`'s fields in declaration order.
pub(crate) const REMOVED_ORDER: [Field; 3] = [Field::BlockHashes, Field::Medium, Field::GroupIdx];

/// Positional `BlockStored` fields without a default in any vLLM (block_hashes through
/// lora_id); an array with fewer is malformed. We require the first four.
pub(crate) const STORED_REQUIRED: usize = 4;
/// Positional `BlockRemoved` fields every vLLM sends (block_hashes).
pub(crate) const REMOVED_REQUIRED: usize = 1;
