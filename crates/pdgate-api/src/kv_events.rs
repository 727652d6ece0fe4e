//! KV-cache events as vLLM publishes them (`--kv-events-config`, publisher `zmq`): what an
//! engine stored, removed or cleared in its prefix cache. Only the types live here (no IO, no
//! decoding); the wire (ZMQ frames, msgpack) is `pdgate-kvevents`.
//!
//! Source: vLLM `vllm/distributed/kv_events.py` (`KVEventBatch`, `BlockStored`,
//! `BlockRemoved`, `AllBlocksCleared`) and the capture in
//! `shared/fixtures/vllm-0.32-cpu/kv-events.raw.jsonl`.

/// An engine's block hash. vLLM sends an int (u64) or, with a cryptographic hash function,
/// bytes; bytes are folded into a u64 by the decoder (it is only ever a key for removals).
pub type EngineHash = u64;

/// One message of one publisher: the ZMQ frames `[topic, seq, payload]` decoded.
#[derive(Debug, Clone, PartialEq)]
pub struct EventBatch {
    /// The publisher's sequence number (frame 2, 8-byte big-endian), +1 per message.
    pub seq: u64,
    /// Engine wall-clock timestamp of the batch, seconds since the epoch.
    pub ts: f64,
    /// The data-parallel rank that published it, when the payload says (third element).
    pub dp_rank: Option<u32>,
    /// The events, in the engine's order.
    pub events: Vec<KvEvent>,
}

/// One cache change.
#[derive(Debug, Clone, PartialEq)]
pub enum KvEvent {
    /// The engine now holds these full blocks (a chain: each block's parent is the previous
    /// one, the first's parent is `parent_block_hash`).
    BlockStored(BlockStored),
    /// The engine dropped these blocks.
    BlockRemoved(BlockRemoved),
    /// The engine dropped every block (e.g. `/reset_prefix_cache`).
    AllBlocksCleared,
}

/// `BlockStored`: `block_hashes.len()` full blocks of `block_size` tokens each, whose tokens
/// are `token_ids` (`block_hashes.len() × block_size` ids).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct BlockStored {
    /// Engine hashes of the stored blocks, first to last.
    pub block_hashes: Vec<EngineHash>,
    /// Engine hash of the block before the first one; `None` for the first block of a prompt.
    pub parent_block_hash: Option<EngineHash>,
    /// The blocks' token ids, in order.
    pub token_ids: Vec<u32>,
    /// Tokens per engine block (vLLM's `--block-size`).
    pub block_size: u32,
    /// LoRA adapter id, when the blocks belong to one.
    pub lora_id: Option<u64>,
    /// LoRA adapter name (newer vLLM), when the blocks belong to one.
    pub lora_name: Option<String>,
    /// Storage medium (`"GPU"`, `"CPU"`, ...), when sent.
    pub medium: Option<String>,
    /// KV-cache group of a hybrid model (0 for a single full-attention group), when sent.
    pub group_idx: Option<u32>,
    /// The group's attention kind (`"full_attention"`, `"sliding_window"`, `"mamba"`, ...),
    /// when sent.
    pub kv_cache_spec_kind: Option<String>,
    /// Whether any block carries extra keys (multimodal hashes, cache salt): its tokens alone
    /// do not identify its content.
    pub has_extra_keys: bool,
}

/// `BlockRemoved`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct BlockRemoved {
    /// Engine hashes of the removed blocks.
    pub block_hashes: Vec<EngineHash>,
    /// Storage medium, when sent.
    pub medium: Option<String>,
    /// KV-cache group, when sent.
    pub group_idx: Option<u32>,
}

impl BlockStored {
    /// Whether these blocks are dense full-attention KV that a prompt prefix can reuse: the
    /// kind is absent or `full_attention`. Sliding-window and state-space groups of hybrid
    /// models hold only part of a prefix and are not indexed.
    pub fn is_full_attention(&self) -> bool {
        self.kv_cache_spec_kind
            .as_deref()
            .is_none_or(|k| k == "full_attention")
    }
}
