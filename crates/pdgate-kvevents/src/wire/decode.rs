//! Frames → [`EventBatch`]: the batch (array or map), then each event (tagged map or
//! positional array) read in one pass into the union of all events' fields, then checked
//! against its tag.

use super::read::{Bad, Reader, Res};
use super::schema::{
    Field, BATCH_DP_RANK, BATCH_EVENTS, BATCH_TS, REMOVED_ORDER, REMOVED_REQUIRED, STORED_ORDER,
    STORED_REQUIRED, TAG_CLEARED, TAG_KEY, TAG_REMOVED, TAG_STORED,
};
use super::{parse_seq, Decoded, WireError};
use pdgate_api::kv_events::{BlockRemoved, BlockStored, EventBatch, KvEvent};

/// Decodes one ZMQ message `[topic, seq, payload]` (see the [module docs](super) for the
/// shapes). Unknown event types are dropped silently here; use [`decode_counted`] to count
/// them. Errors: wrong frame count, a seq frame that is not 8 bytes, or a payload that is
/// not a KV-event batch (the error names the field).
pub fn decode(frames: &[&[u8]]) -> Result<EventBatch, WireError> {
    decode_counted(frames).map(|d| d.batch)
}

/// [`decode`], also counting the events of unknown type it skipped.
pub fn decode_counted(frames: &[&[u8]]) -> Result<Decoded, WireError> {
    let [_topic, seq, payload] = frames else {
        return Err(WireError::FrameCount(frames.len()));
    };
    decode_payload(parse_seq(seq)?, payload)
}

/// Decodes the msgpack payload of the message numbered `seq` (frame 3 alone; the replay
/// socket's replies carry the same payloads).
pub fn decode_payload(seq: u64, payload: &[u8]) -> Result<Decoded, WireError> {
    let mut r = Reader::new(payload);
    let mut out = Decoded {
        batch: EventBatch {
            seq,
            ts: 0.0,
            dp_rank: None,
            events: Vec::new(),
        },
        unknown_events: 0,
    };
    if r.is_map().map_err(at("batch"))? {
        batch_map(&mut r, &mut out)?;
    } else {
        batch_array(&mut r, &mut out)?;
    }
    if r.remaining() > 0 {
        return Err(WireError::Payload {
            field: "batch".into(),
            problem: format!("{} bytes after the batch", r.remaining()),
        });
    }
    Ok(out)
}

/// `[ts, events, dp_rank?, ...]`.
fn batch_array(r: &mut Reader<'_>, out: &mut Decoded) -> Result<(), WireError> {
    let n = r.array_len().map_err(at("batch"))?;
    if n < 2 {
        return Err(WireError::Payload {
            field: "batch".into(),
            problem: format!("expected [ts, events, dp_rank?], got {n} elements"),
        });
    }
    out.batch.ts = r.f64().map_err(at("ts"))?;
    events(r, out)?;
    if n > 2 {
        out.batch.dp_rank = r.opt_u32().map_err(at(BATCH_DP_RANK))?;
    }
    for _ in 3..n {
        r.skip().map_err(at("batch"))?;
    }
    Ok(())
}

/// `{ts, events, data_parallel_rank?}` (newer vLLM without `array_like`).
fn batch_map(r: &mut Reader<'_>, out: &mut Decoded) -> Result<(), WireError> {
    let n = r.map_len().map_err(at("batch"))?;
    let (mut ts, mut evs) = (false, false);
    for _ in 0..n {
        let key = r.str().map_err(at("batch key"))?;
        match key {
            BATCH_TS => {
                out.batch.ts = r.f64().map_err(at(BATCH_TS))?;
                ts = true;
            }
            BATCH_EVENTS => {
                events(r, out)?;
                evs = true;
            }
            BATCH_DP_RANK => out.batch.dp_rank = r.opt_u32().map_err(at(BATCH_DP_RANK))?,
            _ => r.skip().map_err(at("batch"))?,
        }
    }
    for (present, key) in [(ts, BATCH_TS), (evs, BATCH_EVENTS)] {
        if !present {
            return Err(WireError::Payload {
                field: key.into(),
                problem: "missing".into(),
            });
        }
    }
    Ok(())
}

