//! Block hash → endpoints believed to hold it, bounded per endpoint by an LRU.

use super::{BlockHasher, BuildPassThrough};
use lru::LruCache;
use parking_lot::RwLock;
use std::collections::HashMap;

/// The approximate prefix index of one `approx-prefix-cache-producer`.
///
/// Endpoints are interned to small ids; each block hash maps to a bitset of ids. Each endpoint
/// has an LRU of at most `lru_capacity` blocks (llm-d `lruCapacityPerServer`); evicting a block
/// from it clears that endpoint's bit. Reads take a read lock for one lookup pass; writes
/// (after a pick) take the write lock for one prompt's blocks.
#[derive(Debug)]
pub struct PrefixIndex {
    slot: usize,
    hasher: BlockHasher,
    lru_capacity: usize,
    inner: RwLock<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    ids: HashMap<String, u32>,
    blocks: HashMap<u64, Vec<u64>, BuildPassThrough>,
    lrus: Vec<LruCache<u64, (), BuildPassThrough>>,
}

impl PrefixIndex {
    /// An empty index. `slot` is this producer's position in the scheduler (it keys the
    /// per-request hash cache of [`crate::RequestCtx`]); `lru_capacity` is in blocks (≥ 1).
    pub fn new(slot: usize, hasher: BlockHasher, lru_capacity: usize) -> Self {
        PrefixIndex {
            slot,
            hasher,
            lru_capacity: lru_capacity.max(1),
            inner: RwLock::default(),
        }
    }

    /// This producer's slot in the per-request context.
    pub fn slot(&self) -> usize {
        self.slot
    }

    /// How prompts are split into blocks.
    pub fn hasher(&self) -> BlockHasher {
        self.hasher
    }

    /// Tokens per block.
    pub fn block_tokens(&self) -> usize {
        self.hasher.block_tokens
    }

    /// Longest consecutive prefix (in blocks) of `hashes` held by each endpoint of
    /// `endpoints`, written to `out` (same order, same length). Unknown endpoints match 0.
    pub fn match_lengths(&self, hashes: &[u64], endpoints: &[&str], out: &mut Vec<usize>) {
        out.clear();
        out.resize(endpoints.len(), 0);
        let inner = self.inner.read();
        let words = inner.lrus.len().div_ceil(64);
        let mut alive = vec![0u64; words];
        let ids: Vec<Option<u32>> = endpoints
            .iter()
            .map(|n| inner.ids.get(*n).copied())
            .collect();
        for id in ids.iter().flatten() {
            alive[*id as usize / 64] |= 1 << (id % 64);
        }
        let mut depth = vec![0usize; inner.lrus.len()];
        let mut walked = 0;
        for (i, h) in hashes.iter().enumerate() {
            let Some(set) = inner.blocks.get(h) else {
                break;
            };
            let mut any = false;
            for (w, a) in alive.iter_mut().enumerate() {
                let after = *a & set.get(w).copied().unwrap_or(0);
                let mut dropped = *a & !after;
                while dropped != 0 {
                    let bit = dropped.trailing_zeros() as usize;
                    depth[w * 64 + bit] = i;
                    dropped &= dropped - 1;
                }
                *a = after;
                any |= after != 0;
            }
            if !any {
                walked = i;
                break;
            }
            walked = i + 1;
        }
        for (w, a) in alive.iter().enumerate() {
            let mut rest = *a;
            while rest != 0 {
                let bit = rest.trailing_zeros() as usize;
                depth[w * 64 + bit] = walked;
                rest &= rest - 1;
            }
        }
        for (o, id) in out.iter_mut().zip(&ids) {
            *o = id.map_or(0, |id| depth[id as usize]);
        }
    }

    /// Longest consecutive prefix (in blocks) of `hashes` held by `endpoint`.
    pub fn match_length(&self, hashes: &[u64], endpoint: &str) -> usize {
        let mut out = Vec::with_capacity(1);
        self.match_lengths(hashes, &[endpoint], &mut out);
        out[0]
    }

    /// Records that `endpoint` now holds `hashes` (a prompt's blocks). Blocks are touched
    /// last-to-first so a prompt's leading blocks are the most recent and evicted last.
    pub fn record(&self, endpoint: &str, hashes: &[u64]) {
        if hashes.is_empty() {
            return;
        }
        let mut guard = self.inner.write();
        let inner = &mut *guard;
        let id = match inner.ids.get(endpoint) {
            Some(id) => *id,
            None => {
                let id = inner.lrus.len() as u32;
                inner.ids.insert(endpoint.to_string(), id);
                inner
                    .lrus
                    .push(LruCache::unbounded_with_hasher(BuildPassThrough));
                id
            }
        };
        let (word, mask) = (id as usize / 64, 1u64 << (id % 64));
        let lru = &mut inner.lrus[id as usize];
        for &h in hashes.iter().rev() {
            if lru.get(&h).is_some() {
                continue;
            }
            lru.put(h, ());
            let set = inner.blocks.entry(h).or_default();
            if set.len() <= word {
                set.resize(word + 1, 0);
            }
            set[word] |= mask;
            if lru.len() > self.lru_capacity {
                if let Some((old, ())) = lru.pop_lru() {
                    if let Some(set) = inner.blocks.get_mut(&old) {
                        set[word] &= !mask;
                        if set.iter().all(|w| *w == 0) {
                            inner.blocks.remove(&old);
                        }
                    }
                }
            }
        }
    }

    /// Blocks currently recorded for `endpoint` (0 when unknown).
    pub fn blocks_held(&self, endpoint: &str) -> usize {
        let inner = self.inner.read();
        inner
            .ids
            .get(endpoint)
            .map_or(0, |id| inner.lrus[*id as usize].len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn longest_consecutive_prefix_per_endpoint() {
        let ix = index(100);
        ix.record("a", &[1, 2, 3]);
        ix.record("b", &[1, 2]);
        ix.record("c", &[2, 3]); // holds no first block: matches 0
        let mut out = Vec::new();
        ix.match_lengths(&[1, 2, 3, 4], &["a", "b", "c", "zz"], &mut out);
        assert_eq!(out, vec![3, 2, 0, 0]);
        ix.match_lengths(&[9], &["a"], &mut out);
        assert_eq!(out, vec![0]);
        assert_eq!(ix.match_length(&[1, 2, 3], "a"), 3);
    }

    #[test]
    fn lru_evicts_tail_blocks_first() {
        let ix = index(3);
        ix.record("a", &[1, 2, 3]);
        ix.record("a", &[1, 7]); // touches 7 then 1; evicts the LRU, which is 3
        assert_eq!(ix.blocks_held("a"), 3);
        assert_eq!(ix.match_length(&[1, 2, 3], "a"), 2);
        assert_eq!(ix.match_length(&[1, 7], "a"), 2);
    }

    #[test]
    fn many_endpoints_cross_word_boundaries() {
        let ix = index(10);
        let names: Vec<String> = (0..130).map(|i| format!("e{i}")).collect();
        for (i, n) in names.iter().enumerate() {
            ix.record(n, &[1, 2, 3][..1 + i % 3]);
        }
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let mut out = Vec::new();
        ix.match_lengths(&[1, 2, 3], &refs, &mut out);
        assert!(out.iter().enumerate().all(|(i, m)| *m == 1 + i % 3));
    }
}
