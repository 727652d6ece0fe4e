//! The prefix cache: `num_gpu_blocks` KV blocks of `block_size` tokens, chained block hashes,
//! refcounts, and LRU eviction of unreferenced blocks.
//!
//! A block is in exactly one of three states: referenced (refcount > 0, by running requests or
//! leases), cached (refcount 0 with a hash: reusable by a later prompt, evictable in LRU order),
//! or free (refcount 0, no hash). Blocks promised to running requests for their future output
//! are *reserved*: admission never hands them to anyone else, so a running request always gets
//! the blocks it grows into and nothing is ever preempted.

use super::events::CacheEvents;
use lru::LruCache;
use std::collections::hash_map::Entry;
use std::collections::HashMap;
use xxhash_rust::xxh3::Xxh3;

/// Index of a block in the cache, as reported in `remote_block_ids`.
pub type BlockId = u32;

/// Fingerprint of a whole prompt (xxh3 of its token ids): a lease is only handed to a decode
/// whose prompt has the same fingerprint.
pub fn prompt_fingerprint(tokens: &[u32]) -> u64 {
    let mut h = Xxh3::new();
    for t in tokens {
        h.update(&t.to_le_bytes());
    }
    h.digest()
}

/// Chained hashes of the full blocks of `tokens`: hash i covers tokens 0..(i+1)·block_size.
pub fn block_hashes(tokens: &[u32], block_size: usize) -> Vec<u64> {
    let mut prev = 0u64;
    tokens
        .chunks_exact(block_size)
        .map(|chunk| {
            let mut h = Xxh3::new();
            h.update(&prev.to_le_bytes());
            for t in chunk {
                h.update(&t.to_le_bytes());
            }
            prev = h.digest();
            prev
        })
        .collect()
}

/// Number of blocks holding `tokens` tokens.
pub fn blocks_for(tokens: usize, block_size: usize) -> usize {
    tokens.div_ceil(block_size)
}

/// The KV block pool with its prefix index.
pub struct PrefixCache {
    refcount: Vec<u32>,
    hash_of: Vec<Option<u64>>,
    by_hash: HashMap<u64, BlockId>,
    free: Vec<BlockId>,
    cached: LruCache<BlockId, ()>,
    referenced: usize,
    reserved: usize,
    /// KV events of the current step.
    pub events: CacheEvents,
}

impl PrefixCache {
    /// An empty cache of `num_blocks` blocks that records no events.
    #[cfg(test)]
    pub fn new(num_blocks: usize) -> Self {
        Self::with_events(num_blocks, CacheEvents::default())
    }

    /// An empty cache of `num_blocks` blocks recording its changes in `events`.
    pub fn with_events(num_blocks: usize, events: CacheEvents) -> Self {
        PrefixCache {
            refcount: vec![0; num_blocks],
            hash_of: vec![None; num_blocks],
            by_hash: HashMap::new(),
            free: (0..num_blocks as BlockId).rev().collect(),
            cached: LruCache::unbounded(),
            referenced: 0,
            reserved: 0,
            events,
        }
    }

    /// Capacity in blocks.
    pub fn capacity(&self) -> usize {
        self.refcount.len()
    }

    /// Blocks referenced by running requests or leases.
    pub fn referenced(&self) -> usize {
        self.referenced
    }

    /// Used KV fraction (referenced blocks / capacity), as vLLM's `kv_cache_usage_perc`.
    pub fn usage(&self) -> f64 {
        self.referenced as f64 / self.capacity() as f64
    }

    /// Blocks a new request may take now: free + cached − reserved.
    pub fn available(&self) -> usize {
        (self.free.len() + self.cached.len()).saturating_sub(self.reserved)
    }

    /// The longest chain of `hashes` present in the cache, as block ids.
    pub fn match_prefix(&self, hashes: &[u64]) -> Vec<BlockId> {
        hashes
            .iter()
            .map_while(|h| self.by_hash.get(h).copied())
            .collect()
    }

    /// How many of `blocks` are unreferenced (taking them shrinks [`Self::available`]).
    pub fn unreferenced_among(&self, blocks: &[BlockId]) -> usize {
        blocks
            .iter()
            .filter(|b| self.refcount[**b as usize] == 0)
            .count()
    }

    /// Takes a reference on a cached or referenced block.
    pub fn acquire(&mut self, id: BlockId) {
        let rc = &mut self.refcount[id as usize];
        if *rc == 0 {
            self.cached.pop(&id);
            self.referenced += 1;
        }
        *rc += 1;
    }

    /// Takes a free block, evicting the least recently used cached block when none is free.
    /// The caller checked [`Self::available`].
    pub fn allocate(&mut self) -> Option<BlockId> {
        let id = match self.free.pop() {
            Some(id) => id,
            None => {
                let (id, ()) = self.cached.pop_lru()?;
                if let Some(h) = self.hash_of[id as usize].take() {
                    self.by_hash.remove(&h);
                    self.events.removed(h);
                }
                id
            }
        };
        self.refcount[id as usize] = 1;
        self.referenced += 1;
        Some(id)
    }

