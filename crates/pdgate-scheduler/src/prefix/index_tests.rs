//! Tests of the approximate prefix index (`PrefixIndex`).
use super::*;
use crate::plugins::testutil::ep;
use std::sync::Arc;

fn index(cap: usize) -> PrefixIndex {
    PrefixIndex::new(
        0,
        BlockHasher {
            block_tokens: 1,
            max_blocks: 256,
        },
        cap,
    )
}

fn eps(names: &[&str]) -> Vec<Arc<EndpointState>> {
    names.iter().map(|n| ep(n, None)).collect()
}

#[test]
fn longest_consecutive_prefix_per_endpoint() {
    let ix = index(100);
    let e = eps(&["a", "b", "c", "d", "zz"]);
    ix.record(&e[0], &[1, 2, 3]);
    ix.record(&e[1], &[1, 2]);
    ix.record(&e[2], &[1, 5]); // diverges after the first block
    ix.record(&e[3], &[6, 7]); // another chain
    let mut out = Vec::new();
    ix.match_lengths(&[1, 2, 3, 4], &e.iter().collect::<Vec<_>>(), &mut out);
    assert_eq!(out, vec![3, 2, 1, 0, 0]);
    ix.match_lengths(&[9], &[&e[0]], &mut out);
    assert_eq!(out, vec![0]);
    assert_eq!(ix.match_length(&[1, 2, 3], &e[0]), 3);
}

#[test]
fn lru_evicts_tail_blocks_first() {
    let ix = index(3);
    let a = ep("a", None);
    ix.record(&a, &[1, 2, 3]);
    ix.record(&a, &[1, 7]); // touches 7 then 1; evicts the LRU, which is 3
    assert_eq!(ix.blocks_held("a"), 3);
    assert_eq!(ix.match_length(&[1, 2, 3], &a), 2);
    assert_eq!(ix.match_length(&[1, 7], &a), 2);
}

#[test]
fn forget_drops_credit_and_reuses_the_id() {
    let ix = index(100);
    let e = eps(&["a", "b", "c"]);
    ix.record(&e[0], &[1, 2, 3]);
    ix.record(&e[1], &[1, 2]);
    assert!(ix.forget("a"));
    assert!(!ix.forget("a"));
    assert_eq!(ix.match_length(&[1, 2, 3], &e[0]), 0);
    assert_eq!(ix.match_length(&[1, 2, 3], &e[1]), 2);
    let s = ix.stats();
    assert_eq!((s.endpoints, s.blocks, s.credits), (1, 2, 2));
    // A newcomer takes the freed id: the LRU table does not grow.
    ix.record(&e[2], &[1, 9]);
    assert_eq!(ix.inner.read().lrus.len(), 2);
    assert_eq!(ix.match_length(&[1, 9], &e[2]), 2);
    assert_eq!(ix.retain(|n| n == "c"), 1);
    let s = ix.stats();
    assert_eq!((s.endpoints, s.blocks, s.credits), (1, 2, 2));
    assert_eq!(ix.match_length(&[1, 2], &e[1]), 0);
}

#[test]
fn a_name_back_under_a_new_cell_starts_without_credit() {
    let ix = index(100);
    let old = ep("a", None);
    ix.record(&old, &[1, 2, 3]);
    // The endpoint left discovery and came back: a new load cell under the same name.
    let new = ep("a", None);
    assert_eq!(ix.match_length(&[1, 2, 3], &new), 0);
    ix.record(&new, &[1]);
    assert_eq!(ix.match_length(&[1, 2, 3], &new), 1);
    assert_eq!(ix.match_length(&[1, 2, 3], &old), 0);
    let s = ix.stats();
    assert_eq!((s.endpoints, s.blocks, s.credits), (1, 1, 1));
    assert_eq!(ix.blocks_held("a"), 1);
}

/// Linear reference: walk each endpoint's blocks until the first it does not hold.
fn walked(ix: &PrefixIndex, hashes: &[u64], endpoint: &str) -> usize {
    let inner = ix.inner.read();
    let Some(id) = inner.ids.get(endpoint) else {
        return 0;
    };
    let lru = &inner.lrus[*id as usize];
    hashes.iter().take_while(|h| lru.contains(*h)).count()
}

#[test]
fn bisection_agrees_with_a_walk_under_eviction_and_forgetting() {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let ix = index(40);
    let names: Vec<String> = (0..70).map(|i| format!("e{i}")).collect();
    let e: Vec<_> = names.iter().map(|n| ep(n, None)).collect();
    let refs: Vec<&Arc<EndpointState>> = e.iter().collect();
    // Chains of a small tree, as chained hashes are: a block's hash names its whole
    // prefix, here (root, i) before the branch point and (root, branch, twig, i) after.
    let chain = |root: u64, branch: usize, twig: u64, len: usize| -> Vec<u64> {
        (0..len)
            .map(|i| {
                if i < branch {
                    root * 1_000 + i as u64
                } else {
                    ((root * 100 + branch as u64) * 10 + twig + 1) * 1_000 + i as u64
                }
            })
            .collect()
    };
    let mut out = Vec::new();
    let mut checked = 0;
    for step in 0..3_000 {
        let (root, branch, twig) = (
            rng.random_range(0..4),
            rng.random_range(0..30),
            rng.random_range(0..5),
        );
        let len = rng.random_range(1..60);
        let hashes = chain(root, branch, twig, len);
        if step % 97 == 0 {
            ix.forget(&names[rng.random_range(0..names.len())]);
        } else if rng.random_bool(0.6) {
            ix.record(refs[rng.random_range(0..refs.len())], &hashes);
        } else {
            ix.match_lengths(&hashes, &refs, &mut out);
            for (n, m) in names.iter().zip(&out) {
                assert_eq!(*m, walked(&ix, &hashes, n), "step {step}, endpoint {n}");
            }
            checked += out.iter().filter(|m| **m > 0).count();
        }
    }
    assert!(checked > 1_000, "the test exercised matches: {checked}");
}

#[test]
fn adopting_the_engine_block_size_forgets_and_recuts() {
    let a = ep("a", None);
    let off = index(100);
    assert!(!off.adopt_block_size(32), "autoTune off: nothing changes");
    let ix = PrefixIndex::new(
        0,
        BlockHasher {
            block_tokens: 16,
            max_blocks: 256,
        },
        100,
    )
    .with_auto_tune(true, 4096);
    ix.record(&a, &[1, 2, 3]);
    assert!(!ix.adopt_block_size(16), "same size: no change");
    assert!(!ix.adopt_block_size(0));
    assert_eq!(ix.blocks_held("a"), 3);
    assert!(ix.adopt_block_size(32));
    assert_eq!(ix.blocks_held("a"), 0);
    assert_eq!(ix.match_length(&[1, 2, 3], &a), 0);
    assert_eq!(
        ix.hasher(),
        BlockHasher {
            block_tokens: 32,
            max_blocks: 128
        }
    );
    assert_eq!(ix.stats().blocks, 0);
}

#[test]
fn many_endpoints_cross_word_boundaries() {
    let ix = index(10);
    let e: Vec<_> = (0..130).map(|i| ep(&format!("e{i}"), None)).collect();
    for (i, n) in e.iter().enumerate() {
        ix.record(n, &[1, 2, 3][..1 + i % 3]);
    }
    let mut out = Vec::new();
    ix.match_lengths(&[1, 2, 3], &e.iter().collect::<Vec<_>>(), &mut out);
    assert!(out.iter().enumerate().all(|(i, m)| *m == 1 + i % 3));
}
