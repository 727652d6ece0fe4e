//! `burst-prefix-cache-producer` — co-locates bursts of requests that share a prompt (e.g. the
//! samples of one RL rollout group) on the same replica(s), so that the shared prefix is
//! prefilled once instead of once per replica on a cold cache.
//!
//! - **Type:** `burst-prefix-cache-producer`
//! - **Extension points:** data producer: a prefix source ([`PrefixSource::Burst`]) read by
//!   `prefix-cache-scorer` (or any prefix consumer) with
//!   `prefixMatchInfoProducerName: <this plugin's name>`. It does not score by itself.
//! - **Parameters** (llm-d names; integers):
//!   - `windowDurationMs` (ms, default [`DEFAULT_WINDOW_DURATION_MS`] = 100; `1..=10000`);
//!   - `maxPerReplica` (requests of one group per replica, default −1 = unlimited; −1 or ≥ 1);
//!   - `blockSizeTokens` (tokens per block, default [`DEFAULT_BLOCK_SIZE_TOKENS`] = 64; > 0);
//!   - `maxPrefixTokensToMatch` (tokens, default 0: the block cap is
//!     [`DEFAULT_MAX_PREFIX_BLOCKS`] = 2048; > 0: `maxPrefixTokensToMatch / blockSizeTokens`
//!     blocks; must be 0 or ≥ `blockSizeTokens`);
//!   - `minColocateBlocks` (blocks, default 0 = off; ≥ 0);
//!   - `maxBatchSize` (requests per window, default [`DEFAULT_MAX_BATCH_SIZE`] = 1000; −1 = no
//!     cap, else ≥ 1);
//!   - `balanceBy` (`"requests"`, the default — `""` means the same — or `"tokens"`).
//! - **Inputs:** the prompt's chained block hashes (token ids, or text at 4 bytes per token:
//!   `blockSizeTokens × 4` bytes per block); the candidates of the profile reading it; each
//!   candidate's running-requests gauge (`vllm:num_requests_running`; the router's in-flight
//!   count when unknown) to break load ties.
//! - **Outputs:** for a request placed on replica R: matched blocks = all the prompt's blocks
//!   on R, 0 on every other candidate (so `prefix-cache-scorer` scores R 1 and the rest 0); a
//!   request that is not placed (no full block, batch full) gets 0 everywhere.
//! - **Placement** (one batch at a time; the batch opens with its first request and lasts
//!   `windowDurationMs`; requests with identical block hashes form a group):
//!   - a request whose group already has members among the candidates follows the group:
//!     the replica the group was last placed on while it holds fewer than `maxPerReplica`
//!     of the group, else the least-loaded replica still under `maxPerReplica`, else (all at
//!     the cap) the least-loaded one;
//!   - the first request of a group goes, with `minColocateBlocks > 0`, to the replica that
//!     already holds the longest leading run `m ≥ minColocateBlocks` of its blocks from
//!     groups placed in this batch, among replicas whose load is below the fair share
//!     `ceil(total / replicas)`; otherwise (or when none qualifies) to the least-loaded one;
//!   - "least loaded": lower batch load, then fewer running requests, then lower name. Batch
//!     load is +1 per request placed (`requests`), or, once per group and replica, the group's
//!     blocks not already held there (`tokens`).
//! - **Limitations:** llm-d holds every request for the window and places the whole batch at
//!   once (largest groups first, singletons left unplaced unless they share
//!   `minColocateBlocks` blocks with another request). pdgate's `schedule` is synchronous
//!   and takes no per-request step before it, so holding would need a new async stage in the
//!   request path; requests are instead placed as they arrive, in arrival order, and never
//!   wait. Hence: every group's first request is placed (llm-d leaves a true singleton to the
//!   other scorers); a group's first request cannot know its group's final size; the fair
//!   share counts the batch so far (plus this request), not the whole batch. Only full blocks
//!   are hashed (llm-d also hashes the last partial block), so prompts shorter than one block
//!   are never placed and prompts differing only in their last partial block form one group;
//!   block hashes are pdgate's, not llm-d's xxhash64 chain. A request is placed once per
//!   candidate set (a P/D config reading the producer in both profiles places the request
//!   among prefill and among decode candidates separately). The scheduler's cached-token
//!   estimate reads the config's first prefix producer: when that is this one, the placed
//!   replica is counted as holding the whole prompt. No metrics.
//!
//!   Source: llm-d `pkg/epp/framework/plugins/requestcontrol/dataproducer/burstprefix`
//!   (`plugin.go`, `assign.go`, `types.go`).

