//! Decoder shapes beyond the capture: positional events (older vLLM), bytes hashes, map
//! batches, unknown types/keys/trailing fields, malformed input, and round trips.

use pdgate_kvevents::wire::{decode, decode_counted, encode, fold_hash_bytes, Encoding, WireError};
use pdgate_kvevents::{BlockRemoved, BlockStored, EventBatch, KvEvent};
use rmp::encode as enc;

fn frames(seq: u64, payload: &[u8]) -> [Vec<u8>; 3] {
    [Vec::new(), seq.to_be_bytes().to_vec(), payload.to_vec()]
}

fn dec(payload: &[u8]) -> Result<pdgate_kvevents::wire::Decoded, WireError> {
    let f = frames(5, payload);
    decode_counted(&[&f[0], &f[1], &f[2]])
}

fn stored(hashes: Vec<u64>, parent: Option<u64>) -> BlockStored {
    BlockStored {
        token_ids: (0..(hashes.len() as u32 * 4)).collect(),
        block_hashes: hashes,
        parent_block_hash: parent,
        block_size: 4,
        ..Default::default()
    }
}

/// The oldest vLLM shape: batch `[ts, events]`, `BlockStored` `[tag, hashes, parent,
/// tokens, block_size, lora_id]`, `BlockRemoved` `[tag, hashes]`.
#[test]
fn oldest_positional_events_decode() {
    let mut p = Vec::new();
    enc::write_array_len(&mut p, 2).unwrap();
    enc::write_f64(&mut p, 12.5).unwrap();
    enc::write_array_len(&mut p, 3).unwrap();
    enc::write_array_len(&mut p, 6).unwrap();
    enc::write_str(&mut p, "BlockStored").unwrap();
    enc::write_array_len(&mut p, 1).unwrap();
    enc::write_uint(&mut p, 77).unwrap();
    enc::write_nil(&mut p).unwrap();
    enc::write_array_len(&mut p, 2).unwrap();
    enc::write_uint(&mut p, 1).unwrap();
    enc::write_uint(&mut p, 70000).unwrap();
    enc::write_uint(&mut p, 2).unwrap();
    enc::write_uint(&mut p, 3).unwrap(); // lora_id
    enc::write_array_len(&mut p, 2).unwrap();
    enc::write_str(&mut p, "BlockRemoved").unwrap();
    enc::write_array_len(&mut p, 1).unwrap();
    enc::write_sint(&mut p, -2).unwrap(); // Python hash() could be negative
    enc::write_array_len(&mut p, 1).unwrap();
    enc::write_str(&mut p, "AllBlocksCleared").unwrap();
    let d = dec(&p).expect("decodes");
    assert_eq!(d.batch.seq, 5);
    assert_eq!(d.batch.ts, 12.5);
    assert_eq!(d.batch.dp_rank, None);
    assert_eq!(
        d.batch.events,
        vec![
            KvEvent::BlockStored(BlockStored {
                block_hashes: vec![77],
                parent_block_hash: None,
                token_ids: vec![1, 70000],
                block_size: 2,
                lora_id: Some(3),
                ..Default::default()
            }),
            KvEvent::BlockRemoved(BlockRemoved {
                block_hashes: vec![u64::MAX - 1],
                ..Default::default()
            }),
            KvEvent::AllBlocksCleared,
        ]
    );
}

