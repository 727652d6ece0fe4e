//! One endpoint's part of the precise index: its engine blocks (engine hash → what they
//! produced, the keys of removals), the order of its speculative credits, and counts. Its
//! credits themselves (refcounts included) live in the shared map ([`Shards`]), one lookup
//! per canonical block. Events are re-cut from the engine's block size E to the canonical
//! size C by carrying the tokens past the last canonical boundary along the engine's chain.

use super::engine_blocks::EngineBlocks;
use super::holders::{Confirmed, Shards, Speculated};
use super::stats::KvEventCounts;
use crate::prefix::hash::{chain, seed, token_block_hash};
use pdgate_api::kv_events::{BlockStored, EngineHash};
use smallvec::SmallVec;
use std::collections::VecDeque;

/// What one engine block produced.
#[derive(Debug)]
pub(super) struct EngineBlock {
    /// Canonical chain hash at the last canonical boundary at or before this block's end.
    chain: u64,
    /// Tokens after that boundary (fewer than C), to be completed by the next engine block.
    carry: Box<[u32]>,
    /// Engine blocks whose tokens are in `carry` (this one included).
    carry_from: SmallVec<[EngineHash; 2]>,
    /// Canonical blocks this engine block completed and still credits.
    owned: SmallVec<[u64; 4]>,
    /// Canonical blocks completed by a later engine block with some of this block's tokens:
    /// `(that block, canonical hash)`; removing this block drops them too.
    feeds: SmallVec<[(EngineHash, u64); 1]>,
}

/// Limits shared by every endpoint of an index.
pub(super) struct Limits<'a> {
    pub shards: &'a Shards,
    /// Canonical block size C (tokens).
    pub block: usize,
    /// Canonical blocks per endpoint.
    pub cap: usize,
}

/// One endpoint's state. Guarded by its own mutex (one writer per endpoint: its
/// subscriber); readers never take it.
#[derive(Debug)]
pub(super) struct EndpointIndex {
    pub id: u32,
    pub name: String,
    /// Set when the endpoint was dropped from the index; a writer holding a stale handle
    /// looks it up again.
    pub dead: bool,
    engine: EngineBlocks<EngineBlock>,
    /// Canonical blocks credited, confirmed or speculative (each counted once).
    held: usize,
    /// Of which speculative.
    speculative: usize,
    /// `(until_ms, hash)` in credit order (the TTL is fixed, so also in expiry order).
    spec_queue: VecDeque<(u64, u64)>,
    pub engine_block_size: Option<u32>,
    pub last_seq: Option<u64>,
}

impl EndpointIndex {
    pub(super) fn new(id: u32, name: String) -> Self {
        EndpointIndex {
            id,
            name,
            dead: false,
            engine: EngineBlocks::default(),
            held: 0,
            speculative: 0,
            spec_queue: VecDeque::new(),
            engine_block_size: None,
            last_seq: None,
        }
    }

    /// Canonical blocks credited (confirmed and speculative).
    pub(super) fn blocks(&self) -> usize {
        self.held
    }

    pub(super) fn engine_blocks(&self) -> usize {
        self.engine.len()
    }

    pub(super) fn speculative(&self) -> usize {
        self.speculative
    }

    /// Up to `n` of the canonical hashes credited, smallest first.
    pub(super) fn sample(&self, shards: &Shards, n: usize) -> Vec<String> {
        let owned = self.engine.values().flat_map(|b| b.owned.iter().copied());
        let spec = self.spec_queue.iter().map(|(_, h)| *h);
        let mut v: Vec<u64> = owned
            .chain(spec)
            .filter(|h| shards.credits(*h, self.id))
            .collect();
        v.sort_unstable();
        v.dedup();
        v.into_iter().take(n).map(|h| format!("{h:016x}")).collect()
    }

    /// Heap estimate (bytes) of this endpoint's own tables.
    pub(super) fn bytes(&self) -> usize {
        let carried: usize = self.engine.values().map(|b| b.carry.len() * 4).sum();
        self.engine.bytes() + carried + self.spec_queue.capacity() * 16 + self.name.capacity()
    }