use crate::endpoint::EndpointState;
use crate::prefix::{BlockHasher, BuildPassThrough, PrefixSource};
use crate::registry::{decode, effective, BuildCtx, Built, PluginError, PluginType, Stage};
use crate::request::RequestState;
use serde::{Deserialize, Serialize};
use serde_yaml_ng::Value;
use smallvec::SmallVec;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Registry entry.
pub const TYPE: PluginType = PluginType {
    name: "burst-prefix-cache-producer",
    stage: Stage::Producer,
    build,
};

/// Default batch window (ms).
pub const DEFAULT_WINDOW_DURATION_MS: i64 = 100;
/// Largest accepted batch window (ms).
pub const MAX_WINDOW_DURATION_MS: i64 = 10_000;
/// Default `maxPerReplica`: −1, no cap (a whole group goes to one replica).
pub const DEFAULT_MAX_PER_REPLICA: i64 = -1;
/// Default tokens per block.
pub const DEFAULT_BLOCK_SIZE_TOKENS: i64 = 64;
/// Default `maxPrefixTokensToMatch` (tokens): 0, the cap is [`DEFAULT_MAX_PREFIX_BLOCKS`].
pub const DEFAULT_MAX_PREFIX_TOKENS_TO_MATCH: i64 = 0;
/// Blocks hashed per prompt when `maxPrefixTokensToMatch` is 0.
pub const DEFAULT_MAX_PREFIX_BLOCKS: usize = 2048;
/// Default `minColocateBlocks` (blocks): 0, no co-location of distinct groups.
pub const DEFAULT_MIN_COLOCATE_BLOCKS: i64 = 0;
/// Default `maxBatchSize` (requests per window).
pub const DEFAULT_MAX_BATCH_SIZE: i64 = 1000;
/// Default `balanceBy`.
pub const DEFAULT_BALANCE_BY: &str = "requests";

/// Parameters (llm-d names and defaults).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct Params {
    /// Batch window (ms).
    pub window_duration_ms: i64,
    /// Requests of one group per replica; −1 = unlimited.
    pub max_per_replica: i64,
    /// Tokens per block.
    pub block_size_tokens: i64,
    /// Cap on the hashed prefix (tokens); 0 = [`DEFAULT_MAX_PREFIX_BLOCKS`] blocks.
    pub max_prefix_tokens_to_match: i64,
    /// Leading blocks two groups must share to be co-located (blocks); 0 = off.
    pub min_colocate_blocks: i64,
    /// Requests per window; −1 = unlimited.
    pub max_batch_size: i64,
    /// `requests` or `tokens`.
    pub balance_by: String,
}

impl Default for Params {
    fn default() -> Self {
        Params {
            window_duration_ms: DEFAULT_WINDOW_DURATION_MS,
            max_per_replica: DEFAULT_MAX_PER_REPLICA,
            block_size_tokens: DEFAULT_BLOCK_SIZE_TOKENS,
            max_prefix_tokens_to_match: DEFAULT_MAX_PREFIX_TOKENS_TO_MATCH,
            min_colocate_blocks: DEFAULT_MIN_COLOCATE_BLOCKS,
            max_batch_size: DEFAULT_MAX_BATCH_SIZE,
            balance_by: DEFAULT_BALANCE_BY.to_string(),
        }
    }
}

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

