//! Block hash → endpoints believed to hold it, bounded per endpoint by an LRU.
//!
//! Endpoints are keyed by name for the operator's calls (forget, retain, blocks held) and by
//! the uid of their current [`EndpointLoad`](crate::EndpointLoad) cell for the pick's
//! lookups; a name seen again under a new cell (it left and came back) starts with no credit.
//!
//! **Bound.** At most `lru_capacity` blocks per endpoint, and only the endpoints the router
//! currently knows: [`PrefixIndex::forget`] / [`PrefixIndex::retain`] drop an endpoint that
//! left discovery or restarted (its blocks, its LRU, its name) and its id is reused by the
//! next new endpoint, so a rollout that replaces every pod leaves the index at the size of the
//! fleet, not of every pod ever seen. Memory is about `endpoints × lru_capacity × ~80` bytes
//! at most ([`PrefixStats::bytes`] gives the current estimate).

use super::bisect::Bisect;
use super::hash::BlockHasher;
use super::passthrough::BuildPassThrough;
use crate::endpoint::EndpointState;
use lru::LruCache;
use parking_lot::RwLock;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The approximate prefix index of one `approx-prefix-cache-producer`.
///
/// Endpoints are interned to small ids; each block hash maps to a bitset of ids. Each endpoint
/// has an LRU of at most `lru_capacity` blocks (llm-d `lruCapacityPerServer`); evicting a block
/// from it clears that endpoint's bit. Reads take a read lock for one lookup pass; writes
/// (after a pick) take the write lock for one prompt's blocks.
#[derive(Debug)]
pub struct PrefixIndex {
    slot: usize,
    /// Tokens per block (changes only through [`Self::adopt_block_size`]).
    block_tokens: AtomicUsize,
    /// Cap on hashed blocks per prompt.
    max_blocks: AtomicUsize,
    /// The cap in tokens when configured so (0 = the cap is in blocks).
    max_tokens: usize,
    /// Whether [`Self::adopt_block_size`] may change the block size (llm-d `autoTune`).
    auto_tune: bool,
    lru_capacity: usize,
    inner: RwLock<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    /// Interned endpoint names. foldhash, not SipHash: a pick looks up every candidate's
    /// name (512 lookups at 512 endpoints), and the names come from discovery, not clients.
    ids: HashMap<String, u32, foldhash::fast::RandomState>,
    /// Endpoint cell uid → id: the pick's lookups (an integer key, no string compare).
    uids: HashMap<u64, u32, foldhash::fast::RandomState>,
    /// Per id, the uid it was interned under (to drop it from `uids` when forgotten).
    owners: Vec<u64>,
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
        self.uids.remove(&self.owners[id as usize]);
        let fresh = LruCache::unbounded_with_hasher(BuildPassThrough);
        let lru = std::mem::replace(&mut self.lrus[id as usize], fresh);
        let (word, mask) = (id as usize / 64, 1u64 << (id % 64));
        for (h, ()) in lru.iter() {
            clear_bit(&mut self.blocks, *h, word, mask);
        }
        self.free.push(id);
        true
    }

    /// The id of `endpoint`'s current cell, interning it when new. A name interned under an
    /// older cell is forgotten first: that lifecycle's blocks are not this one's.
    fn intern(&mut self, endpoint: &EndpointState) -> u32 {
        let uid = endpoint.load.uid();
        if let Some(id) = self.uids.get(&uid) {
            return *id;
        }
        let name = endpoint.endpoint.name.as_str();
        if self.forget(name) {
            self.shrink();
        }
        let id = match self.free.pop() {
            Some(id) => id,
            None => {
                self.lrus
                    .push(LruCache::unbounded_with_hasher(BuildPassThrough));
                self.owners.push(0);
                self.lrus.len() as u32 - 1
            }
        };
        self.ids.insert(name.to_string(), id);
        self.uids.insert(uid, id);
        self.owners[id as usize] = uid;
        id
    }

    /// Gives memory back once tables are at most half full (after endpoints were forgotten).
    fn shrink(&mut self) {
        if self.blocks.len() <= self.blocks.capacity() / 2 {
            self.blocks.shrink_to_fit();
        }
        if self.ids.len() <= self.ids.capacity() / 2 {
            self.ids.shrink_to_fit();
            self.uids.shrink_to_fit();
        }
    }
}

impl PrefixIndex {
    /// An empty index. `slot` is this producer's position in the scheduler (it keys the
    /// per-request hash cache of [`crate::RequestCtx`]); `lru_capacity` is in blocks (≥ 1).
    pub fn new(slot: usize, hasher: BlockHasher, lru_capacity: usize) -> Self {
        PrefixIndex {
            slot,
            block_tokens: AtomicUsize::new(hasher.block_tokens.max(1)),
            max_blocks: AtomicUsize::new(hasher.max_blocks),
            max_tokens: 0,
            auto_tune: false,
            lru_capacity: lru_capacity.max(1),
            inner: RwLock::default(),
        }
    }

    /// The index with `autoTune` on or off; with `max_tokens > 0` the block cap follows the
    /// block size (`max_tokens / block_tokens`) when it changes.
    pub fn with_auto_tune(mut self, on: bool, max_tokens: usize) -> Self {
        self.auto_tune = on;
        self.max_tokens = max_tokens;
        self
    }