    /// Applies one `BlockStored`. `model` seeds the chain of a prompt's first block (a
    /// LoRA block is seeded with its adapter's name instead).
    pub(super) fn store(
        &mut self,
        lim: &Limits<'_>,
        bs: &BlockStored,
        model: Option<&str>,
        out: &mut KvEventCounts,
    ) {
        let n = bs.block_hashes.len() as u64;
        let e = bs.block_size as usize;
        if !bs.is_full_attention() {
            out.skipped_hybrid += n;
            return;
        }
        if bs.has_extra_keys {
            out.skipped_extra_keys += n;
            return;
        }
        if bs.lora_id.is_some() && bs.lora_name.is_none() {
            out.skipped_lora += n;
            return;
        }
        if e == 0 || bs.token_ids.len() as u64 != n * e as u64 {
            out.malformed += n;
            return;
        }
        self.engine_block_size = Some(bs.block_size);
        let (mut at, mut carry, mut carry_from) = match bs.parent_block_hash {
            None => match bs.lora_name.as_deref().or(model) {
                Some(m) => (seed(m), Vec::new(), SmallVec::new()),
                None => {
                    out.model_unknown += n;
                    return;
                }
            },
            Some(p) => match self.engine.peek(&p) {
                Some(b) => (b.chain, b.carry.to_vec(), b.carry_from.clone()),
                None => {
                    out.orphans += n;
                    return;
                }
            },
        };
        let c = lim.block;
        for (k, &hk) in bs.block_hashes.iter().enumerate() {
            if let Some(b) = self.engine.touch(&hk) {
                out.duplicates += 1;
                at = b.chain;
                carry.clear();
                carry.extend_from_slice(&b.carry);
                carry_from.clone_from(&b.carry_from);
                continue;
            }
            let mut toks = &bs.token_ids[k * e..(k + 1) * e];
            let mut owned: SmallVec<[u64; 4]> = SmallVec::new();
            let mut fed_by: SmallVec<[EngineHash; 2]> = SmallVec::new();
            if !carry.is_empty() {
                let need = c - carry.len();
                let take = need.min(toks.len());
                carry.extend_from_slice(&toks[..take]);
                toks = &toks[take..];
                if carry.len() == c {
                    at = chain(at, token_block_hash(&carry));
                    owned.push(at);
                    fed_by = std::mem::take(&mut carry_from);
                    carry.clear();
                } else {
                    carry_from.push(hk);
                }
            }
            let mut chunks = toks.chunks_exact(c);
            for chunk in &mut chunks {
                at = chain(at, token_block_hash(chunk));
                owned.push(at);
            }
            let left = chunks.remainder();
            if !left.is_empty() {
                carry.extend_from_slice(left);
                carry_from.push(hk);
            }
            if let Some(&first) = owned.first() {
                for x in fed_by.iter().filter(|x| **x != hk) {
                    if let Some(xb) = self.engine.peek_mut(x) {
                        xb.feeds.push((hk, first));
                    }
                }
            }
            for &h in &owned {
                self.credit(lim.shards, h, out);
            }
            self.engine.put(
                hk,
                EngineBlock {
                    chain: at,
                    carry: carry.as_slice().into(),
                    carry_from: carry_from.clone(),
                    owned,
                    feeds: SmallVec::new(),
                },
            );
            out.engine_blocks_stored += 1;
        }
        self.bound(lim, out);
    }

    /// Applies one removed engine block.
    pub(super) fn remove(&mut self, shards: &Shards, hk: EngineHash, out: &mut KvEventCounts) {
        match self.engine.pop(&hk) {
            Some(b) => {
                out.engine_blocks_removed += 1;
                self.drop_block(shards, b, out);
            }
            None => out.unknown_removed += 1,
        }
    }

