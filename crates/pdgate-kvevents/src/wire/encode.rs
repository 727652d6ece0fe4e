//! [`EventBatch`] → frames, in vLLM's shapes (for the simulator's publisher and for tests).

use super::schema::{
    Field, REMOVED_ORDER, STORED_ORDER, TAG_CLEARED, TAG_KEY, TAG_REMOVED, TAG_STORED,
};
use pdgate_api::kv_events::{BlockRemoved, BlockStored, EventBatch, KvEvent};
use rmp::encode as enc;

/// How events are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Encoding {
    /// vLLM 0.32: each event a map tagged by `type`, with every key vLLM 0.32 sends
    /// (`group_idx` and `kv_cache_spec_kind` omitted when `None`, as msgspec's
    /// `omit_defaults` does).
    #[default]
    Tagged,
    /// Older vLLM (`array_like` events): `[tag, fields...]` in declaration order, trailing
    /// defaulted fields (`extra_keys`, `group_idx`, `kv_cache_spec_kind` when absent)
    /// omitted.
    Positional,
}

/// The 3 frames `[topic, seq (8-byte big-endian), payload]` of `batch`. The batch is always
/// the array `[ts, events, dp_rank]` (dp_rank omitted when `None`), as vLLM 0.32 sends it.
pub fn encode(batch: &EventBatch, encoding: Encoding, topic: &[u8]) -> [Vec<u8>; 3] {
    [
        topic.to_vec(),
        super::seq_bytes(batch.seq).to_vec(),
        encode_payload(batch, encoding),
    ]
}

/// The msgpack payload (frame 3) of `batch`.
pub fn encode_payload(batch: &EventBatch, encoding: Encoding) -> Vec<u8> {
    let mut out = Vec::with_capacity(64 + batch.events.len() * 192);
    let w = &mut out;
    array(w, 2 + u32::from(batch.dp_rank.is_some()));
    enc::write_f64(w, batch.ts).expect("Vec write");
    array(w, len32(batch.events.len()));
    for event in &batch.events {
        match (event, encoding) {
            (KvEvent::BlockStored(s), Encoding::Tagged) => stored_tagged(w, s),
            (KvEvent::BlockStored(s), Encoding::Positional) => stored_positional(w, s),
            (KvEvent::BlockRemoved(b), Encoding::Tagged) => removed_tagged(w, b),
            (KvEvent::BlockRemoved(b), Encoding::Positional) => removed_positional(w, b),
            (KvEvent::AllBlocksCleared, Encoding::Tagged) => {
                map(w, 1);
                str(w, TAG_KEY);
                str(w, TAG_CLEARED);
            }
            (KvEvent::AllBlocksCleared, Encoding::Positional) => {
                array(w, 1);
                str(w, TAG_CLEARED);
            }
        }
    }
    if let Some(rank) = batch.dp_rank {
        uint(w, u64::from(rank));
    }
    out
}

/// `BlockStored`'s fields that are written: every one except the defaulted trailing ones
/// that are absent.
fn stored_fields(s: &BlockStored) -> &'static [Field] {
    let present = [
        s.has_extra_keys,
        s.group_idx.is_some(),
        s.kv_cache_spec_kind.is_some(),
    ];
    // Positional: trailing absent defaults are dropped; earlier ones are written as nil.
    let keep = 7 + present.iter().rposition(|p| *p).map_or(0, |i| i + 1);
    &STORED_ORDER[..keep]
}

fn stored_tagged(w: &mut Vec<u8>, s: &BlockStored) {
    // vLLM 0.32 always sends extra_keys on a store (one entry per block); the two optional
    // group fields only when set.
    let fields: Vec<Field> = STORED_ORDER
        .iter()
        .copied()
        .filter(|f| match f {
            Field::GroupIdx => s.group_idx.is_some(),
            Field::KvCacheSpecKind => s.kv_cache_spec_kind.is_some(),
            _ => true,
        })
        .collect();
    map(w, 1 + len32(fields.len()));
    str(w, TAG_KEY);
    str(w, TAG_STORED);
    for f in fields {
        str(w, f.key());
        stored_value(w, s, f, Encoding::Tagged);
    }
}