    /// Adopts the engines' KV block size `block_tokens` (from `vllm:cache_config_info`)
    /// when `autoTune` is on and it differs from the current one: everything learnt under
    /// the old size is forgotten (its hashes cut prompts differently) and prompts are cut
    /// at the new size from then on. Returns whether the size changed (the server logs it
    /// and counts it). Requests hashed under the old size and recorded after the change
    /// leave credits that never match and age out of the LRU.
    pub fn adopt_block_size(&self, block_tokens: usize) -> bool {
        if !self.auto_tune || block_tokens == 0 || block_tokens == self.block_tokens() {
            return false;
        }
        let mut inner = self.inner.write();
        *inner = Inner::default();
        self.block_tokens.store(block_tokens, Ordering::Relaxed);
        if self.max_tokens > 0 {
            let blocks = (self.max_tokens / block_tokens).max(1);
            self.max_blocks.store(blocks, Ordering::Relaxed);
        }
        true
    }

    /// This producer's slot in the per-request context.
    pub fn slot(&self) -> usize {
        self.slot
    }

    /// How prompts are split into blocks.
    pub fn hasher(&self) -> BlockHasher {
        BlockHasher {
            block_tokens: self.block_tokens(),
            max_blocks: self.max_blocks.load(Ordering::Relaxed),
        }
    }

    /// Tokens per block.
    pub fn block_tokens(&self) -> usize {
        self.block_tokens.load(Ordering::Relaxed)
    }

    /// Longest consecutive prefix (in blocks) of `hashes` held by each endpoint of
    /// `endpoints`, written to `out` (same order, same length). Unknown endpoints match 0.
    ///
    /// Bisects instead of walking every block: the index keeps each endpoint's blocks
    /// prefix-closed along a chain (see [`Self::record`]), so the set of endpoints holding
    /// block *i* only shrinks as *i* grows, and the lengths are found with
    /// O(distinct lengths × log blocks) lookups — about 20 for a 1,024-block prompt, against
    /// 1,024 for a walk.
    pub fn match_lengths(
        &self,
        hashes: &[u64],
        endpoints: &[&std::sync::Arc<EndpointState>],
        out: &mut Vec<usize>,
    ) {
        self.lengths(hashes, endpoints.iter().map(|e| e.load.uid()), out);
    }

    /// Longest consecutive prefix (in blocks) of `hashes` held by `endpoint`.
    pub fn match_length(&self, hashes: &[u64], endpoint: &EndpointState) -> usize {
        let mut out = Vec::with_capacity(1);
        self.lengths(hashes, std::iter::once(endpoint.load.uid()), &mut out);
        out[0]
    }

    /// [`Self::match_lengths`] over endpoint cell uids.
    fn lengths(
        &self,
        hashes: &[u64],
        uids: impl ExactSizeIterator<Item = u64>,
        out: &mut Vec<usize>,
    ) {
        out.clear();
        out.resize(uids.len(), 0);
        let inner = self.inner.read();
        let words = inner.lrus.len().div_ceil(64);
        let mut alive = vec![0u64; words];
        let mut ids: Vec<Option<u32>> = Vec::with_capacity(uids.len());
        for uid in uids {
            let id = inner.uids.get(&uid).copied();
            if let Some(id) = id {
                alive[id as usize / 64] |= 1 << (id % 64);
            }
            ids.push(id);
        }
        if alive.iter().all(|w| *w == 0) || hashes.is_empty() {
            return;
        }
        let mut depth = vec![0usize; inner.lrus.len()];
        let none = vec![0u64; words];
        let mut walk = Bisect {
            blocks: &inner.blocks,
            hashes,
            alive: &alive,
            depth: &mut depth,
        };
        walk.split(0, hashes.len(), &alive, &none);
        for (o, id) in out.iter_mut().zip(&ids) {
            *o = id.map_or(0, |id| depth[id as usize]);
        }
    }

    /// Records that `endpoint` now holds `hashes` (a prompt's blocks). Blocks are touched
    /// last-to-first so a prompt's leading blocks are the most recent and evicted last.
    ///
    /// This keeps every endpoint's blocks **prefix-closed** along a chain, which
    /// [`Self::match_lengths`] relies on: any prompt holding block *i* of a chain also holds
    /// blocks 0..*i* and touches them after *i*, so an earlier block is always at least as
    /// recent as a later one, and the LRU evicts a chain from its tail.
    pub fn record(&self, endpoint: &EndpointState, hashes: &[u64]) {
        if hashes.is_empty() {
            return;
        }
        let mut guard = self.inner.write();
        let inner = &mut *guard;
        let id = inner.intern(endpoint);
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
        let uid_slot = size_of::<u64>() + size_of::<u32>() + 1;
        PrefixStats {
            endpoints: inner.ids.len(),
            blocks: inner.blocks.len(),
            credits,
            bytes: inner.blocks.capacity() * slot
                + words
                + credits * lru_entry
                + inner.lrus.capacity() * size_of::<LruCache<u64, (), BuildPassThrough>>()
                + inner.ids.capacity() * id_slot
                + inner.uids.capacity() * uid_slot
                + inner.owners.capacity() * size_of::<u64>()
                + names
                + inner.free.capacity() * size_of::<u32>(),
        }
    }
}

#[cfg(test)]
#[path = "index_tests.rs"]
mod tests;