fn events(r: &mut Reader<'_>, out: &mut Decoded) -> Result<(), WireError> {
    let n = r.array_len().map_err(at("events"))?;
    out.batch.events.reserve(n.min(r.remaining()));
    for i in 0..n {
        match event(r, i)? {
            Some(e) => out.batch.events.push(e),
            None => out.unknown_events += 1,
        }
    }
    Ok(())
}

/// Which event a tag names.
#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Stored,
    Removed,
    Cleared,
}

fn kind_of(tag: &str) -> Option<Kind> {
    match tag {
        TAG_STORED => Some(Kind::Stored),
        TAG_REMOVED => Some(Kind::Removed),
        TAG_CLEARED => Some(Kind::Cleared),
        _ => None,
    }
}

/// The union of every event's fields, as read so far.
#[derive(Default)]
struct Raw {
    block_hashes: Option<Vec<u64>>,
    parent_block_hash: Option<u64>,
    token_ids: Option<Vec<u32>>,
    block_size: Option<u32>,
    lora_id: Option<u64>,
    medium: Option<String>,
    lora_name: Option<String>,
    has_extra_keys: bool,
    group_idx: Option<u32>,
    kv_cache_spec_kind: Option<String>,
}

/// One event; `None` when its tag is unknown (skipped whole).
fn event(r: &mut Reader<'_>, i: usize) -> Result<Option<KvEvent>, WireError> {
    let path = || format!("events[{i}]");
    let mut raw = Raw::default();
    let kind = if r.is_array().map_err(|b| err(path(), b))? {
        positional(r, i, &mut raw)?
    } else if r.is_map().map_err(|b| err(path(), b))? {
        tagged(r, i, &mut raw)?
    } else {
        let m = r.peek().map_err(|b| err(path(), b))?;
        return Err(err(
            path(),
            Bad(format!("expected a map or an array, found marker {m:?}")),
        ));
    };
    let Some(kind) = kind else { return Ok(None) };
    build(kind, raw, i).map(Some)
}

/// `[tag, field, field, ...]` in declaration order.
fn positional(r: &mut Reader<'_>, i: usize, raw: &mut Raw) -> Result<Option<Kind>, WireError> {
    let n = r.array_len().map_err(|b| err(format!("events[{i}]"), b))?;
    if n == 0 {
        return Err(err(
            format!("events[{i}]"),
            Bad("empty array, no tag".into()),
        ));
    }
    let tag = r.str().map_err(|b| err(format!("events[{i}] tag"), b))?;
    let Some(kind) = kind_of(tag) else {
        for _ in 1..n {
            r.skip().map_err(|b| err(format!("events[{i}]"), b))?;
        }
        return Ok(None);
    };
    let (order, required): (&[Field], usize) = match kind {
        Kind::Stored => (&STORED_ORDER, STORED_REQUIRED),
        Kind::Removed => (&REMOVED_ORDER, REMOVED_REQUIRED),
        Kind::Cleared => (&[], 0),
    };
    if n - 1 < required {
        let names: Vec<&str> = order[..required].iter().map(|f| f.key()).collect();
        return Err(err(
            format!("events[{i}]"),
            Bad(format!(
                "positional {tag} has {} fields, needs at least {required} ({})",
                n - 1,
                names.join(", ")
            )),
        ));
    }
    for j in 1..n {
        match order.get(j - 1) {
            Some(f) => field(r, *f, raw).map_err(|b| err(format!("events[{i}].{}", f.key()), b))?,
            None => r.skip().map_err(|b| err(format!("events[{i}]"), b))?,
        }
    }
    Ok(Some(kind))
}

/// `{type: tag, key: value, ...}`; keys in any order, unknown keys ignored.
fn tagged(r: &mut Reader<'_>, i: usize, raw: &mut Raw) -> Result<Option<Kind>, WireError> {
    let n = r.map_len().map_err(|b| err(format!("events[{i}]"), b))?;
    let mut kind = None;
    let mut tag_seen = false;
    for k in 0..n {
        let key = r.str().map_err(|b| err(format!("events[{i}] key"), b))?;
        if key == TAG_KEY {
            let tag = r
                .str()
                .map_err(|b| err(format!("events[{i}].{TAG_KEY}"), b))?;
            tag_seen = true;
            kind = kind_of(tag);
            if kind.is_none() && k == 0 {
                // vLLM puts the tag first: an unknown event is skipped without reading
                // fields whose types we cannot know.
                for _ in 1..n {
                    r.skip().map_err(|b| err(format!("events[{i}]"), b))?;
                    r.skip().map_err(|b| err(format!("events[{i}]"), b))?;
                }
                return Ok(None);
            }
            continue;
        }
        match Field::from_key(key) {
            Some(f) => field(r, f, raw).map_err(|b| err(format!("events[{i}].{key}"), b))?,
            None => r.skip().map_err(|b| err(format!("events[{i}].{key}"), b))?,
        }
    }
    if !tag_seen {
        return Err(err(
            format!("events[{i}]"),
            Bad(format!("no `{TAG_KEY}` key")),
        ));
    }
    Ok(kind)
}

