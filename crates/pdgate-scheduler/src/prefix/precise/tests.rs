//! Hand-computed cases of the precise index: re-cutting engine blocks of 32, 64, 8 and 16
//! tokens onto 16-token canonical blocks, removals, orphans, skips, idempotence, middle
//! removal, clears, the bound, speculation and LoRA seeds.

use super::*;
use crate::plugins::testutil::ep;
use crate::prefix::{chain, seed, token_block_hash};
use pdgate_api::kv_events::{BlockRemoved, BlockStored};
use pdgate_api::PromptInput;

const C: usize = 16;

fn index(cap: usize, ttl: Option<u64>) -> PreciseIndex {
    PreciseIndex::new(
        0,
        PreciseSettings {
            hasher: BlockHasher {
                block_tokens: C,
                max_blocks: 1024,
            },
            capacity_per_endpoint: cap,
            speculative_ttl_ms: ttl,
            events: KvEventsConfig::default(),
        },
    )
}

/// The prompt's canonical hashes computed by hand: chain from xxh3(model) over 16-token
/// blocks.
fn canonical(model: &str, tokens: &[u32]) -> Vec<u64> {
    let mut prev = seed(model);
    tokens
        .chunks_exact(C)
        .map(|b| {
            prev = chain(prev, token_block_hash(b));
            prev
        })
        .collect()
}

/// `BlockStored` of engine blocks of `e` tokens covering `tokens`, engine hashes
/// `first, first+1, ...`, after `parent`.
fn stored(e: u32, tokens: &[u32], first: u64, parent: Option<u64>) -> KvEvent {
    let n = tokens.len() as u64 / u64::from(e);
    KvEvent::BlockStored(BlockStored {
        block_hashes: (first..first + n).collect(),
        parent_block_hash: parent,
        token_ids: tokens.to_vec(),
        block_size: e,
        ..BlockStored::default()
    })
}

fn removed(hashes: &[u64]) -> KvEvent {
    KvEvent::BlockRemoved(BlockRemoved {
        block_hashes: hashes.to_vec(),
        ..BlockRemoved::default()
    })
}

fn batch(seq: u64, events: Vec<KvEvent>) -> EventBatch {
    EventBatch {
        seq,
        ts: 0.0,
        dp_rank: None,
        events,
    }
}

fn prompt(n: u32) -> Vec<u32> {
    (1000..1000 + n).collect()
}

/// Matched blocks of `tokens` (model `m`) on `e` at time 0.
fn matched(ix: &PreciseIndex, e: &Arc<EndpointState>, tokens: &[u32]) -> usize {
    ix.match_length_at(&canonical("m", tokens), e, 0)
}

#[test]
fn engine_32_gives_two_canonical_blocks_each() {
    let ix = index(1000, None);
    let a = ep("a", None);
    let t = prompt(96); // 3 engine blocks of 32 → 6 canonical blocks
    let out = ix.apply_for_model(&a, Some("m"), &batch(1, vec![stored(32, &t, 10, None)]), 0);
    assert_eq!((out.engine_blocks_stored, out.blocks_stored), (3, 6));
    assert_eq!(matched(&ix, &a, &t), 6);
    assert_eq!(ix.match_length_at(&canonical("m", &t[..40]), &a, 0), 2);
    // The scorer's own hasher gives the same keys.
    let h = ix.hasher().hash("m", &PromptInput::Tokens(t.clone()));
    assert_eq!(h, canonical("m", &t));
    // Removing the middle engine block drops canonical blocks 2 and 3: the match stops at 2
    // although blocks 4 and 5 are still held (no prefix closure assumed).
    ix.apply_for_model(&a, Some("m"), &batch(2, vec![removed(&[11])]), 0);
    assert_eq!(matched(&ix, &a, &t), 2);
    assert_eq!(ix.blocks_held("a"), 4);
}

#[test]
fn engine_64_gives_four_and_a_child_continues_the_chain() {
    let ix = index(1000, None);
    let a = ep("a", None);
    let t = prompt(128);
    let b = batch(
        1,
        vec![
            stored(64, &t[..64], 1, None),
            stored(64, &t[64..], 2, Some(1)),
        ],
    );
    let out = ix.apply_for_model(&a, Some("m"), &b, 0);
    assert_eq!(out.blocks_stored, 8);
    assert_eq!(matched(&ix, &a, &t), 8);
    let out = ix.apply_for_model(&a, Some("m"), &batch(2, vec![removed(&[2])]), 0);
    assert_eq!((out.engine_blocks_removed, out.blocks_removed), (1, 4));
    assert_eq!(matched(&ix, &a, &t), 4);
}

