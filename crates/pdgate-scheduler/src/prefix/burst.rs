//! The placement index of `burst-prefix-cache-producer`
//! ([`crate::plugins::burst_prefix_cache_producer`], whose docs give the rules): the current
//! batch, its groups of requests with identical prompt blocks, and where each group was
//! placed. Pure and clock-injected: every call takes `now_ms`.

use crate::endpoint::EndpointState;
use crate::prefix::hash::BlockHasher;
use crate::prefix::passthrough::BuildPassThrough;
use crate::request_state::RequestState;
use smallvec::SmallVec;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// What a replica's batch load counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Balance {
    /// +1 per request placed.
    Requests,
    /// Per group and replica, once: the group's blocks the replica does not already hold.
    Tokens,
}

/// Validated placement settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BurstConfig {
    /// Batch window (ms, ≥ 1).
    pub window_ms: u64,
    /// Requests of one group per replica; `None` = unlimited.
    pub max_per_replica: Option<usize>,
    /// Leading blocks shared to co-locate distinct groups; 0 = off.
    pub min_colocate_blocks: usize,
    /// Requests per window; `None` = unlimited.
    pub max_batch_size: Option<usize>,
    /// What load counts.
    pub balance: Balance,
}

/// Key of the request-state value holding a request's placements.
const STATE_KEY: &str = "burst-prefix-cache-producer";

/// A request's placements: `(producer id, replica uid)`, one per candidate set it was placed
/// among.
#[derive(Debug, Clone, Default)]
struct Placements(SmallVec<[(u64, u64); 2]>);

/// One group of the batch: the replicas it was placed on, least recently placed first.
#[derive(Debug, Default)]
struct Group {
    /// `(replica uid, requests of the group placed there)`.
    replicas: SmallVec<[(u64, usize); 2]>,
}

impl Group {
    fn count(&self, uid: u64) -> usize {
        (self.replicas.iter())
            .find(|(u, _)| *u == uid)
            .map_or(0, |(_, c)| *c)
    }
}

/// The current batch.
#[derive(Debug, Default)]
struct Batch {
    /// When its first request was placed (ms); `None` = empty.
    opened_ms: Option<u64>,
    /// Requests placed in it.
    requests: usize,
    /// Groups by their last block hash (the chain hash of the whole prompt).
    groups: HashMap<u64, Group, BuildPassThrough>,
    /// Batch load per replica uid (requests or blocks).
    load: HashMap<u64, u64>,
    /// Block hash → replicas that hold it, when placement needs it (`minColocateBlocks > 0`
    /// or `balanceBy: tokens`).
    held: HashMap<u64, SmallVec<[u64; 2]>, BuildPassThrough>,
}

impl Batch {
    fn load(&self, uid: u64) -> u64 {
        self.load.get(&uid).copied().unwrap_or(0)
    }

    /// Leading blocks of `hashes` held by `uid`. Every group records all its blocks, so
    /// holding block i implies holding blocks 0..i: a bisection finds the run.
    fn held_run(&self, hashes: &[u64], uid: u64) -> usize {
        if self.held.is_empty() {
            return 0;
        }
        hashes.partition_point(|h| self.held.get(h).is_some_and(|r| r.contains(&uid)))
    }

    /// `a` goes before `b`: lower batch load, then fewer running requests, then lower name.
    fn less(&self, a: &EndpointState, b: &EndpointState) -> bool {
        let (la, lb) = (self.load(a.load.uid()), self.load(b.load.uid()));
        if la != lb {
            return la < lb;
        }
        let (ra, rb) = (running(a), running(b));
        if ra != rb {
            return ra < rb;
        }
        a.endpoint.name < b.endpoint.name
    }

