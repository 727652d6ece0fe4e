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

use crate::plugin_build::{decode, effective, BuildCtx, Built, PluginError, PluginType, Stage};
pub use crate::prefix::burst::{Balance, BurstConfig, BurstIndex};
use crate::prefix::{BlockHasher, PrefixSource};
use serde::{Deserialize, Serialize};
use serde_yaml_ng::Value;
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
#[path = "burst_prefix_cache_producer_tests.rs"]
mod tests;