fn stored_positional(w: &mut Vec<u8>, s: &BlockStored) {
    let fields = stored_fields(s);
    array(w, 1 + len32(fields.len()));
    str(w, TAG_STORED);
    for f in fields {
        stored_value(w, s, *f, Encoding::Positional);
    }
}

fn stored_value(w: &mut Vec<u8>, s: &BlockStored, f: Field, encoding: Encoding) {
    match f {
        Field::BlockHashes => hashes(w, &s.block_hashes),
        Field::ParentBlockHash => opt_uint(w, s.parent_block_hash),
        Field::TokenIds => {
            array(w, len32(s.token_ids.len()));
            for t in &s.token_ids {
                uint(w, u64::from(*t));
            }
        }
        Field::BlockSize => uint(w, u64::from(s.block_size)),
        Field::LoraId => opt_uint(w, s.lora_id),
        Field::Medium => opt_str(w, s.medium.as_deref()),
        Field::LoraName => opt_str(w, s.lora_name.as_deref()),
        Field::ExtraKeys => extra_keys(w, s, encoding),
        Field::GroupIdx => opt_uint(w, s.group_idx.map(u64::from)),
        Field::KvCacheSpecKind => opt_str(w, s.kv_cache_spec_kind.as_deref()),
    }
}

/// `extra_keys`: one entry per block; nil entries when the blocks have none (vLLM 0.32's
/// tagged shape), or nil for the whole field in positional form. We do not model the keys
/// themselves: a block with keys is written as the 1-tuple `["pdgate"]`, enough for a
/// consumer to know its tokens alone do not identify it.
fn extra_keys(w: &mut Vec<u8>, s: &BlockStored, encoding: Encoding) {
    if !s.has_extra_keys && encoding == Encoding::Positional {
        enc::write_nil(w).expect("Vec write");
        return;
    }
    array(w, len32(s.block_hashes.len()));
    for _ in &s.block_hashes {
        if s.has_extra_keys {
            array(w, 1);
            str(w, "pdgate");
        } else {
            enc::write_nil(w).expect("Vec write");
        }
    }
}

fn removed_tagged(w: &mut Vec<u8>, b: &BlockRemoved) {
    let with_group = b.group_idx.is_some();
    map(w, 3 + u32::from(with_group));
    str(w, TAG_KEY);
    str(w, TAG_REMOVED);
    for f in &REMOVED_ORDER[..2 + usize::from(with_group)] {
        str(w, f.key());
        removed_value(w, b, *f);
    }
}

fn removed_positional(w: &mut Vec<u8>, b: &BlockRemoved) {
    let n = 2 + usize::from(b.group_idx.is_some());
    array(w, 1 + len32(n));
    str(w, TAG_REMOVED);
    for f in &REMOVED_ORDER[..n] {
        removed_value(w, b, *f);
    }
}

fn removed_value(w: &mut Vec<u8>, b: &BlockRemoved, f: Field) {
    match f {
        Field::BlockHashes => hashes(w, &b.block_hashes),
        Field::Medium => opt_str(w, b.medium.as_deref()),
        _ => opt_uint(w, b.group_idx.map(u64::from)),
    }
}

fn hashes(w: &mut Vec<u8>, hs: &[u64]) {
    array(w, len32(hs.len()));
    for h in hs {
        uint(w, *h);
    }
}

fn len32(n: usize) -> u32 {
    u32::try_from(n).expect("a msgpack container holds at most u32::MAX elements")
}

fn array(w: &mut Vec<u8>, n: u32) {
    enc::write_array_len(w, n).expect("Vec write");
}

fn map(w: &mut Vec<u8>, n: u32) {
    enc::write_map_len(w, n).expect("Vec write");
}

fn str(w: &mut Vec<u8>, s: &str) {
    enc::write_str(w, s).expect("Vec write");
}

fn uint(w: &mut Vec<u8>, v: u64) {
    enc::write_uint(w, v).expect("Vec write");
}

fn opt_uint(w: &mut Vec<u8>, v: Option<u64>) {
    match v {
        Some(v) => uint(w, v),
        None => enc::write_nil(w).expect("Vec write"),
    }
}

fn opt_str(w: &mut Vec<u8>, v: Option<&str>) {
    match v {
        Some(v) => str(w, v),
        None => enc::write_nil(w).expect("Vec write"),
    }
}