    /// The least-loaded candidate for which `eligible` holds.
    fn least_loaded(
        &self,
        candidates: &[&Arc<EndpointState>],
        eligible: impl Fn(u64) -> bool,
    ) -> Option<usize> {
        let mut best: Option<usize> = None;
        for (i, c) in candidates.iter().enumerate() {
            if !eligible(c.load.uid()) {
                continue;
            }
            if best.is_none_or(|b| self.less(c, candidates[b])) {
                best = Some(i);
            }
        }
        best
    }

    /// The replica for the next request of group `key` (blocks `hashes`).
    fn choose(
        &self,
        cfg: &BurstConfig,
        key: u64,
        hashes: &[u64],
        candidates: &[&Arc<EndpointState>],
    ) -> Option<usize> {
        let under = |count: usize| cfg.max_per_replica.is_none_or(|k| count < k);
        if let Some(group) = self.groups.get(&key) {
            // The replica this group was last placed on, among the candidates.
            let last = group.replicas.iter().rev().find_map(|(uid, count)| {
                let i = candidates.iter().position(|c| c.load.uid() == *uid)?;
                Some((i, *count))
            });
            if let Some((i, count)) = last {
                if under(count) {
                    return Some(i);
                }
                return self
                    .least_loaded(candidates, |u| under(group.count(u)))
                    .or_else(|| self.least_loaded(candidates, |_| true));
            }
        }
        if cfg.min_colocate_blocks > 0 {
            let weight = match cfg.balance {
                Balance::Requests => 1,
                Balance::Tokens => hashes.len() as u64,
            };
            let total: u64 = candidates.iter().map(|c| self.load(c.load.uid())).sum();
            let n = candidates.len() as u64;
            let fair_share = (total + weight).div_ceil(n);
            let mut best: Option<(usize, usize)> = None;
            for (i, c) in candidates.iter().enumerate() {
                let uid = c.load.uid();
                if self.load(uid) >= fair_share {
                    continue;
                }
                let m = self.held_run(hashes, uid);
                if m < cfg.min_colocate_blocks {
                    continue;
                }
                let better = match best {
                    None => true,
                    Some((b, bm)) => m > bm || (m == bm && self.less(c, candidates[b])),
                };
                if better {
                    best = Some((i, m));
                }
            }
            if let Some((i, _)) = best {
                return Some(i);
            }
        }
        self.least_loaded(candidates, |_| true)
    }

    /// Records one request of group `key` on replica `uid`.
    fn record(&mut self, cfg: &BurstConfig, key: u64, hashes: &[u64], uid: u64) {
        let group = self.groups.entry(key).or_default();
        let before = group.count(uid);
        group.replicas.retain(|(u, _)| *u != uid);
        group.replicas.push((uid, before + 1));
        let first_touch = before == 0;
        let charge = match cfg.balance {
            Balance::Requests => 1,
            Balance::Tokens if first_touch => {
                hashes.len().saturating_sub(self.held_run(hashes, uid)) as u64
            }
            Balance::Tokens => 0,
        };
        *self.load.entry(uid).or_insert(0) += charge;
        let track = cfg.min_colocate_blocks > 0 || cfg.balance == Balance::Tokens;
        if track && first_touch {
            for h in hashes {
                let holders = self.held.entry(*h).or_default();
                if !holders.contains(&uid) {
                    holders.push(uid);
                }
            }
        }
    }

    fn clear(&mut self) {
        self.opened_ms = None;
        self.requests = 0;
        self.groups.clear();
        self.load.clear();
        self.held.clear();
    }
}

/// Running requests of an endpoint: the engine's gauge, else the router's in-flight count.
fn running(e: &EndpointState) -> f64 {
    e.load
        .running()
        .unwrap_or_else(|| f64::from(e.load.in_flight()))
}

/// The producer's state: the current batch and its placements. Pure and clock-injected
/// (every call takes `now_ms`); [`PrefixSource::Burst`] passes the request's
/// [`crate::SchedulingRequest::now_ms`].
#[derive(Debug)]
pub struct BurstIndex {
    id: u64,
    slot: usize,
    hasher: BlockHasher,
    cfg: BurstConfig,
    batch: parking_lot::Mutex<Batch>,
}