#[test]
fn engine_8_needs_two_blocks_per_canonical_block() {
    let ix = index(1000, None);
    let a = ep("a", None);
    let t = prompt(40); // 5 engine blocks of 8 → 2 canonical blocks + 8 carried tokens
    let out = ix.apply_for_model(&a, Some("m"), &batch(1, vec![stored(8, &t, 1, None)]), 0);
    assert_eq!((out.engine_blocks_stored, out.blocks_stored), (5, 2));
    // The 6th engine block (its parent is 5) completes canonical block 2 from the carry.
    let t2 = prompt(48);
    ix.apply_for_model(
        &a,
        Some("m"),
        &batch(2, vec![stored(8, &t2[40..], 6, Some(5))]),
        0,
    );
    assert_eq!(matched(&ix, &a, &t2), 3);
    // Removing the first half (engine block 3) of canonical block 1 drops it.
    let out = ix.apply_for_model(&a, Some("m"), &batch(3, vec![removed(&[3])]), 0);
    assert_eq!(out.blocks_removed, 1);
    assert_eq!(matched(&ix, &a, &t2), 1);
    // Then removing its second half (4) does not drop anything else.
    let out = ix.apply_for_model(&a, Some("m"), &batch(4, vec![removed(&[4])]), 0);
    assert_eq!(out.blocks_removed, 0);
    assert_eq!(ix.blocks_held("a"), 2);
}

#[test]
fn engine_16_maps_one_to_one_and_non_divisible_sizes_carry() {
    let ix = index(1000, None);
    let a = ep("a", None);
    let t = prompt(48);
    ix.apply_for_model(&a, Some("m"), &batch(1, vec![stored(16, &t, 1, None)]), 0);
    assert_eq!(matched(&ix, &a, &t), 3);
    // E = 24: 2 engine blocks = 48 tokens = 3 canonical blocks.
    let b = ep("b", None);
    let out = ix.apply_for_model(&b, Some("m"), &batch(1, vec![stored(24, &t, 1, None)]), 0);
    assert_eq!(out.blocks_stored, 3);
    assert_eq!(matched(&ix, &b, &t), 3);
}

#[test]
fn orphans_hybrid_extra_keys_and_malformed_are_skipped_and_counted() {
    let ix = index(1000, None);
    let a = ep("a", None);
    let t = prompt(64);
    let mut hybrid = stored(32, &t, 1, None);
    if let KvEvent::BlockStored(b) = &mut hybrid {
        b.kv_cache_spec_kind = Some("sliding_window".into());
    }
    let mut mm = stored(32, &t, 1, None);
    if let KvEvent::BlockStored(b) = &mut mm {
        b.has_extra_keys = true;
    }
    let mut bad = stored(32, &t, 1, None);
    if let KvEvent::BlockStored(b) = &mut bad {
        b.token_ids.pop();
    }
    let out = ix.apply_for_model(
        &a,
        Some("m"),
        &batch(
            1,
            vec![stored(32, &t, 7, Some(99)), hybrid, mm, bad, removed(&[42])],
        ),
        0,
    );
    assert_eq!(
        (
            out.orphans,
            out.skipped_hybrid,
            out.skipped_extra_keys,
            out.malformed,
            out.unknown_removed
        ),
        (2, 2, 2, 2, 1)
    );
    assert_eq!((out.blocks_stored, out.events), (0, 5));
    assert_eq!(matched(&ix, &a, &t), 0);
    // No model known for a first block: skipped, counted.
    let out = ix.apply(&a, &batch(2, vec![stored(32, &t, 1, None)]), 0);
    assert_eq!(out.model_unknown, 2);
    a.load.set_models(vec!["m".into()]);
    let out = ix.apply(&a, &batch(3, vec![stored(32, &t, 1, None)]), 0);
    assert_eq!(out.blocks_stored, 4);
    assert_eq!(ix.counts().orphans, 2);
}

#[test]
fn duplicates_are_idempotent_and_shared_canonical_blocks_are_refcounted() {
    let ix = index(1000, None);
    let a = ep("a", None);
    let t = prompt(32);
    let b = batch(1, vec![stored(32, &t, 1, None), stored(32, &t, 1, None)]);
    let out = ix.apply_for_model(&a, Some("m"), &b, 0);
    assert_eq!((out.duplicates, out.blocks_stored), (1, 2));
    // Another engine block (other engine hash, same tokens) yields the same canonical
    // blocks: removing one engine block keeps the other's credit.
    ix.apply_for_model(&a, Some("m"), &batch(2, vec![stored(32, &t, 5, None)]), 0);
    ix.apply_for_model(&a, Some("m"), &batch(3, vec![removed(&[1])]), 0);
    assert_eq!(matched(&ix, &a, &t), 2);
    ix.apply_for_model(&a, Some("m"), &batch(4, vec![removed(&[5, 5])]), 0);
    assert_eq!(matched(&ix, &a, &t), 0);
    assert_eq!(ix.counts().unknown_removed, 1);
}