#[test]
fn bytes_hashes_fold_like_vllms_int_conversion() {
    let sha: Vec<u8> = (1..=32).collect();
    let folded = fold_hash_bytes(&sha);
    assert_eq!(folded, u64::from_be_bytes(sha[24..32].try_into().unwrap()));
    assert_eq!(fold_hash_bytes(&[1, 2]), 0x0102);
    let mut p = Vec::new();
    enc::write_array_len(&mut p, 3).unwrap();
    enc::write_f64(&mut p, 1.0).unwrap();
    enc::write_array_len(&mut p, 1).unwrap();
    enc::write_map_len(&mut p, 5).unwrap();
    enc::write_str(&mut p, "type").unwrap();
    enc::write_str(&mut p, "BlockStored").unwrap();
    enc::write_str(&mut p, "block_hashes").unwrap();
    enc::write_array_len(&mut p, 1).unwrap();
    enc::write_bin(&mut p, &sha).unwrap();
    enc::write_str(&mut p, "parent_block_hash").unwrap();
    enc::write_bin(&mut p, &[9; 32]).unwrap();
    enc::write_str(&mut p, "token_ids").unwrap();
    enc::write_array_len(&mut p, 1).unwrap();
    enc::write_uint(&mut p, 5).unwrap();
    enc::write_str(&mut p, "block_size").unwrap();
    enc::write_uint(&mut p, 1).unwrap();
    enc::write_uint(&mut p, 3).unwrap(); // dp_rank
    let d = dec(&p).expect("decodes");
    let KvEvent::BlockStored(s) = &d.batch.events[0] else {
        panic!()
    };
    assert_eq!(s.block_hashes, vec![folded]);
    assert_eq!(s.parent_block_hash, Some(u64::from_be_bytes([9; 8])));
    assert_eq!(d.batch.dp_rank, Some(3));
}

#[test]
fn unknown_types_keys_and_trailing_fields_are_skipped() {
    let mut p = Vec::new();
    enc::write_map_len(&mut p, 4).unwrap(); // a map batch (newer vLLM) with an extra key
    enc::write_str(&mut p, "events").unwrap();
    enc::write_array_len(&mut p, 3).unwrap();
    // Tagged, unknown type, with fields of shapes we do not know.
    enc::write_map_len(&mut p, 2).unwrap();
    enc::write_str(&mut p, "type").unwrap();
    enc::write_str(&mut p, "BlockMoved").unwrap();
    enc::write_str(&mut p, "block_hashes").unwrap();
    enc::write_str(&mut p, "not a list").unwrap();
    // Positional, unknown type.
    enc::write_array_len(&mut p, 2).unwrap();
    enc::write_str(&mut p, "Future").unwrap();
    enc::write_map_len(&mut p, 0).unwrap();
    // Positional BlockRemoved with a trailing field past group_idx, and a tagged unknown key.
    enc::write_array_len(&mut p, 5).unwrap();
    enc::write_str(&mut p, "BlockRemoved").unwrap();
    enc::write_array_len(&mut p, 1).unwrap();
    enc::write_uint(&mut p, 4).unwrap();
    enc::write_str(&mut p, "CPU").unwrap();
    enc::write_uint(&mut p, 2).unwrap();
    enc::write_array_len(&mut p, 1).unwrap();
    enc::write_f32(&mut p, 0.5).unwrap();
    enc::write_str(&mut p, "ts").unwrap();
    enc::write_uint(&mut p, 7).unwrap(); // an int timestamp is accepted
    enc::write_str(&mut p, "data_parallel_rank").unwrap();
    enc::write_nil(&mut p).unwrap();
    enc::write_str(&mut p, "future_key").unwrap();
    enc::write_bin(&mut p, b"x").unwrap();
    let d = dec(&p).expect("decodes");
    assert_eq!(d.unknown_events, 2);
    assert_eq!(d.batch.ts, 7.0);
    assert_eq!(
        d.batch.events,
        vec![KvEvent::BlockRemoved(BlockRemoved {
            block_hashes: vec![4],
            medium: Some("CPU".into()),
            group_idx: Some(2),
        })]
    );
}

fn payload_error(p: &[u8]) -> (String, String) {
    match dec(p) {
        Err(WireError::Payload { field, problem }) => (field, problem),
        other => panic!("expected a payload error, got {other:?}"),
    }
}

