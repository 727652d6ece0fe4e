//! The exact events of hand-computed request sequences on one engine (block size 4).

use super::super::cache::block_hashes;
use super::super::sched::{EngineState, Plan};
use super::super::seq::{Finish, Seq, SeqEvent, SeqMode};
use crate::config::SimConfig;
use crate::kv_events::KvEventsConfig;
use crate::metrics::Metrics;
use pdgate_api::kv_events::{BlockRemoved, BlockStored, KvEvent};
use tokio::sync::mpsc;
use tokio::time::Instant;

const BS: usize = 4;

fn engine(blocks: usize) -> (EngineState, Metrics) {
    let cfg = SimConfig {
        block_size: BS,
        num_gpu_blocks: blocks,
        kv_events: Some(KvEventsConfig::parse(r#"{"enable_kv_cache_events":true}"#).unwrap()),
        ..SimConfig::default()
    };
    let m = Metrics::new("m", BS, blocks);
    (EngineState::new(cfg, "e".into(), None), m)
}

/// Runs `tokens` (1 output token) to completion; returns the events of each step and how
/// the request finished.
fn run(
    st: &mut EngineState,
    m: &Metrics,
    mode: SeqMode,
    tokens: Vec<u32>,
) -> (Vec<Vec<KvEvent>>, Finish) {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let hashes = block_hashes(&tokens, BS);
    st.waiting
        .push_back(Seq::new(tx, mode, tokens, hashes, 1, Instant::now()));
    let mut batches = Vec::new();
    loop {
        let plan = st.plan(Instant::now(), m);
        if let Plan::Step(_) = plan {
            st.complete(Instant::now(), m);
        }
        batches.push(st.take_events());
        while let Ok(ev) = rx.try_recv() {
            if let SeqEvent::Finished(f) = ev {
                return (batches, f);
            }
        }
        assert!(batches.len() < 10, "the request did not finish");
    }
}

fn stored(tokens: &[u32], from: usize, to: usize) -> KvEvent {
    let h = block_hashes(tokens, BS);
    KvEvent::BlockStored(BlockStored {
        block_hashes: h[from..to].to_vec(),
        parent_block_hash: from.checked_sub(1).map(|p| h[p]),
        token_ids: tokens[from * BS..to * BS].to_vec(),
        block_size: BS as u32,
        lora_id: None,
        lora_name: None,
        medium: Some("GPU".into()),
        group_idx: Some(0),
        kv_cache_spec_kind: Some("full_attention".into()),
        has_extra_keys: false,
    })
}

fn removed(tokens: &[u32], block: usize) -> KvEvent {
    KvEvent::BlockRemoved(BlockRemoved {
        block_hashes: vec![block_hashes(tokens, BS)[block]],
        medium: Some("GPU".into()),
        group_idx: Some(0),
    })
}

#[test]
fn full_blocks_are_stored_once_and_a_recomputed_last_block_is_announced_again() {
    let (mut st, m) = engine(64);
    let nine: Vec<u32> = (0..9).collect();
    // 9 tokens: two full blocks (the partial third is never announced), in one event.
    let (batches, fin) = run(&mut st, &m, SeqMode::Local, nine.clone());
    assert_eq!(batches, vec![vec![stored(&nine, 0, 2)]]);
    assert_eq!(fin.cached_tokens, 0);
    // Again: both blocks are hits, nothing new is stored.
    let (batches, fin) = run(&mut st, &m, SeqMode::Local, nine.clone());
    assert_eq!(batches, vec![Vec::<KvEvent>::new()]);
    assert_eq!(fin.cached_tokens, 8);
    // The first 8 tokens alone: the last prompt token is always computed, so block 1 is
    // recomputed and announced again under the same hash (subscribers apply it idempotently).
    let eight = nine[..8].to_vec();
    let (batches, fin) = run(&mut st, &m, SeqMode::Local, eight.clone());
    assert_eq!(batches, vec![vec![stored(&eight, 1, 2)]]);
    assert_eq!(fin.cached_tokens, 4);
    // Counters as vLLM: 26 tokens queried, 12 hit, 14 computed.
    let s = st.stats();
    assert_eq!((s.prefix_cache_queries, s.prefix_cache_hits), (26, 12));
    assert_eq!(
        (
            s.prompt_tokens_local_compute,
            s.prompt_tokens_local_cache_hit,
            s.prompt_tokens_external_kv_transfer
        ),
        (14, 12, 0)
    );
}

#[test]
fn evictions_come_in_lru_order_before_the_store_that_reuses_the_block() {
    // 4 blocks; each request holds 2 prompt blocks + 1 output block.
    let (mut st, m) = engine(4);
    let a: Vec<u32> = (0..8).collect();
    let b: Vec<u32> = (100..108).collect();
    let c: Vec<u32> = (200..208).collect();
    let (batches, _) = run(&mut st, &m, SeqMode::Local, a.clone());
    assert_eq!(batches, vec![vec![stored(&a, 0, 2)]]);
    // b takes the 2 free blocks; its output block evicts a's least recently used block,
    // a's tail (a prompt's last blocks go first).
    let (batches, _) = run(&mut st, &m, SeqMode::Local, b.clone());
    assert_eq!(batches, vec![vec![stored(&b, 0, 2), removed(&a, 1)]]);
    // c: admission evicts a's head, then the step stores c and its output evicts b's tail:
    // one batch, in the engine's order.
    let (batches, _) = run(&mut st, &m, SeqMode::Local, c.clone());
    assert_eq!(
        batches,
        vec![vec![removed(&a, 0), stored(&c, 0, 2), removed(&b, 1)]]
    );
    // A reset clears everything: one AllBlocksCleared, and nothing is a hit any more.
    st.reset_prefix_cache();
    assert_eq!(st.take_events(), vec![KvEvent::AllBlocksCleared]);
    assert_eq!(st.local_hit_tokens(&c), 0);
    // Blocks freed by the reset are reused without a BlockRemoved.
    let (batches, fin) = run(&mut st, &m, SeqMode::Local, c.clone());
    assert_eq!(batches, vec![vec![stored(&c, 0, 2)]]);
    assert_eq!(fin.cached_tokens, 0);
}

#[test]
fn a_decode_leg_stores_the_transferred_blocks_and_reports_no_cached_tokens() {
    let (mut st, m) = engine(64);
    let p: Vec<u32> = (0..10).collect();
    // The KV of all 10 tokens came from the prefill: the 2 full blocks are stored at
    // admission; cached_tokens is 0 (vLLM 0.32); the counters show the transfer.
    let (batches, fin) = run(&mut st, &m, SeqMode::RemoteDecode, p.clone());
    assert_eq!(batches[0], vec![stored(&p, 0, 2)]);
    assert!(batches[1..].iter().all(Vec::is_empty), "{batches:?}");
    assert_eq!(fin.cached_tokens, 0);
    let s = st.stats();
    assert_eq!((s.prefix_cache_queries, s.prefix_cache_hits), (10, 0));
    assert_eq!(
        (
            s.prompt_tokens_local_compute,
            s.prompt_tokens_local_cache_hit,
            s.prompt_tokens_external_kv_transfer
        ),
        (0, 0, 10)
    );
    // A second decode leg of the same prompt finds its 8 tokens here: those are cached, the
    // other 2 transferred; nothing new is stored.
    let (batches, fin) = run(&mut st, &m, SeqMode::RemoteDecode, p.clone());
    assert!(batches.iter().all(Vec::is_empty), "{batches:?}");
    assert_eq!(fin.cached_tokens, 8);
    let s = st.stats();
    assert_eq!(
        (
            s.prompt_tokens_local_cache_hit,
            s.prompt_tokens_external_kv_transfer
        ),
        (8, 12)
    );
    let text = m.render();
    assert!(
        text.contains(r#"vllm:prompt_tokens_by_source_total{engine="0",model_name="m",source="external_kv_transfer"} 12"#),
        "{text}"
    );
}

#[test]
fn no_events_are_recorded_when_kv_events_are_off() {
    let cfg = SimConfig {
        block_size: BS,
        ..SimConfig::default()
    };
    let m = Metrics::new("m", BS, 16);
    let mut st = EngineState::new(cfg, "e".into(), None);
    let (batches, _) = run(&mut st, &m, SeqMode::Local, (0..9).collect());
    assert!(batches.iter().all(Vec::is_empty));
    st.reset_prefix_cache();
    assert!(st.take_events().is_empty());
}
