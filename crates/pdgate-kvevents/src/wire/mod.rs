//! vLLM KV events on the wire (pure, no IO).
//!
//! One ZMQ message is 3 frames `[topic, seq, payload]`: `topic` is the publisher's topic
//! (vLLM's default is empty; ignored here), `seq` an 8-byte big-endian u64 (+1 per message
//! from 0), `payload` a msgpack `EventBatch`:
//!
//! - batch: an array `[ts: float, events: [...], data_parallel_rank?: int]` (vLLM ≤ 0.32,
//!   `array_like`), or a map `{ts, events, data_parallel_rank?}` (newer vLLM); elements or
//!   keys past these are ignored.
//! - event, tagged (vLLM 0.32): a map whose `type` key is `BlockStored`, `BlockRemoved` or
//!   `AllBlocksCleared`, with the fields by name; unknown keys are ignored.
//! - event, positional (older vLLM, `array_like` events): an array, tag first, then the fields
//!   in vLLM's declaration order (`vllm/distributed/kv_events.py`):
//!   `BlockStored`: block_hashes, parent_block_hash, token_ids, block_size, lora_id, medium,
//!   lora_name, extra_keys, group_idx, kv_cache_spec_kind (oldest vLLM stops after lora_id;
//!   msgspec's `omit_defaults` drops trailing defaulted fields);
//!   `BlockRemoved`: block_hashes, medium, group_idx; `AllBlocksCleared`: nothing.
//!   Trailing fields past these are ignored.
//! - block hashes: integers, or bytes (a cryptographic hash function with
//!   `VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES` off) folded by [`fold_hash_bytes`].
//!
//! An event whose tag we do not know is skipped and counted ([`Decoded::unknown_events`]),
//! never an error; anything malformed is a [`WireError`] naming the frame or field.
//! [`encode`] writes exactly vLLM's shapes, for the simulator and for tests.

mod decode;
mod encode;
mod read;
mod schema;

pub use decode::{decode, decode_counted, decode_payload};
pub use encode::{encode, encode_payload, Encoding};

use pdgate_api::kv_events::EventBatch;

/// A decoded message and what was skipped in it.
#[derive(Debug, Clone, PartialEq)]
pub struct Decoded {
    /// The batch, with only the events of known types.
    pub batch: EventBatch,
    /// Events whose tag is not `BlockStored`/`BlockRemoved`/`AllBlocksCleared` (skipped).
    pub unknown_events: u32,
}

/// Why a ZMQ message is not a vLLM KV-event message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// Not 3 frames.
    #[error("expected 3 frames [topic, seq, payload], got {0}")]
    FrameCount(usize),
    /// The seq frame is not 8 bytes.
    #[error("seq frame: expected 8 bytes (big-endian u64), got {0}")]
    SeqLength(usize),
    /// The payload is not a msgpack `EventBatch` of known shape; `field` is the path of the
    /// offending value (`events[3].token_ids[7]`), `problem` what is wrong with it.
    #[error("payload {field}: {problem}")]
    Payload {
        /// Path of the offending value inside the payload (`batch`, `events[2].block_size`).
        field: String,
        /// What is wrong with it.
        problem: String,
    },
}

/// Folds a bytes block hash into the u64 the rest of pdgate keys removals on: the bytes read
/// as one big-endian integer, keeping the low 64 bits (i.e. the last 8 bytes; shorter input is
/// zero-extended). This is exactly vLLM's own bytes → int conversion
/// (`maybe_convert_block_hash` in `vllm/v1/core/kv_cache_utils.py`), so an engine that sends
/// bytes and one that sends ints yield the same key for the same block. Collisions only
/// matter for removals (the index keys its entries on its own token hashes).
pub fn fold_hash_bytes(raw: &[u8]) -> u64 {
    let tail = &raw[raw.len().saturating_sub(8)..];
    tail.iter().fold(0u64, |acc, b| (acc << 8) | u64::from(*b))
}

/// The seq frame of a message: 8 bytes, big-endian.
pub fn seq_bytes(seq: u64) -> [u8; 8] {
    seq.to_be_bytes()
}

/// Parses a seq frame (8 bytes, big-endian).
pub fn parse_seq(frame: &[u8]) -> Result<u64, WireError> {
    let raw: [u8; 8] = frame
        .try_into()
        .map_err(|_| WireError::SeqLength(frame.len()))?;
    Ok(u64::from_be_bytes(raw))
}