    /// Drops every credit (events and speculation) and every engine block. Every
    /// confirmed credit is in the `owned` list of an engine block that produced it, and
    /// every speculative one has an entry in the speculative queue.
    pub(super) fn reset(&mut self, shards: &Shards, out: &mut KvEventCounts) {
        for b in self.engine.values() {
            for h in &b.owned {
                shards.clear(*h, self.id);
            }
        }
        for (_, h) in &self.spec_queue {
            shards.clear(*h, self.id);
        }
        out.blocks_removed += self.held as u64;
        self.held = 0;
        self.speculative = 0;
        self.engine.clear();
        self.spec_queue = VecDeque::new();
    }

    /// Credits `hashes` speculatively until `until_ms` (blocks already confirmed are left
    /// as they are); stops at the bound.
    pub(super) fn speculate(
        &mut self,
        lim: &Limits<'_>,
        hashes: &[u64],
        until_ms: u64,
        out: &mut KvEventCounts,
    ) {
        for &h in hashes {
            let may_add = self.held < lim.cap;
            match lim.shards.speculate(h, self.id, until_ms, may_add) {
                Speculated::Added => {
                    self.held += 1;
                    self.speculative += 1;
                    self.spec_queue.push_back((until_ms, h));
                    out.speculative_added += 1;
                }
                Speculated::Refreshed => self.spec_queue.push_back((until_ms, h)),
                Speculated::Held => {}
                Speculated::Full => break,
            }
        }
    }

    /// Sweeps speculative credits that expired at `now_ms` unconfirmed.
    pub(super) fn expire(&mut self, shards: &Shards, now_ms: u64, out: &mut KvEventCounts) {
        while let Some(&(until, h)) = self.spec_queue.front() {
            if until > now_ms {
                break;
            }
            self.spec_queue.pop_front();
            if shards.expire(h, self.id, until) {
                self.held -= 1;
                self.speculative -= 1;
                out.speculative_expired += 1;
            }
        }
    }

    fn credit(&mut self, shards: &Shards, h: u64, out: &mut KvEventCounts) {
        match shards.confirm(h, self.id) {
            Confirmed::New => {
                self.held += 1;
                out.blocks_stored += 1;
            }
            Confirmed::FromSpeculative => {
                self.speculative -= 1;
                out.speculative_confirmed += 1;
                out.blocks_stored += 1;
            }
            Confirmed::Again => {}
        }
    }

    fn release(&mut self, shards: &Shards, h: u64, out: &mut KvEventCounts) {
        if shards.release(h, self.id) {
            self.held -= 1;
            out.blocks_removed += 1;
        }
    }

    fn drop_block(&mut self, shards: &Shards, b: EngineBlock, out: &mut KvEventCounts) {
        for h in b.owned {
            self.release(shards, h, out);
        }
        for (owner, h) in b.feeds {
            let still = self.engine.peek_mut(&owner).is_some_and(|ob| {
                let i = ob.owned.iter().position(|x| *x == h);
                i.map(|i| ob.owned.swap_remove(i)).is_some()
            });
            if still {
                self.release(shards, h, out);
            }
        }
    }

    /// Evicts least recently stored (or re-announced) engine blocks, then the oldest
    /// speculative credits, until the endpoint holds at most `cap` canonical blocks and at
    /// most `cap × ⌈C / E⌉` engine blocks (a publisher announcing the same tokens under ever
    /// new engine hashes adds engine blocks, not canonical ones).
    fn bound(&mut self, lim: &Limits<'_>, out: &mut KvEventCounts) {
        let e = self
            .engine_block_size
            .map_or(lim.block, |e| e.max(1) as usize);
        let engine_cap = lim.cap.saturating_mul(lim.block.div_ceil(e).max(1));
        while self.held > lim.cap || self.engine.len() > engine_cap {
            if let Some((_, b)) = self.engine.pop_oldest() {
                out.evicted += 1;
                out.engine_blocks_removed += 1;
                self.drop_block(lim.shards, b, out);
            } else if let Some((_, h)) = self.spec_queue.pop_front() {
                if lim.shards.drop_speculative(h, self.id) {
                    self.held -= 1;
                    self.speculative -= 1;
                }
            } else {
                break;
            }
        }
    }
}
