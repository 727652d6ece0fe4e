//! Block hash → endpoints believed to hold it, bounded per endpoint by an LRU.
//!
//! **Bound.** At most `lru_capacity` blocks per endpoint, and only the endpoints the router
//! currently knows: [`PrefixIndex::forget`] / [`PrefixIndex::retain`] drop an endpoint that
//! left discovery or restarted (its blocks, its LRU, its name) and its id is reused by the
//! next new endpoint, so a rollout that replaces every pod leaves the index at the size of the
//! fleet, not of every pod ever seen. Memory is about `endpoints × lru_capacity × ~80` bytes
//! at most ([`PrefixStats::bytes`] gives the current estimate).

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
    /// Ids of forgotten endpoints, reused before `lrus` grows.
    free: Vec<u32>,
}

/// Size of a [`PrefixIndex`] (or the sum over several), for tests, benchmarks and metrics.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct PrefixStats {
    /// Endpoints with an entry (credited with at least one block since they were last
    /// forgotten).
    pub endpoints: usize,
    /// Distinct block hashes held by at least one endpoint.
    pub blocks: usize,
    /// (endpoint, block) pairs: the sum of the per-endpoint LRU lengths.
    pub credits: usize,
    /// Estimate of the heap used, bytes: table capacities × entry sizes (hash map slots,
    /// bitsets, LRU nodes, interned names). An estimate, not an allocator measurement.
    pub bytes: usize,
}

impl std::ops::Add for PrefixStats {
    type Output = PrefixStats;
    fn add(self, o: PrefixStats) -> PrefixStats {
        PrefixStats {
            endpoints: self.endpoints + o.endpoints,
            blocks: self.blocks + o.blocks,
            credits: self.credits + o.credits,
            bytes: self.bytes + o.bytes,
        }
    }
}

/// Clears `mask` at `word` in the bitset of block `h`; drops the block when no bit is left.
fn clear_bit(
    blocks: &mut HashMap<u64, Vec<u64>, BuildPassThrough>,
    h: u64,
    word: usize,
    mask: u64,
) {
    if let Some(set) = blocks.get_mut(&h) {
        if let Some(w) = set.get_mut(word) {
            *w &= !mask;
        }
        if set.iter().all(|w| *w == 0) {
            blocks.remove(&h);
        }
    }
}

impl Inner {
    /// Drops `endpoint`'s blocks and LRU and frees its id. False when it had no entry.
    fn forget(&mut self, endpoint: &str) -> bool {
        let Some(id) = self.ids.remove(endpoint) else {
            return false;
        };
        let fresh = LruCache::unbounded_with_hasher(BuildPassThrough);
        let lru = std::mem::replace(&mut self.lrus[id as usize], fresh);
        let (word, mask) = (id as usize / 64, 1u64 << (id % 64));
        for (h, ()) in lru.iter() {
            clear_bit(&mut self.blocks, *h, word, mask);
        }
        self.free.push(id);
        true
    }

    /// Gives memory back once tables are at most half full (after endpoints were forgotten).
    fn shrink(&mut self) {
        if self.blocks.len() <= self.blocks.capacity() / 2 {
            self.blocks.shrink_to_fit();
        }
        if self.ids.len() <= self.ids.capacity() / 2 {
            self.ids.shrink_to_fit();
        }
    }
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
                let id = match inner.free.pop() {
                    Some(id) => id,
                    None => {
                        inner
                            .lrus
                            .push(LruCache::unbounded_with_hasher(BuildPassThrough));
                        inner.lrus.len() as u32 - 1
                    }
                };
                inner.ids.insert(endpoint.to_string(), id);
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
                    clear_bit(&mut inner.blocks, old, word, mask);
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

    /// Forgets everything credited to `endpoint` (it left discovery, or its engine restarted
    /// and lost its cache): later matches on it are 0 until new blocks are recorded. Returns
    /// whether it had an entry.
    pub fn forget(&self, endpoint: &str) -> bool {
        let mut inner = self.inner.write();
        let forgot = inner.forget(endpoint);
        if forgot {
            inner.shrink();
        }
        forgot
    }

    /// Forgets every endpoint for which `keep` is false (those that left discovery); returns
    /// how many were forgotten. One write-lock hold for the whole sweep.
    pub fn retain(&self, keep: impl Fn(&str) -> bool) -> usize {
        let mut inner = self.inner.write();
        let gone: Vec<String> = inner.ids.keys().filter(|n| !keep(n)).cloned().collect();
        for name in &gone {
            inner.forget(name);
        }
        if !gone.is_empty() {
            inner.shrink();
        }
        gone.len()
    }

    /// Current size (see [`PrefixStats`]).
    pub fn stats(&self) -> PrefixStats {
        use std::mem::size_of;
        let inner = self.inner.read();
        let credits: usize = inner.lrus.iter().map(LruCache::len).sum();
        // Slot = key + value + 1 control byte; bitset words on the heap.
        let slot = size_of::<u64>() + size_of::<Vec<u64>>() + 1;
        let words: usize = inner.blocks.values().map(|s| s.capacity() * 8).sum();
        // An LRU node holds key, value and two links; its map slot one pointer and a key ref.
        let lru_entry = size_of::<u64>() + 2 * size_of::<usize>() + 2 * size_of::<usize>() + 1;
        let names: usize = inner.ids.keys().map(String::capacity).sum();
        let id_slot = size_of::<String>() + size_of::<u32>() + 1;
        PrefixStats {
            endpoints: inner.ids.len(),
            blocks: inner.blocks.len(),
            credits,
            bytes: inner.blocks.capacity() * slot
                + words
                + credits * lru_entry
                + inner.lrus.capacity() * size_of::<LruCache<u64, (), BuildPassThrough>>()
                + inner.ids.capacity() * id_slot
                + names
                + inner.free.capacity() * size_of::<u32>(),
        }
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
    fn forget_drops_credit_and_reuses_the_id() {
        let ix = index(100);
        ix.record("a", &[1, 2, 3]);
        ix.record("b", &[1, 2]);
        assert!(ix.forget("a"));
        assert!(!ix.forget("a"));
        assert_eq!(ix.match_length(&[1, 2, 3], "a"), 0);
        assert_eq!(ix.match_length(&[1, 2, 3], "b"), 2);
        let s = ix.stats();
        assert_eq!((s.endpoints, s.blocks, s.credits), (1, 2, 2));
        // A newcomer takes the freed id: the LRU table does not grow.
        ix.record("c", &[1, 9]);
        assert_eq!(ix.inner.read().lrus.len(), 2);
        assert_eq!(ix.match_length(&[1, 9], "c"), 2);
        assert_eq!(ix.retain(|n| n == "c"), 1);
        let s = ix.stats();
        assert_eq!((s.endpoints, s.blocks, s.credits), (1, 2, 2));
        assert_eq!(ix.match_length(&[1, 2], "b"), 0);
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