#[test]
fn all_blocks_cleared_and_clear_endpoint_drop_credit() {
    let ix = index(1000, None);
    let (a, b) = (ep("a", None), ep("b", None));
    let t = prompt(64);
    ix.apply_for_model(&a, Some("m"), &batch(1, vec![stored(32, &t, 1, None)]), 0);
    ix.apply_for_model(&b, Some("m"), &batch(1, vec![stored(32, &t, 1, None)]), 0);
    let out = ix.apply_for_model(&a, Some("m"), &batch(2, vec![KvEvent::AllBlocksCleared]), 0);
    assert_eq!((out.clears, out.blocks_removed), (1, 4));
    let mut m = Vec::new();
    ix.match_lengths_at(&canonical("m", &t), &[&a, &b], 0, &mut m);
    assert_eq!(m, vec![0, 4]);
    assert!(ix.clear_endpoint("b"));
    assert!(!ix.clear_endpoint("b"));
    assert_eq!(matched(&ix, &b, &t), 0);
    assert_eq!(ix.stats().blocks, 0);
    // A child of a cleared block is an orphan.
    let out = ix.apply_for_model(
        &a,
        Some("m"),
        &batch(3, vec![stored(32, &t, 9, Some(1))]),
        0,
    );
    assert_eq!(out.orphans, 2);
}

#[test]
fn the_bound_evicts_least_recently_stored_engine_blocks() {
    let ix = index(4, None);
    let a = ep("a", None);
    let (t1, t2) = (prompt(64), (5000..5064).collect::<Vec<u32>>());
    ix.apply_for_model(&a, Some("m"), &batch(1, vec![stored(32, &t1, 1, None)]), 0);
    let out = ix.apply_for_model(&a, Some("m"), &batch(2, vec![stored(32, &t2, 10, None)]), 0);
    assert_eq!((out.evicted, out.blocks_removed), (2, 4));
    assert_eq!(ix.blocks_held("a"), 4);
    assert_eq!(matched(&ix, &a, &t1), 0);
    assert_eq!(matched(&ix, &a, &t2), 4);
}

#[test]
fn speculative_credit_expires_unless_confirmed() {
    let ix = index(1000, Some(2000));
    let a = ep("a", None);
    let t = prompt(64);
    let h = canonical("m", &t);
    ix.speculate(&a, &h, 1_000);
    assert_eq!(ix.match_length_at(&h, &a, 2_999), 4);
    assert_eq!(
        ix.match_length_at(&h, &a, 3_000),
        0,
        "expired at 1000 + 2000"
    );
    ix.expire(3_000);
    let c = ix.counts();
    assert_eq!((c.speculative_added, c.speculative_expired), (4, 4));
    assert_eq!(ix.blocks_held("a"), 0);
    // Credit again, then the engine reports 2 of the 4 blocks: those stay after the TTL.
    ix.speculate(&a, &h, 10_000);
    ix.apply_for_model(
        &a,
        Some("m"),
        &batch(1, vec![stored(32, &t[..32], 1, None)]),
        10_500,
    );
    assert_eq!(ix.counts().speculative_confirmed, 2);
    assert_eq!(ix.match_length_at(&h, &a, 11_000), 4);
    assert_eq!(ix.match_length_at(&h, &a, 50_000), 2);
    ix.expire(50_000);
    assert_eq!(ix.blocks_held("a"), 2);
    // Off: nothing credited.
    let off = index(1000, None);
    off.speculate(&a, &h, 0);
    assert_eq!(off.match_length_at(&h, &a, 0), 0);
}

#[test]
fn lora_blocks_are_keyed_under_the_adapter_name() {
    let ix = index(1000, None);
    let a = ep("a", None);
    let t = prompt(32);
    let mut ev = stored(32, &t, 1, None);
    if let KvEvent::BlockStored(b) = &mut ev {
        b.lora_name = Some("sql-lora".into());
        b.lora_id = Some(1);
    }
    ix.apply_for_model(&a, Some("m"), &batch(1, vec![ev]), 0);
    assert_eq!(matched(&ix, &a, &t), 0, "not the base model's blocks");
    assert_eq!(ix.match_length_at(&canonical("sql-lora", &t), &a, 0), 2);
    let mut unnamed = stored(32, &t, 2, None);
    if let KvEvent::BlockStored(b) = &mut unnamed {
        b.lora_id = Some(1);
    }
    let out = ix.apply_for_model(&a, Some("m"), &batch(2, vec![unnamed]), 0);
    assert_eq!(out.skipped_lora, 1);
}