impl BurstIndex {
    /// A producer using per-request hash slot `slot`.
    pub fn new(slot: usize, hasher: BlockHasher, cfg: BurstConfig) -> Self {
        static NEXT_ID: AtomicU64 = AtomicU64::new(1);
        BurstIndex {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            slot,
            hasher,
            cfg,
            batch: parking_lot::Mutex::new(Batch::default()),
        }
    }

    /// The per-request hash slot.
    pub fn slot(&self) -> usize {
        self.slot
    }

    /// How prompts are cut and hashed.
    pub fn hasher(&self) -> BlockHasher {
        self.hasher
    }

    /// The validated settings.
    pub fn config(&self) -> &BurstConfig {
        &self.cfg
    }

    /// Places the request whose state is `state` (prompt blocks `hashes`) among
    /// `candidates` at `now_ms`: the index of its replica, or `None` (no full block, no
    /// candidate, batch full). A request is placed once per candidate set: when one of its
    /// earlier placements is among `candidates`, that one is returned and nothing changes.
    pub fn place(
        &self,
        state: &RequestState,
        hashes: &[u64],
        candidates: &[&Arc<EndpointState>],
        now_ms: u64,
    ) -> Option<usize> {
        let key = *hashes.last()?;
        let mut mine = state.get::<Placements>(STATE_KEY).unwrap_or_default();
        let ours = |(p, _): &&(u64, u64)| *p == self.id;
        if let Some(i) = candidates
            .iter()
            .position(|c| mine.0.iter().filter(ours).any(|(_, u)| *u == c.load.uid()))
        {
            return Some(i);
        }
        let first = !mine.0.iter().any(|(p, _)| *p == self.id);
        let mut batch = self.batch.lock();
        if batch
            .opened_ms
            .is_some_and(|t| now_ms >= t.saturating_add(self.cfg.window_ms))
        {
            batch.clear();
        }
        if first && self.cfg.max_batch_size.is_some_and(|m| batch.requests >= m) {
            return None;
        }
        let i = batch.choose(&self.cfg, key, hashes, candidates)?;
        let uid = candidates[i].load.uid();
        batch.record(&self.cfg, key, hashes, uid);
        batch.opened_ms.get_or_insert(now_ms);
        if first {
            batch.requests += 1;
        }
        drop(batch);
        mine.0.push((self.id, uid));
        state.set(STATE_KEY, mine);
        Some(i)
    }

    /// Matched blocks per candidate (written to `out`): all of `hashes` on the request's
    /// replica ([`Self::place`]), 0 elsewhere.
    pub fn match_lengths_at(
        &self,
        state: &RequestState,
        hashes: &[u64],
        candidates: &[&Arc<EndpointState>],
        now_ms: u64,
        out: &mut Vec<usize>,
    ) {
        out.clear();
        out.resize(candidates.len(), 0);
        if let Some(i) = self.place(state, hashes, candidates, now_ms) {
            out[i] = hashes.len();
        }
    }

    /// Matched blocks on one endpoint: all of `hashes` when the request was already placed
    /// on it, else 0 (a single endpoint is no candidate set: nothing is placed).
    pub fn match_length_for(
        &self,
        state: &RequestState,
        hashes: &[u64],
        endpoint: &EndpointState,
    ) -> usize {
        let uid = endpoint.load.uid();
        let placed = state
            .get::<Placements>(STATE_KEY)
            .is_some_and(|m| m.0.iter().any(|&(p, u)| p == self.id && u == uid));
        if placed {
            hashes.len()
        } else {
            0
        }
    }

    /// Requests placed in the current batch at `now_ms` (0 once its window has passed).
    pub fn batch_requests(&self, now_ms: u64) -> usize {
        let batch = self.batch.lock();
        match batch.opened_ms {
            Some(t) if now_ms < t.saturating_add(self.cfg.window_ms) => batch.requests,
            _ => 0,
        }
    }
}