    /// Promises `n` blocks to a running request.
    pub fn reserve(&mut self, n: usize) {
        self.reserved += n;
    }

    /// Returns `n` promised blocks.
    pub fn unreserve(&mut self, n: usize) {
        self.reserved -= n;
    }

    /// Allocates one block out of a reservation.
    pub fn allocate_reserved(&mut self) -> Option<BlockId> {
        self.reserved = self.reserved.checked_sub(1)?;
        self.allocate()
    }

    /// Publishes a computed full block under `hash`. A hash already published (another request
    /// computed the same prefix concurrently, or a prompt of whole blocks recomputed its last
    /// one) keeps its block; this one stays private. Returns whether the block is announced
    /// (`BlockStored`): vLLM announces a recomputed block again even when its hash is cached,
    /// and never a block that already carries its hash (a prefix hit).
    pub fn register(&mut self, id: BlockId, hash: u64) -> bool {
        if self.hash_of[id as usize].is_some() {
            return false;
        }
        if let Entry::Vacant(e) = self.by_hash.entry(hash) {
            e.insert(id);
            self.hash_of[id as usize] = Some(hash);
        }
        true
    }

    /// Forgets every hash (`/reset_prefix_cache`): cached blocks become free, referenced
    /// blocks stay with their requests but are no longer found by a prefix lookup; records
    /// `AllBlocksCleared`.
    pub fn reset(&mut self) {
        for h in &mut self.hash_of {
            *h = None;
        }
        self.by_hash.clear();
        while let Some((id, ())) = self.cached.pop_lru() {
            self.free.push(id);
        }
        self.events.cleared();
    }

    /// Drops one reference on each of `blocks` (a request's blocks in prompt order). Blocks
    /// reaching zero become cached (hashed) or free; the tail goes into the LRU first so that a
    /// prompt's last blocks are evicted before its first ones.
    pub fn release(&mut self, blocks: &[BlockId]) {
        for &id in blocks.iter().rev() {
            let rc = &mut self.refcount[id as usize];
            debug_assert!(*rc > 0, "block {id} released twice");
            *rc -= 1;
            if *rc == 0 {
                self.referenced -= 1;
                if self.hash_of[id as usize].is_some() {
                    self.cached.push(id, ());
                } else {
                    self.free.push(id);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn take(c: &mut PrefixCache, tokens: &[u32], bs: usize) -> Vec<BlockId> {
        let hashes = block_hashes(tokens, bs);
        let mut blocks = c.match_prefix(&hashes);
        for b in &blocks {
            c.acquire(*b);
        }
        while blocks.len() < blocks_for(tokens.len(), bs) {
            blocks.push(c.allocate().unwrap());
        }
        for (b, h) in blocks.iter().zip(&hashes) {
            c.register(*b, *h);
        }
        blocks
    }

    #[test]
    fn hashes_are_chained_and_prefix_stable() {
        let a: Vec<u32> = (0..40).collect();
        let mut b = a.clone();
        b[20] = 999;
        let (ha, hb) = (block_hashes(&a, 16), block_hashes(&b, 16));
        assert_eq!(ha.len(), 2);
        assert_eq!(ha[0], hb[0]);
        assert_ne!(ha[1], hb[1]);
        assert_eq!(block_hashes(&a[..32], 16), ha);
    }

    #[test]
    fn refcounted_blocks_survive_and_lru_evicts_oldest_unreferenced() {
        let bs = 4;
        let mut c = PrefixCache::new(4);
        let a: Vec<u32> = (0..8).collect();
        let b: Vec<u32> = (100..108).collect();
        let ba = take(&mut c, &a, bs);
        assert_eq!(c.usage(), 0.5);
        c.release(&ba);
        assert_eq!((c.referenced(), c.available()), (0, 4));
        let bb = take(&mut c, &b, bs);
        c.release(&bb);
        // Both prompts cached; a third evicts a's blocks (least recently used), tail first.
        assert_eq!(c.match_prefix(&block_hashes(&a, bs)).len(), 2);
        let d: Vec<u32> = (200..204).collect();
        let bd = take(&mut c, &d, bs);
        assert_eq!(c.match_prefix(&block_hashes(&a, bs)).len(), 1);
        assert_eq!(c.match_prefix(&block_hashes(&b, bs)).len(), 2);
        // A referenced block is never evicted: hold b, fill the rest.
        let hb = take(&mut c, &b, bs);
        assert_eq!(c.available(), 1);
        c.allocate().unwrap();
        assert!(c.allocate().is_none());
        assert_eq!(c.match_prefix(&block_hashes(&b, bs)), hb);
        c.release(&bd);
    }

    #[test]
    fn reservations_are_kept_out_of_available() {
        let mut c = PrefixCache::new(3);
        c.reserve(2);
        assert_eq!(c.available(), 1);
        assert!(c.allocate_reserved().is_some());
        assert_eq!(c.available(), 1);
        c.unreserve(1);
        assert_eq!(c.available(), 2);
    }
}