#[test]
fn dump_lists_endpoints_with_what_they_hold() {
    let ix = index(1000, None);
    let a = ep("a", None);
    let t = prompt(64);
    ix.apply_for_model(&a, Some("m"), &batch(7, vec![stored(32, &t, 1, None)]), 0);
    let d = ix.dump(2);
    assert_eq!(d.endpoints.len(), 1);
    let e = &d.endpoints[0];
    assert_eq!(
        (
            e.name.as_str(),
            e.blocks_held,
            e.engine_blocks,
            e.engine_block_size,
            e.last_seq
        ),
        ("a", 4, 2, Some(32), Some(7))
    );
    assert_eq!(e.sample.len(), 2);
    assert_eq!((d.blocks, d.counts.blocks_stored), (4, 4));
    let json = serde_json::to_value(&d).unwrap();
    assert_eq!(json["endpoints"][0]["engine_block_size"], 32);
    let s = ix.stats();
    assert_eq!((s.endpoints, s.blocks, s.credits), (1, 4, 4));
    assert!(s.bytes > 0);
}

/// The memory figure of the module docs: one endpoint filled to the default bound with
/// 32-token engine blocks (E = 2C), as [`PreciseIndex::stats`] estimates it (map capacity
/// included). Measured 213 B per canonical block (232 B with the linked LRU and the
/// per-endpoint credit map this replaced).
#[test]
fn memory_at_the_bound_is_as_documented() {
    let ix = index(DEFAULT_CAPACITY_PER_ENDPOINT, None);
    let a = ep("a", None);
    // 4,096 prompts of 32 engine blocks of 32 tokens: 262,144 canonical blocks.
    for p in 0..4096u32 {
        let toks: Vec<u32> = (0..1024).map(|t| p * 100_000 + t).collect();
        let first = u64::from(p) * 1000;
        let b = batch(u64::from(p), vec![stored(32, &toks, first, None)]);
        ix.apply_for_model(&a, Some("m"), &b, 0);
    }
    let s = ix.stats();
    assert_eq!((s.blocks, s.credits), (262_144, 262_144));
    let per_block = s.bytes / s.credits;
    assert!((150..=220).contains(&per_block), "{per_block} B per block");
}

/// Regression (adversarial try): the same 1,600 tokens announced again and again under new
/// engine hashes kept 100 canonical blocks but grew the engine-block table without bound
/// (600,000 records, RSS 43 → 209 MB). Engine blocks are bounded too: `cap × ⌈C / E⌉`.
#[test]
fn aliases_of_the_same_tokens_are_bounded_in_engine_blocks() {
    let ix = index(100, None);
    let a = ep("a", None);
    let toks = prompt(1_600);
    for round in 0..50u64 {
        let b = batch(round, vec![stored(16, &toks, 1 + round * 1_000, None)]);
        ix.apply_for_model(&a, Some("m"), &b, 0);
    }
    let d = ix.dump(0);
    let e = &d.endpoints[0];
    assert_eq!((e.blocks_held, e.engine_blocks), (100, 100));
    // Still matched in full.
    assert_eq!(matched(&ix, &a, &toks), 100);
}

/// Regression (adversarial try): a `BlockRemoved` with `medium: "CPU"` (an offloaded copy
/// evicted) removed the blocks stored in the GPU tier. Other tiers are skipped and counted.
#[test]
fn other_tiers_are_skipped_and_never_remove_the_gpu_copy() {
    let ix = index(1024, None);
    let a = ep("a", None);
    let toks = prompt(64);
    let gpu = |mut ev: KvEvent, m: &str| {
        match &mut ev {
            KvEvent::BlockStored(b) => b.medium = Some(m.into()),
            KvEvent::BlockRemoved(b) => b.medium = Some(m.into()),
            KvEvent::AllBlocksCleared => {}
        }
        ev
    };
    let b = batch(
        0,
        vec![
            gpu(stored(16, &toks, 1, None), "GPU"),
            gpu(stored(16, &prompt(32), 100, None), "CPU"),
            gpu(removed(&[1, 2, 3, 4]), "CPU"),
        ],
    );
    let c = ix.apply_for_model(&a, Some("m"), &b, 0);
    assert_eq!((c.skipped_medium, c.engine_blocks_removed), (2 + 4, 0));
    assert_eq!(matched(&ix, &a, &toks), 4);
    ix.apply_for_model(&a, Some("m"), &batch(1, vec![gpu(removed(&[3]), "gpu")]), 0);
    assert_eq!(matched(&ix, &a, &toks), 2);
}
