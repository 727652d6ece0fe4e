//! The real Mooncake conversation trace (../shared/traces, beside the repo) → work items.

use pdgate_bench::{load_mooncake, mooncake_work, WorkPrompt, MOONCAKE_BLOCK_TOKENS};
use std::path::Path;

const TRACE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../../shared/traces/mooncake_conversation.jsonl"
);

fn tokens(p: &WorkPrompt) -> &[u32] {
    match p {
        WorkPrompt::Tokens(t) => t,
        WorkPrompt::Chat(_) => &[],
    }
}

#[test]
fn first_20_records_give_exact_prompt_lengths() {
    let records = load_mooncake(Path::new(TRACE), Some(20)).unwrap();
    assert_eq!(records.len(), 20);
    assert_eq!(
        (
            records[0].timestamp,
            records[0].input_length,
            records[0].output_length
        ),
        (0, 6758, 500)
    );
    assert_eq!(records[0].hash_ids, (0..=13).collect::<Vec<u64>>());
    let work = mooncake_work(&records, MOONCAKE_BLOCK_TOKENS);
    assert_eq!(work.len(), 20);
    for (r, w) in records.iter().zip(&work) {
        assert_eq!(tokens(&w.prompt).len(), r.input_length as usize);
        assert_eq!(w.max_tokens, r.output_length);
        assert_eq!(w.at_ms, r.timestamp);
    }
}

#[test]
fn shared_hash_id_means_shared_block() {
    let records = load_mooncake(Path::new(TRACE), Some(2)).unwrap();
    assert_eq!((records[0].hash_ids[0], records[1].hash_ids[0]), (0, 0));
    assert_ne!(records[0].hash_ids[1], records[1].hash_ids[1]);
    let work = mooncake_work(&records, MOONCAKE_BLOCK_TOKENS);
    let (a, b) = (tokens(&work[0].prompt), tokens(&work[1].prompt));
    assert_eq!(a[..512], b[..512]);
    assert_ne!(a[512..1024], b[512..1024]);
}

#[test]
fn malformed_line_names_line_and_field() {
    let path = Path::new(env!("CARGO_TARGET_TMPDIR")).join("pdgate-bench-bad-trace.jsonl");
    let text = std::fs::read_to_string(TRACE).unwrap();
    let mut lines: Vec<String> = text.lines().take(16).map(str::to_string).collect();
    lines.push(r#"{"timestamp": 9, "input_length": 10, "output_length": 1}"#.into());
    std::fs::write(&path, lines.join("\n")).unwrap();
    let err = load_mooncake(&path, None).unwrap_err();
    assert_eq!(err.to_string(), "trace line 17: missing field `hash_ids`");
    assert_eq!(load_mooncake(&path, Some(16)).unwrap().len(), 16);
}
