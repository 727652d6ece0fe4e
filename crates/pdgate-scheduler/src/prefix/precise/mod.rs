//! Precise prefix index: canonical block hash → endpoints whose engines hold it, fed by the
//! engines' KV events (`BlockStored`, `BlockRemoved`, `AllBlocksCleared`) and by
//! speculative credits at pick time.
//!
//! **Keys.** pdgate's own chained block hashes ([`crate::prefix::BlockHasher`]: xxh3 of C
//! token ids per block, chained from `xxh3(model)`), recomputed from each `BlockStored`'s
//! `token_ids`, so a prompt hashed by `prefix-cache-scorer` matches directly and pdgate never
//! needs the engine's hash function or seed. The engine's hashes are kept per endpoint only
//! as the keys of removals and of parents. Engine block size E (from each event) is re-cut
//! to the canonical size C: E = 32 or 64 with C = 16 gives 2 or 4 canonical blocks per
//! engine block; E = 8 gives one canonical block per two engine blocks (tokens past the last
//! boundary are carried along the engine's chain); any E works. A prompt's first block is
//! seeded with the endpoint's model, or the adapter's name for a LoRA block
//! (`lora_name`), which is the `model` a LoRA request names.
//!
//! **What is indexed.** Full-attention dense blocks in the GPU tier only: hybrid groups,
//! blocks with extra keys (multimodal, cache salt), LoRA blocks without a name and events of
//! other tiers (`medium` `CPU`, disk: KV offloading) are skipped and counted. A
//! `BlockStored` whose parent is unknown for the endpoint (events lost, or the index started
//! after the engine) cannot be placed in its prompt: skipped and counted as orphans, never
//! guessed. Re-announced blocks are idempotent. Canonical credits are refcounted per
//! (endpoint, hash): two engine blocks with the same canonical hash do not remove each
//! other's credit. Matching does not assume an endpoint's blocks are prefix-closed (an
//! engine may evict a middle block): an endpoint's match is its run of consecutive held
//! blocks from block 0, found by walking the prompt's blocks until no candidate holds one.
//!
//! **Bound.** At most `capacity` canonical blocks per endpoint: beyond it the least recently
//! stored (or re-announced) engine blocks are evicted, then the oldest speculative credits.
//! Memory per canonical block held by one endpoint, E = 2C, as [`PreciseIndex::stats`]
//! estimates it with the tables' spare capacity: ~213 B (test
//! `memory_at_the_bound_is_as_documented`) — the engine-block record (chain state, owned
//! hashes, store stamp, map slot and store-order entry; ~150 B, halved over 2 canonical
//! blocks) and the shared map slot (hash, bitset inline for ids below 64, one pointer for
//! the rare speculative credits and extra references; 41 B, plus spare capacity). The
//! default bound of 262,144 blocks (4 M tokens at C = 16) is ~56 MB per endpoint.
//!
//! **Speculation.** With a TTL set, the picked endpoint is credited with the prompt's blocks
//! at pick time, until `now + ttl` unless its events confirm them first (llm-d
//! `speculativeIndexing`, `speculativeTTL`). Time is the caller's (`now_ms`), so tests are
//! deterministic; the scheduler passes the request's [`crate::SchedulingRequest::now_ms`].
//!
//! **Concurrency.** Each endpoint's state has its own mutex (its subscriber is the one
//! writer); the shared block map is sharded and written one block at a time, so a pick
//! reads without waiting behind a batch. The shared map is the one record of credits
//! (refcounts included): a stored or removed canonical block is one shard lookup.

mod config;
mod endpoint;
mod engine_blocks;
mod holders;
mod stats;
#[cfg(test)]
mod tests;

pub use config::{
    IndexerConfig, KvBlockIndexConfig, KvEventsConfig, PodDiscoveryConfig, TokenProcessorConfig,
};
pub use stats::{EndpointDump, KvEventCounts, PreciseDump};