#[test]
fn malformed_input_names_what_is_wrong() {
    let f = frames(1, &[0x90]);
    assert_eq!(decode(&[&f[0], &f[1]]), Err(WireError::FrameCount(2)));
    assert_eq!(
        decode(&[&f[0], &[0, 1], &f[2]]),
        Err(WireError::SeqLength(2))
    );
    // A batch that is a string.
    assert_eq!(payload_error(&[0xa1, b'x']).0, "batch");
    // A token id that is a string, in event 0.
    let good = EventBatch {
        seq: 1,
        ts: 1.0,
        dp_rank: None,
        events: vec![KvEvent::BlockStored(stored(vec![1], None))],
    };
    let mut p = encode(&good, Encoding::Positional, b"")[2].clone();
    let at = p.iter().rposition(|b| *b == 0x03).unwrap(); // the last token id, 3
    p[at] = 0xc0; // nil
    let (field, problem) = payload_error(&p);
    assert_eq!(field, "events[0].token_ids");
    assert!(
        problem.contains("element 3") && problem.contains("found nil"),
        "{problem}"
    );
    // Truncated.
    let full = encode(&good, Encoding::Tagged, b"")[2].clone();
    let (_, problem) = payload_error(&full[..full.len() - 3]);
    assert!(
        problem.contains("truncated") || problem.contains("expected"),
        "{problem}"
    );
    // Trailing garbage.
    let mut extra = full.clone();
    extra.push(0xc0);
    assert_eq!(
        payload_error(&extra),
        ("batch".into(), "1 bytes after the batch".into())
    );
    // A positional BlockStored without block_size.
    let mut short = Vec::new();
    enc::write_array_len(&mut short, 2).unwrap();
    enc::write_f64(&mut short, 1.0).unwrap();
    enc::write_array_len(&mut short, 1).unwrap();
    enc::write_array_len(&mut short, 4).unwrap();
    enc::write_str(&mut short, "BlockStored").unwrap();
    enc::write_array_len(&mut short, 0).unwrap();
    enc::write_nil(&mut short).unwrap();
    enc::write_array_len(&mut short, 0).unwrap();
    let (field, problem) = payload_error(&short);
    assert_eq!(field, "events[0]");
    assert!(problem.contains("needs at least 4"), "{problem}");
    // A tagged event without a type.
    let mut untyped = Vec::new();
    enc::write_array_len(&mut untyped, 2).unwrap();
    enc::write_f64(&mut untyped, 1.0).unwrap();
    enc::write_array_len(&mut untyped, 1).unwrap();
    enc::write_map_len(&mut untyped, 0).unwrap();
    assert_eq!(
        payload_error(&untyped),
        ("events[0]".into(), "no `type` key".into())
    );
}

#[test]
fn both_encodings_round_trip() {
    let events = vec![
        KvEvent::BlockStored(BlockStored {
            lora_id: Some(1),
            lora_name: Some("adapter".into()),
            medium: Some("GPU".into()),
            group_idx: Some(1),
            kv_cache_spec_kind: Some("sliding_window".into()),
            has_extra_keys: true,
            ..stored(vec![u64::MAX, 2], Some(3))
        }),
        KvEvent::BlockStored(stored(vec![8], None)),
        KvEvent::BlockStored(BlockStored {
            group_idx: Some(0),
            ..stored(vec![9], Some(8))
        }),
        KvEvent::BlockRemoved(BlockRemoved {
            block_hashes: vec![1, 2],
            medium: None,
            group_idx: None,
        }),
        KvEvent::BlockRemoved(BlockRemoved {
            block_hashes: vec![3],
            medium: Some("CPU".into()),
            group_idx: Some(4),
        }),
        KvEvent::AllBlocksCleared,
    ];
    for dp_rank in [None, Some(3)] {
        let batch = EventBatch {
            seq: u64::MAX,
            ts: 1_796_108_772.126_257_7,
            dp_rank,
            events: events.clone(),
        };
        for encoding in [Encoding::Tagged, Encoding::Positional] {
            let f = encode(&batch, encoding, b"kv");
            assert_eq!(f[0], b"kv");
            let back = decode(&[&f[0], &f[1], &f[2]]).expect("decodes");
            assert_eq!(back, batch, "{encoding:?}");
        }
    }
}
