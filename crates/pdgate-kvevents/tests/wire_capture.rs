//! Every message of the real vLLM 0.32 capture decodes from its hex frames, and each event's
//! fields equal the capture's own JSON rendering of the payload.

use pdgate_kvevents::wire::{decode_counted, encode, Encoding};
use pdgate_kvevents::{EventBatch, KvEvent};
use serde_json::Value;
use std::collections::BTreeMap;

const CAPTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../../shared/fixtures/vllm-0.32-cpu/kv-events.raw.jsonl"
);

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
        .collect()
}

/// `(frames, decoded JSON)` per line.
fn capture() -> Vec<(Vec<Vec<u8>>, Value)> {
    std::fs::read_to_string(CAPTURE)
        .expect("read the capture")
        .lines()
        .map(|line| {
            let v: Value = serde_json::from_str(line).expect("json line");
            let frames = v["frames_hex"]
                .as_array()
                .expect("frames_hex")
                .iter()
                .map(|f| unhex(f.as_str().expect("hex string")))
                .collect();
            (frames, v["decoded"].clone())
        })
        .collect()
}

fn decode_frames(frames: &[Vec<u8>]) -> EventBatch {
    let refs: Vec<&[u8]> = frames.iter().map(Vec::as_slice).collect();
    let d = decode_counted(&refs).expect("decodes");
    assert_eq!(d.unknown_events, 0);
    d.batch
}

fn opt_str(v: &Value) -> Option<String> {
    v.as_str().map(str::to_string)
}

fn u64s(v: &Value) -> Vec<u64> {
    v.as_array()
        .expect("array")
        .iter()
        .map(|x| x.as_u64().expect("u64"))
        .collect()
}

fn assert_event_matches(event: &KvEvent, json: &Value, at: &str) {
    match json["type"].as_str().expect("type") {
        "BlockStored" => {
            let KvEvent::BlockStored(s) = event else {
                panic!("{at}: expected BlockStored, got {event:?}")
            };
            assert_eq!(s.block_hashes, u64s(&json["block_hashes"]), "{at}");
            assert_eq!(
                s.parent_block_hash,
                json["parent_block_hash"].as_u64(),
                "{at}"
            );
            let tokens: Vec<u32> = u64s(&json["token_ids"]).iter().map(|t| *t as u32).collect();
            assert_eq!(s.token_ids, tokens, "{at}");
            assert_eq!(
                u64::from(s.block_size),
                json["block_size"].as_u64().unwrap(),
                "{at}"
            );
            assert_eq!(s.lora_id, json["lora_id"].as_u64(), "{at}");
            assert_eq!(s.lora_name, opt_str(&json["lora_name"]), "{at}");
            assert_eq!(s.medium, opt_str(&json["medium"]), "{at}");
            assert_eq!(
                s.group_idx.map(u64::from),
                json["group_idx"].as_u64(),
                "{at}"
            );
            assert_eq!(
                s.kv_cache_spec_kind,
                opt_str(&json["kv_cache_spec_kind"]),
                "{at}"
            );
            let extra = json["extra_keys"]
                .as_array()
                .is_some_and(|keys| keys.iter().any(|k| !k.is_null()));
            assert_eq!(s.has_extra_keys, extra, "{at}");
        }
        "BlockRemoved" => {
            let KvEvent::BlockRemoved(r) = event else {
                panic!("{at}: expected BlockRemoved, got {event:?}")
            };
            assert_eq!(r.block_hashes, u64s(&json["block_hashes"]), "{at}");
            assert_eq!(r.medium, opt_str(&json["medium"]), "{at}");
            assert_eq!(
                r.group_idx.map(u64::from),
                json["group_idx"].as_u64(),
                "{at}"
            );
        }
        "AllBlocksCleared" => assert_eq!(event, &KvEvent::AllBlocksCleared, "{at}"),
        other => panic!("{at}: unexpected type {other} in the capture"),
    }
}

fn type_name(e: &KvEvent) -> &'static str {
    match e {
        KvEvent::BlockStored(_) => "BlockStored",
        KvEvent::BlockRemoved(_) => "BlockRemoved",
        KvEvent::AllBlocksCleared => "AllBlocksCleared",
    }
}

#[test]
fn every_captured_message_decodes_with_the_captured_fields() {
    let lines = capture();
    assert_eq!(lines.len(), 134);
    let mut decoded_counts = BTreeMap::new();
    let mut json_counts = BTreeMap::new();
    let mut prev_seq = None;
    for (n, (frames, json)) in lines.iter().enumerate() {
        let batch = decode_frames(frames);
        let at = format!("line {}", n + 1);
        // Seqs are consecutive in the capture (one publisher, nothing lost).
        if let Some(p) = prev_seq {
            assert_eq!(batch.seq, p + 1, "{at}");
        }
        prev_seq = Some(batch.seq);
        // serde_json's default float parsing is not exactly round-trip; the byte-exact
        // re-encoding test below pins the bits.
        assert!((batch.ts - json[0].as_f64().unwrap()).abs() < 1e-6, "{at}");
        assert_eq!(batch.dp_rank.map(u64::from), json[2].as_u64(), "{at}");
        let events = json[1].as_array().expect("events");
        assert_eq!(batch.events.len(), events.len(), "{at}");
        for (i, (e, j)) in batch.events.iter().zip(events).enumerate() {
            assert_event_matches(e, j, &format!("{at} event {i}"));
            *decoded_counts.entry(type_name(e)).or_insert(0) += 1;
            *json_counts
                .entry(j["type"].as_str().unwrap().to_string())
                .or_insert(0) += 1;
        }
    }
    assert_eq!(lines[0].0[1], vec![0, 0, 0, 0, 0, 0, 0x17, 0xd0]);
    let json_counts: BTreeMap<&str, i32> =
        json_counts.iter().map(|(k, v)| (k.as_str(), *v)).collect();
    assert_eq!(decoded_counts, json_counts);
    assert_eq!(decoded_counts.get("BlockStored"), Some(&67));
    assert_eq!(decoded_counts.get("BlockRemoved"), Some(&67));
}

#[test]
fn tagged_encoding_reproduces_the_captured_bytes() {
    for (n, (frames, _)) in capture().iter().enumerate() {
        let batch = decode_frames(frames);
        let again = encode(&batch, Encoding::Tagged, &frames[0]);
        assert_eq!(again[0], frames[0], "line {} topic", n + 1);
        assert_eq!(again[1], frames[1], "line {} seq", n + 1);
        assert_eq!(again[2], frames[2], "line {} payload", n + 1);
    }
}