use crate::endpoint::EndpointState;
use crate::prefix::hash::BlockHasher;
use crate::prefix::index::PrefixStats;
use endpoint::{EndpointIndex, Limits};
use holders::Shards;
use parking_lot::{Mutex, RwLock};
use pdgate_api::kv_events::{EventBatch, KvEvent};
use std::collections::HashMap;
use std::sync::Arc;

/// Whether an event's `medium` is the engine's GPU tier (absent: vLLM without offloading
/// sends `"GPU"` or nothing). Blocks in other tiers (`CPU`, disk) are not indexed.
fn on_gpu(medium: &Option<String>) -> bool {
    medium
        .as_deref()
        .is_none_or(|m| m.eq_ignore_ascii_case("gpu"))
}

/// Default bound per endpoint, canonical blocks (pdgate extension `maxBlocksPerEndpoint`).
pub const DEFAULT_CAPACITY_PER_ENDPOINT: usize = 262_144;

/// How a [`PreciseIndex`] is built.
#[derive(Debug, Clone, PartialEq)]
pub struct PreciseSettings {
    /// Canonical block size C and the cap on blocks hashed per prompt.
    pub hasher: BlockHasher,
    /// Canonical blocks per endpoint (≥ 1).
    pub capacity_per_endpoint: usize,
    /// TTL of speculative credits (ms); `None` = speculative indexing off.
    pub speculative_ttl_ms: Option<u64>,
    /// Where the events come from (read by the server).
    pub events: KvEventsConfig,
}

#[derive(Debug, Default)]
struct Registry {
    ids: HashMap<String, u32, foldhash::fast::RandomState>,
    /// Endpoint cell uid → id (the pick's lookups).
    uids: HashMap<u64, u32, foldhash::fast::RandomState>,
    /// Per id: the uid it was interned under and its state; `None` when free.
    slots: Vec<Option<(u64, Arc<Mutex<EndpointIndex>>)>>,
    free: Vec<u32>,
}

impl Registry {
    /// Unlinks `name` (its id stays reserved until its credits are cleared).
    fn detach(&mut self, name: &str) -> Option<Arc<Mutex<EndpointIndex>>> {
        let id = self.ids.remove(name)?;
        let (uid, state) = self.slots[id as usize].take()?;
        self.uids.remove(&uid);
        Some(state)
    }
}

/// The precise index of one `precise-prefix-cache-producer`. `Send + Sync`; shared as
/// `Arc<PreciseIndex>` by the scheduler (reads, speculation) and the server's KV-event
/// subscribers (writes).
#[derive(Debug)]
pub struct PreciseIndex {
    slot: usize,
    settings: PreciseSettings,
    registry: RwLock<Registry>,
    shards: Shards,
    totals: stats::Totals,
}

impl PreciseIndex {
    /// An empty index; `slot` is the producer's position among the scheduler's prefix
    /// producers (it keys the per-request hash cache).
    pub fn new(slot: usize, mut settings: PreciseSettings) -> Self {
        settings.capacity_per_endpoint = settings.capacity_per_endpoint.max(1);
        settings.hasher.block_tokens = settings.hasher.block_tokens.max(1);
        PreciseIndex {
            slot,
            settings,
            registry: RwLock::default(),
            shards: Shards::default(),
            totals: stats::Totals::default(),
        }
    }

    /// This producer's slot in the per-request context.
    pub fn slot(&self) -> usize {
        self.slot
    }

    /// How prompts are cut and hashed (canonical block size C, block cap).
    pub fn hasher(&self) -> BlockHasher {
        self.settings.hasher
    }

    /// Canonical block size C (tokens).
    pub fn block_tokens(&self) -> usize {
        self.settings.hasher.block_tokens
    }

    /// The settings it was built with (the server reads `events` to subscribe).
    pub fn settings(&self) -> &PreciseSettings {
        &self.settings
    }