/// Reads one field's value into `raw`.
fn field(r: &mut Reader<'_>, f: Field, raw: &mut Raw) -> Res<()> {
    match f {
        Field::BlockHashes => raw.block_hashes = Some(hashes(r)?),
        Field::ParentBlockHash => raw.parent_block_hash = r.opt_hash()?,
        Field::TokenIds => raw.token_ids = Some(token_ids(r)?),
        Field::BlockSize => raw.block_size = Some(r.u32()?),
        Field::LoraId => raw.lora_id = r.opt_u64()?,
        Field::Medium => raw.medium = r.opt_str()?,
        Field::LoraName => raw.lora_name = r.opt_str()?,
        Field::ExtraKeys => raw.has_extra_keys = extra_keys(r)?,
        Field::GroupIdx => raw.group_idx = r.opt_u32()?,
        Field::KvCacheSpecKind => raw.kv_cache_spec_kind = r.opt_str()?,
    }
    Ok(())
}

fn hashes(r: &mut Reader<'_>) -> Res<Vec<u64>> {
    let n = r.array_len()?;
    let mut out = Vec::with_capacity(n.min(r.remaining()));
    for j in 0..n {
        out.push(r.hash().map_err(|b| Bad(format!("element {j}: {}", b.0)))?);
    }
    Ok(out)
}

fn token_ids(r: &mut Reader<'_>) -> Res<Vec<u32>> {
    let n = r.array_len()?;
    let mut out = Vec::with_capacity(n.min(r.remaining()));
    for j in 0..n {
        out.push(r.u32().map_err(|b| Bad(format!("element {j}: {}", b.0)))?);
    }
    Ok(out)
}

/// `extra_keys`: nil, or one entry per block, each nil or a tuple of keys (multimodal
/// hashes, LoRA name, cache salt). Whether any block has keys.
fn extra_keys(r: &mut Reader<'_>) -> Res<bool> {
    if r.nil()? {
        return Ok(false);
    }
    let n = r.array_len()?;
    let mut any = false;
    for _ in 0..n {
        if !r.nil()? {
            any = true;
            r.skip()?;
        }
    }
    Ok(any)
}

fn build(kind: Kind, raw: Raw, i: usize) -> Result<KvEvent, WireError> {
    let missing = |f: Field| err(format!("events[{i}].{}", f.key()), Bad("missing".into()));
    Ok(match kind {
        Kind::Stored => KvEvent::BlockStored(BlockStored {
            block_hashes: raw
                .block_hashes
                .ok_or_else(|| missing(Field::BlockHashes))?,
            parent_block_hash: raw.parent_block_hash,
            token_ids: raw.token_ids.ok_or_else(|| missing(Field::TokenIds))?,
            block_size: raw.block_size.ok_or_else(|| missing(Field::BlockSize))?,
            lora_id: raw.lora_id,
            lora_name: raw.lora_name,
            medium: raw.medium,
            group_idx: raw.group_idx,
            kv_cache_spec_kind: raw.kv_cache_spec_kind,
            has_extra_keys: raw.has_extra_keys,
        }),
        Kind::Removed => KvEvent::BlockRemoved(BlockRemoved {
            block_hashes: raw
                .block_hashes
                .ok_or_else(|| missing(Field::BlockHashes))?,
            medium: raw.medium,
            group_idx: raw.group_idx,
        }),
        Kind::Cleared => KvEvent::AllBlocksCleared,
    })
}

fn err(field: String, bad: Bad) -> WireError {
    WireError::Payload {
        field,
        problem: bad.0,
    }
}

fn at(field: &'static str) -> impl Fn(Bad) -> WireError {
    move |b| err(field.to_string(), b)
}