impl Params {
    /// The validated settings and hasher.
    ///
    /// Errors: the first invalid field, named as in llm-d, with its value.
    pub fn validate(&self) -> Result<(BurstConfig, BlockHasher), PluginError> {
        let w = self.window_duration_ms;
        if !(1..=MAX_WINDOW_DURATION_MS).contains(&w) {
            return Err(PluginError::invalid(
                "windowDurationMs",
                format!("must be between 1 and {MAX_WINDOW_DURATION_MS} (current value: {w})"),
            ));
        }
        let k = self.max_per_replica;
        if k != -1 && k < 1 {
            return Err(PluginError::invalid(
                "maxPerReplica",
                format!("must be -1 (unlimited) or >= 1 (current value: {k})"),
            ));
        }
        let bs = self.block_size_tokens;
        if bs <= 0 {
            return Err(PluginError::invalid(
                "blockSizeTokens",
                format!("must be > 0 (current value: {bs})"),
            ));
        }
        let mt = self.max_prefix_tokens_to_match;
        if mt < 0 {
            return Err(PluginError::invalid(
                "maxPrefixTokensToMatch",
                format!("must be >= 0 (current value: {mt})"),
            ));
        }
        if mt > 0 && mt < bs {
            return Err(PluginError::invalid(
                "maxPrefixTokensToMatch",
                format!(
                    "must be 0 or >= blockSizeTokens ({bs}); a smaller positive value yields \
                     no prefix block (current value: {mt})"
                ),
            ));
        }
        let mc = self.min_colocate_blocks;
        if mc < 0 {
            return Err(PluginError::invalid(
                "minColocateBlocks",
                format!("must be >= 0 (current value: {mc})"),
            ));
        }
        let mb = self.max_batch_size;
        if mb != -1 && mb < 1 {
            return Err(PluginError::invalid(
                "maxBatchSize",
                format!("must be -1 (unlimited) or >= 1 (current value: {mb})"),
            ));
        }
        let balance = match self.balance_by.as_str() {
            "" | "requests" => Balance::Requests,
            "tokens" => Balance::Tokens,
            other => {
                return Err(PluginError::invalid(
                    "balanceBy",
                    format!("must be \"requests\" or \"tokens\" (current value: \"{other}\")"),
                ))
            }
        };
        let max_blocks = match mt {
            0 => DEFAULT_MAX_PREFIX_BLOCKS,
            _ => (mt / bs) as usize,
        };
        let cfg = BurstConfig {
            window_ms: w as u64,
            max_per_replica: (k > 0).then_some(k as usize),
            min_colocate_blocks: mc as usize,
            max_batch_size: (mb > 0).then_some(mb as usize),
            balance,
        };
        let hasher = BlockHasher {
            block_tokens: bs as usize,
            max_blocks,
        };
        Ok((cfg, hasher))
    }
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
/// (every call takes `now_ms`); [`PrefixSource::Burst`] passes [`crate::monotonic_ms`].
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

fn build(params: Option<&Value>, ctx: &mut BuildCtx<'_>) -> Result<Built, PluginError> {
    let mut p: Params = decode(params)?;
    let (cfg, hasher) = p.validate()?;
    if p.balance_by.is_empty() {
        p.balance_by = DEFAULT_BALANCE_BY.to_string();
    }
    let index = Arc::new(BurstIndex::new(ctx.next_slot, hasher, cfg));
    ctx.next_slot += 1;
    Ok(Built {
        index: Some(PrefixSource::Burst(index)),
        params: effective(&p),
        ..Built::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::testutil::{ep, with_ctx};
    use pdgate_api::PromptInput;

    /// A fresh request state (one request).
    fn req() -> Arc<RequestState> {
        with_ctx(&PromptInput::Tokens(vec![]), |ctx| ctx.state().clone())
    }

    fn index(yaml: &str) -> BurstIndex {
        let v: Value = serde_yaml_ng::from_str(yaml).unwrap();
        let p: Params = decode(Some(&v)).unwrap();
        let (cfg, hasher) = p.validate().unwrap();
        BurstIndex::new(0, hasher, cfg)
    }

    /// Names of the replicas `n` new requests of prompt `hashes` are placed on at `now`.
    fn place_n(
        ix: &BurstIndex,
        hashes: &[u64],
        eps: &[Arc<EndpointState>],
        n: usize,
        now: u64,
    ) -> Vec<String> {
        let c: Vec<_> = eps.iter().collect();
        (0..n)
            .map(|_| match ix.place(&req(), hashes, &c, now) {
                Some(i) => eps[i].endpoint.name.clone(),
                None => "-".into(),
            })
            .collect()
    }

    fn three() -> Vec<Arc<EndpointState>> {
        vec![ep("a", None), ep("b", None), ep("c", None)]
    }

    #[test]
    fn groups_follow_their_first_request_and_new_groups_go_least_loaded() {
        let ix = index("{}");
        let eps = three();
        let (g1, g2, g3) = ([1, 2, 3], [1, 2, 4], [7]);
        // g1 opens the batch on `a` (all loads 0, names break the tie) and stays there.
        assert_eq!(place_n(&ix, &g1, &eps, 3, 0), ["a", "a", "a"]);
        // g2 shares two blocks with g1 but is another group (minColocateBlocks 0): the
        // least-loaded replica, `b` (load 0 < 3), then `c`.
        assert_eq!(place_n(&ix, &g2, &eps, 2, 10), ["b", "b"]);
        assert_eq!(place_n(&ix, &g3, &eps, 1, 20), ["c"]);
        // Loads a 3, b 2, c 1: a fourth group goes to c, a follower of g1 still to a.
        assert_eq!(place_n(&ix, &[9, 9], &eps, 1, 30), ["c"]);
        assert_eq!(place_n(&ix, &g1, &eps, 1, 99), ["a"]);
        assert_eq!(ix.batch_requests(99), 8);
    }

    #[test]
    fn the_window_closes_the_batch() {
        let ix = index("windowDurationMs: 50");
        let eps = three();
        assert_eq!(place_n(&ix, &[1], &eps, 2, 1000), ["a", "a"]);
        // 1049 ms: still the batch opened at 1000 → a new group avoids `a` (load 2).
        assert_eq!(place_n(&ix, &[2], &eps, 1, 1049), ["b"]);
        // 1050 ms: the window [1000, 1050) has passed; loads start at 0 again and the old
        // group is forgotten: both prompts start over on `a`.
        assert_eq!(ix.batch_requests(1050), 0);
        assert_eq!(place_n(&ix, &[2], &eps, 1, 1050), ["a"]);
        assert_eq!(place_n(&ix, &[1], &eps, 1, 1051), ["b"]);
        assert_eq!(ix.batch_requests(1051), 2);
    }

    #[test]
    fn max_per_replica_fills_then_spills_to_the_least_loaded() {
        let ix = index("maxPerReplica: 2");
        let eps = three();
        // Another group first puts 1 request on `a`.
        assert_eq!(place_n(&ix, &[5], &eps, 1, 0), ["a"]);
        // The group of 7: b b (fill to k=2), then c c (least-loaded under k: c 0 < a 1),
        // then a a (the only replica under k), then all are at k: the least loaded
        // (a 3, b 2, c 2 → b by name), then c (b 3, c 2).
        assert_eq!(
            place_n(&ix, &[6], &eps, 8, 1),
            ["b", "b", "c", "c", "a", "a", "b", "c"]
        );
    }

    #[test]
    fn running_requests_break_load_ties() {
        let ix = index("{}");
        let eps = three();
        eps[0].load.set_scraped(Some(4.0), None, None);
        eps[1].load.set_scraped(Some(1.0), None, None);
        eps[2].load.set_scraped(Some(2.0), None, None);
        assert_eq!(place_n(&ix, &[1], &eps, 1, 0), ["b"]);
        // b has load 1 now: c (running 2) beats a (running 4).
        assert_eq!(place_n(&ix, &[2], &eps, 1, 0), ["c"]);
        assert_eq!(place_n(&ix, &[3], &eps, 1, 0), ["a"]);
    }

    #[test]
    fn min_colocate_blocks_puts_prefix_sharing_groups_together_up_to_the_fair_share() {
        let ix = index("minColocateBlocks: 2");
        let eps = vec![ep("a", None), ep("b", None)];
        // g1 [1,2,3] ×2 on a. g2 [1,2,4] shares 2 leading blocks with what a holds; the fair
        // share is ceil((2 + 1) / 2) = 2 and a's load is 2, so a is full: b.
        assert_eq!(place_n(&ix, &[1, 2, 3], &eps, 2, 0), ["a", "a"]);
        assert_eq!(place_n(&ix, &[1, 2, 4], &eps, 1, 0), ["b"]);
        // g3 [1,2,5]: a and b both hold 2 leading blocks; fair share ceil((3+1)/2) = 2:
        // a (load 2) is excluded, b (load 1) qualifies.
        assert_eq!(place_n(&ix, &[1, 2, 5], &eps, 1, 0), ["b"]);
        // g4 [1,9]: 1 leading block < 2 anywhere → least loaded (a 2, b 2 → a).
        assert_eq!(place_n(&ix, &[1, 9], &eps, 1, 0), ["a"]);

        // Longest run wins among replicas below the fair share.
        let ix = index("minColocateBlocks: 2");
        let eps = three();
        assert_eq!(place_n(&ix, &[1, 2, 3, 4], &eps, 1, 0), ["a"]);
        // Fair share ceil((1 + 1) / 3) = 1: a (load 1, run 2) is at it → least loaded: b.
        assert_eq!(place_n(&ix, &[1, 2, 5], &eps, 1, 0), ["b"]);
        // Fair share 1 again: a and b are at it, c holds nothing → c, and its follower too.
        assert_eq!(place_n(&ix, &[8], &eps, 2, 0), ["c", "c"]);
        // Loads a 1, b 1, c 2; fair share ceil((4 + 1) / 3) = 2. Leading runs of
        // [1,2,5,6]: a 2, b 3, c 0 → b, though a is as loaded and first by name.
        assert_eq!(place_n(&ix, &[1, 2, 5, 6], &eps, 1, 0), ["b"]);
        // Equal runs (a 2, b 2 for [1,2,9]); fair share ceil((5 + 1) / 3) = 2 → only a
        // (load 1) is below it.
        assert_eq!(place_n(&ix, &[1, 2, 9], &eps, 1, 0), ["a"]);
    }

    #[test]
    fn tokens_balance_charges_the_blocks_not_yet_held() {
        let ix = index("{balanceBy: tokens, minColocateBlocks: 1}");
        let eps = vec![ep("a", None), ep("b", None)];
        let c: Vec<_> = eps.iter().collect();
        // g1: 4 blocks on a (load a 4). Followers add nothing.
        assert_eq!(place_n(&ix, &[1, 2, 3, 4], &eps, 2, 0), ["a", "a"]);
        // g2 [1,2,3,9]: a holds a run of 3; fair share ceil((4 + 4) / 2) = 4, a's load 4 is
        // not below it → least loaded: b, charged all 4 blocks (b holds none).
        assert_eq!(place_n(&ix, &[1, 2, 3, 9], &eps, 1, 0), ["b"]);
        // g3 [1,2,3,4,5] (5 blocks): fair share ceil((8 + 5) / 2) = 7; a (load 4, run 4)
        // and b (load 4, run 3): a, charged 5 − 4 = 1 → a 5.
        assert_eq!(place_n(&ix, &[1, 2, 3, 4, 5], &eps, 1, 0), ["a"]);
        // g4 [7,8]: no run anywhere → least loaded: b (4 < 5).
        let s = req();
        assert_eq!(ix.place(&s, &[7, 8], &c, 0), Some(1));
    }

    #[test]
    fn a_request_is_placed_once_per_candidate_set() {
        let ix = index("{}");
        let eps = [
            ep("p0", None),
            ep("p1", None),
            ep("d0", None),
            ep("d1", None),
        ];
        let prefill: Vec<_> = eps[..2].iter().collect();
        let decode: Vec<_> = eps[2..].iter().collect();
        let s = req();
        let mut out = Vec::new();
        ix.match_lengths_at(&s, &[1, 2], &prefill, 0, &mut out);
        assert_eq!(out, [2, 0]);
        // Reading again (another scorer, the decider) changes nothing.
        ix.match_lengths_at(&s, &[1, 2], &prefill, 0, &mut out);
        assert_eq!(out, [2, 0]);
        assert_eq!(ix.batch_requests(0), 1);
        // Among the decode candidates the request gets its own placement, counted once.
        ix.match_lengths_at(&s, &[1, 2], &decode, 0, &mut out);
        assert_eq!(out, [2, 0]);
        assert_eq!(ix.batch_requests(0), 1);
        assert_eq!(ix.match_length_for(&s, &[1, 2], &eps[0]), 2);
        assert_eq!(ix.match_length_for(&s, &[1, 2], &eps[1]), 0);
        assert_eq!(ix.match_length_for(&s, &[1, 2], &eps[2]), 2);
        // A second request of the group follows it in both sets.
        let s2 = req();
        ix.match_lengths_at(&s2, &[1, 2], &decode, 0, &mut out);
        assert_eq!(out, [2, 0]);
        // A request without a full block is never placed.
        ix.match_lengths_at(&req(), &[], &decode, 0, &mut out);
        assert_eq!(out, [0, 0]);
        assert_eq!(ix.batch_requests(0), 2);
    }

    #[test]
    fn a_full_batch_places_nothing_more_until_the_window_closes() {
        let ix = index("{maxBatchSize: 2, windowDurationMs: 10}");
        let eps = three();
        assert_eq!(place_n(&ix, &[1], &eps, 3, 0), ["a", "a", "-"]);
        assert_eq!(place_n(&ix, &[2], &eps, 1, 9), ["-"]);
        assert_eq!(place_n(&ix, &[2], &eps, 1, 10), ["a"]);
    }

    #[test]
    fn defaults_and_token_cap() {
        let (cfg, h) = Params::default().validate().unwrap();
        assert_eq!(
            cfg,
            BurstConfig {
                window_ms: 100,
                max_per_replica: None,
                min_colocate_blocks: 0,
                max_batch_size: Some(1000),
                balance: Balance::Requests,
            }
        );
        assert_eq!((h.block_tokens, h.max_blocks), (64, 2048));
        let p = Params {
            max_prefix_tokens_to_match: 200,
            max_batch_size: -1,
            balance_by: String::new(),
            ..Params::default()
        };
        let (cfg, h) = p.validate().unwrap();
        assert_eq!((h.max_blocks, cfg.max_batch_size), (3, None));
        assert_eq!(cfg.balance, Balance::Requests);
    }

    #[test]
    fn bad_parameters_name_their_field() {
        let err = |yaml: &str| {
            let v: Value = serde_yaml_ng::from_str(yaml).unwrap();
            let p: Params = match decode(Some(&v)) {
                Ok(p) => p,
                Err(e) => return (e.path.unwrap_or_default(), e.message),
            };
            let e = p.validate().unwrap_err();
            (e.path.unwrap(), e.message)
        };
        assert_eq!(
            err("windowDurationMs: 0"),
            (
                "windowDurationMs".into(),
                "must be between 1 and 10000 (current value: 0)".into()
            )
        );
        assert_eq!(err("windowDurationMs: 10001").0, "windowDurationMs");
        assert_eq!(
            err("maxPerReplica: 0"),
            (
                "maxPerReplica".into(),
                "must be -1 (unlimited) or >= 1 (current value: 0)".into()
            )
        );
        assert_eq!(err("blockSizeTokens: 0").0, "blockSizeTokens");
        assert_eq!(
            err("maxPrefixTokensToMatch: -1").0,
            "maxPrefixTokensToMatch"
        );
        assert_eq!(
            err("maxPrefixTokensToMatch: 10").1,
            "must be 0 or >= blockSizeTokens (64); a smaller positive value yields no prefix \
             block (current value: 10)"
        );
        assert_eq!(err("minColocateBlocks: -2").0, "minColocateBlocks");
        assert_eq!(err("maxBatchSize: -3").0, "maxBatchSize");
        assert_eq!(
            err("balanceBy: bytes"),
            (
                "balanceBy".into(),
                "must be \"requests\" or \"tokens\" (current value: \"bytes\")".into()
            )
        );
        assert_eq!(err("windowDurationMs: soon").0, "windowDurationMs");
        let v: Value = serde_yaml_ng::from_str("bogus: 1").unwrap();
        let e = decode::<Params>(Some(&v)).unwrap_err();
        assert_eq!(e.key.as_deref(), Some("bogus"));
    }
}