    /// `kvEventsConfig` as configured.
    pub fn events(&self) -> &KvEventsConfig {
        &self.settings.events
    }

    fn limits(&self) -> Limits<'_> {
        Limits {
            shards: &self.shards,
            block: self.settings.hasher.block_tokens,
            cap: self.settings.capacity_per_endpoint,
        }
    }

    /// `endpoint`'s state, interned under its current load cell: a name seen under an older
    /// cell (it left discovery and came back, or restarted) is cleared first.
    fn state(&self, endpoint: &EndpointState) -> Arc<Mutex<EndpointIndex>> {
        let uid = endpoint.load.uid();
        let find = |r: &Registry| {
            let id = *r.uids.get(&uid)?;
            r.slots[id as usize].as_ref().map(|(_, s)| s.clone())
        };
        if let Some(s) = find(&self.registry.read()) {
            return s;
        }
        let name = endpoint.endpoint.name.as_str();
        let stale = {
            let mut r = self.registry.write();
            if let Some(s) = find(&r) {
                return s;
            }
            r.detach(name)
        };
        if let Some(old) = stale {
            self.drop_state(&old);
        }
        let mut r = self.registry.write();
        if let Some(s) = find(&r) {
            return s;
        }
        let id = match r.free.pop() {
            Some(id) => id,
            None => {
                r.slots.push(None);
                r.slots.len() as u32 - 1
            }
        };
        let state = Arc::new(Mutex::new(EndpointIndex::new(id, name.to_string())));
        r.slots[id as usize] = Some((uid, state.clone()));
        r.ids.insert(name.to_string(), id);
        r.uids.insert(uid, id);
        state
    }

    /// Clears a detached endpoint's credits, then frees its id.
    fn drop_state(&self, state: &Mutex<EndpointIndex>) {
        let mut out = KvEventCounts {
            clears: 1,
            ..KvEventCounts::default()
        };
        let id = {
            let mut s = state.lock();
            s.reset(&self.shards, &mut out);
            s.dead = true;
            s.id
        };
        self.totals.add(&out);
        self.registry.write().free.push(id);
    }

    /// Runs `f` on `endpoint`'s live state (looked up again if it was dropped meanwhile).
    fn with_state<R>(
        &self,
        endpoint: &EndpointState,
        f: impl FnOnce(&mut EndpointIndex) -> R,
    ) -> R {
        loop {
            let state = self.state(endpoint);
            let mut s = state.lock();
            if !s.dead {
                return f(&mut s);
            }
        }
    }

    /// Applies one batch of `endpoint`'s events; a prompt's first block is seeded with the
    /// endpoint's model, the first id of its `/v1/models` list ([`crate::EndpointLoad::models`]).
    /// Before that list is known, first blocks are skipped and counted (`model_unknown`);
    /// call [`Self::apply_for_model`] when the model is known otherwise (e.g. from the
    /// event topic). Returns what the batch did (also added to the totals).
    pub fn apply(
        &self,
        endpoint: &EndpointState,
        batch: &EventBatch,
        now_ms: u64,
    ) -> KvEventCounts {
        let models = endpoint.load.models();
        let model = models.as_ref().and_then(|m| m.first()).map(String::as_str);
        self.apply_for_model(endpoint, model, batch, now_ms)
    }

    /// [`Self::apply`] with the base model given (`None` = unknown). Events apply in
    /// order; speculative credits expired at `now_ms` are swept first. Holds the endpoint's
    /// own lock for the batch and each shard's write lock for one block.
    pub fn apply_for_model(
        &self,
        endpoint: &EndpointState,
        model: Option<&str>,
        batch: &EventBatch,
        now_ms: u64,
    ) -> KvEventCounts {
        let lim = self.limits();
        let mut out = KvEventCounts {
            batches: 1,
            events: batch.events.len() as u64,
            ..KvEventCounts::default()
        };
        self.with_state(endpoint, |s| {
            s.expire(&self.shards, now_ms, &mut out);
            s.last_seq = Some(batch.seq);
            for ev in &batch.events {
                match ev {
                    KvEvent::BlockStored(bs) if !on_gpu(&bs.medium) => {
                        out.skipped_medium += bs.block_hashes.len() as u64;
                    }
                    KvEvent::BlockRemoved(br) if !on_gpu(&br.medium) => {
                        out.skipped_medium += br.block_hashes.len() as u64;
                    }
                    KvEvent::BlockStored(bs) => s.store(&lim, bs, model, &mut out),
                    KvEvent::BlockRemoved(br) => {
                        for h in &br.block_hashes {
                            s.remove(&self.shards, *h, &mut out);
                        }
                    }
                    KvEvent::AllBlocksCleared => {
                        out.clears += 1;
                        s.reset(&self.shards, &mut out);
                    }
                }
            }
        });
        self.totals.add(&out);
        out
    }

    /// Drops everything known about endpoint `name` (it left discovery, its engine
    /// restarted, or its event stream broke without replay). Returns whether it had an
    /// entry.
    pub fn clear_endpoint(&self, name: &str) -> bool {
        let stale = self.registry.write().detach(name);
        match stale {
            Some(old) => {
                self.drop_state(&old);
                true
            }
            None => false,
        }
    }

    /// Drops every endpoint for which `keep` is false; returns how many were dropped.
    pub fn retain(&self, keep: impl Fn(&str) -> bool) -> usize {
        let gone: Vec<String> = (self.registry.read().ids.keys())
            .filter(|n| !keep(n))
            .cloned()
            .collect();
        gone.iter().filter(|n| self.clear_endpoint(n)).count()
    }

    /// Credits `endpoint` with `hashes` (a prompt's blocks, from the scorer's hasher) until
    /// `now_ms + ttl`, unless speculative indexing is off (then nothing). Blocks its engine
    /// already reported are left as they are; stops at the endpoint's bound.
    pub fn speculate(&self, endpoint: &EndpointState, hashes: &[u64], now_ms: u64) {
        let Some(ttl) = self.settings.speculative_ttl_ms else {
            return;
        };
        if hashes.is_empty() {
            return;
        }
        let lim = self.limits();
        let mut out = KvEventCounts::default();
        self.with_state(endpoint, |s| {
            s.expire(&self.shards, now_ms, &mut out);
            s.speculate(&lim, hashes, now_ms.saturating_add(ttl), &mut out);
        });
        self.totals.add(&out);
    }

    /// Sweeps the speculative credits of every endpoint that expired at `now_ms` (they are
    /// not matched once expired; this gives their memory back).
    pub fn expire(&self, now_ms: u64) {
        let states: Vec<_> = (self.registry.read().slots.iter())
            .filter_map(|s| s.as_ref().map(|(_, s)| s.clone()))
            .collect();
        let mut out = KvEventCounts::default();
        for s in states {
            s.lock().expire(&self.shards, now_ms, &mut out);
        }
        self.totals.add(&out);
    }

    /// Consecutive blocks of `hashes` from block 0 held by each of `endpoints` at `now_ms`
    /// (confirmed, or speculative beyond `now_ms`), written to `out` in order. Walks the
    /// prompt's blocks until no candidate holds one: O(longest match) lookups.
    pub fn match_lengths_at(
        &self,
        hashes: &[u64],
        endpoints: &[&Arc<EndpointState>],
        now_ms: u64,
        out: &mut Vec<usize>,
    ) {
        self.lengths(hashes, endpoints.iter().map(|e| e.load.uid()), now_ms, out);
    }

    /// [`Self::match_lengths_at`] for one endpoint.
    pub fn match_length_at(&self, hashes: &[u64], endpoint: &EndpointState, now_ms: u64) -> usize {
        let mut out = Vec::with_capacity(1);
        self.lengths(
            hashes,
            std::iter::once(endpoint.load.uid()),
            now_ms,
            &mut out,
        );
        out[0]
    }

    fn lengths(
        &self,
        hashes: &[u64],
        uids: impl ExactSizeIterator<Item = u64>,
        now_ms: u64,
        out: &mut Vec<usize>,
    ) {
        out.clear();
        out.resize(uids.len(), 0);
        let (ids, words) = {
            let r = self.registry.read();
            let ids: Vec<Option<u32>> = uids.map(|u| r.uids.get(&u).copied()).collect();
            (ids, r.slots.len().div_ceil(64))
        };
        let mut alive = vec![0u64; words];
        for id in ids.iter().flatten() {
            alive[*id as usize / 64] |= 1 << (id % 64);
        }
        if hashes.is_empty() || alive.iter().all(|w| *w == 0) {
            return;
        }
        let mut depth = vec![hashes.len(); words * 64];
        let mut held = vec![0u64; words];
        for (i, &h) in hashes.iter().enumerate() {
            self.shards.held(h, &alive, now_ms, &mut held);
            let mut any = false;
            for (w, (a, k)) in alive.iter_mut().zip(&held).enumerate() {
                let mut gone = *a & !k;
                while gone != 0 {
                    depth[w * 64 + gone.trailing_zeros() as usize] = i;
                    gone &= gone - 1;
                }
                *a = *k;
                any |= *k != 0;
            }
            if !any {
                break;
            }
        }
        for (o, id) in out.iter_mut().zip(&ids) {
            *o = id.map_or(0, |id| depth[id as usize]);
        }
    }

    fn states(&self) -> Vec<Arc<Mutex<EndpointIndex>>> {
        (self.registry.read().slots.iter())
            .filter_map(|s| s.as_ref().map(|(_, s)| s.clone()))
            .collect()
    }

    /// Canonical blocks credited to endpoint `name` (0 when unknown).
    pub fn blocks_held(&self, name: &str) -> usize {
        let state = {
            let r = self.registry.read();
            let Some(id) = r.ids.get(name) else {
                return 0;
            };
            r.slots[*id as usize].as_ref().map(|(_, s)| s.clone())
        };
        state.map_or(0, |s| s.lock().blocks())
    }

    /// Totals since the index was built.
    pub fn counts(&self) -> KvEventCounts {
        self.totals.snapshot()
    }

    /// Size, in the approximate index's terms (endpoints, distinct blocks, credits, heap
    /// estimate in bytes).
    pub fn stats(&self) -> PrefixStats {
        let (blocks, shared) = self.shards.size();
        let mut s = PrefixStats {
            blocks,
            bytes: shared,
            ..PrefixStats::default()
        };
        for st in self.states() {
            let st = st.lock();
            s.endpoints += 1;
            s.credits += st.blocks();
            s.bytes += st.bytes();
        }
        s
    }

    /// The debug dump: totals, and per endpoint (by name) its blocks, engine block size,
    /// last sequence number and up to `sample` of its canonical hashes.
    pub fn dump(&self, sample: usize) -> PreciseDump {
        let mut endpoints: Vec<EndpointDump> = (self.states().iter())
            .map(|s| {
                let s = s.lock();
                EndpointDump {
                    name: s.name.clone(),
                    blocks_held: s.blocks(),
                    speculative: s.speculative(),
                    engine_blocks: s.engine_blocks(),
                    engine_block_size: s.engine_block_size,
                    last_seq: s.last_seq,
                    sample: s.sample(&self.shards, sample),
                }
            })
            .collect();
        endpoints.sort_by(|a, b| a.name.cmp(&b.name));
        PreciseDump {
            block_tokens: self.block_tokens(),
            capacity_per_endpoint: self.settings.capacity_per_endpoint,
            speculative_ttl_ms: self.settings.speculative_ttl_ms,
            blocks: self.shards.size().0,
            counts: self.counts(),
            endpoints,
        }
    }
}
