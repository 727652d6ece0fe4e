//! `approx-prefix-cache-producer` — the router's own approximate prefix index.
//!
//! - **Type:** `approx-prefix-cache-producer`
//! - **Extension points:** data producer (per-request block hashes, read by
//!   `prefix-cache-scorer` and `prefix-based-pd-decider`), ResponseHeader (records blocks
//!   when an endpoint answers).
//! - **Parameters:** `blockSizeTokens` (alias `blockSize`, tokens per block, default 16);
//!   `maxPrefixBlocksToMatch` (default 256); `maxPrefixTokensToMatch` (tokens, default 0 =
//!   unset; when > 0 the block cap is `maxPrefixTokensToMatch / blockSizeTokens`);
//!   `lruCapacityPerServer` (blocks per endpoint, default 31250); `autoTune` (default true:
//!   the block size follows the engines' `vllm:cache_config_info{block_size}` when the server
//!   offers it, `Scheduler::adopt_engine_block_size`).
//! - **Inputs:** the prompt (token ids, or text at 4 bytes per token: `blockSizeTokens × 4`
//!   bytes per block) and the model name (seeds the hash chain).
//! - **Outputs:** when a phase response head arrives with a 2xx status, the prompt's full
//!   blocks are recorded on the endpoint that answered (prefill, decode or aggregated). llm-d
//!   records at pick time (PreRequest); pdgate records once the engine has the blocks, so
//!   that requests in flight together are spread by load instead of all following the first
//!   pick (design.md §4, equal-score bursts). An endpoint that left discovery (retired) is
//!   not credited; the server forgets an endpoint's blocks when it leaves or its engine
//!   restarts (`Scheduler::retain_endpoints`, `Scheduler::forget_endpoint`).
//! - **Limitations:** approximate — it learns only from this router's decisions, not from
//!   engine evictions; `autoTune` adopts the engines' block size but not their capacity
//!   (`lruCapacityPerServer` stays as configured); adopting a new size forgets what was
//!   learnt under the old one; llm-d clamps small text block sizes, pdgate does not.
//!   Source: llm-d approx-prefix-cache-producer.

use crate::plugin::{ResponseCtx, ResponseHeader};
use crate::plugin_build::{decode, effective, BuildCtx, Built, PluginError, PluginType, Stage};
use crate::prefix::{BlockHasher, PrefixIndex};
use serde::{Deserialize, Serialize};
use serde_yaml_ng::Value;
use std::sync::Arc;

/// Registry entry.
pub const TYPE: PluginType = PluginType {
    name: "approx-prefix-cache-producer",
    stage: Stage::Producer,
    build,
};

/// Parameters (llm-d names and defaults).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct Params {
    /// Tokens per block (default 16).
    #[serde(alias = "blockSize")]
    pub block_size_tokens: usize,
    /// Cap on blocks hashed per prompt (default 256).
    pub max_prefix_blocks_to_match: usize,
    /// Cap in tokens; 0 = unset. When set it overrides `maxPrefixBlocksToMatch`.
    pub max_prefix_tokens_to_match: usize,
    /// Blocks remembered per endpoint (default 31250).
    pub lru_capacity_per_server: usize,
    /// llm-d: derive the block size from engine metrics (capacity: not yet).
    pub auto_tune: bool,
}

impl Default for Params {
    fn default() -> Self {
        Params {
            block_size_tokens: 16,
            max_prefix_blocks_to_match: 256,
            max_prefix_tokens_to_match: 0,
            lru_capacity_per_server: 31250,
            auto_tune: true,
        }
    }
}

impl Params {
    /// The effective block cap.
    pub fn max_blocks(&self) -> usize {
        if self.max_prefix_tokens_to_match > 0 {
            (self.max_prefix_tokens_to_match / self.block_size_tokens.max(1)).max(1)
        } else {
            self.max_prefix_blocks_to_match
        }
    }
}

/// The producer: owns the index and records picks into it.
#[derive(Debug)]
pub struct ApproxPrefixCacheProducer {
    index: Arc<PrefixIndex>,
}

impl ResponseHeader for ApproxPrefixCacheProducer {
    /// Records the prompt's blocks on the endpoint that answered 2xx: from then on the
    /// engine holds them. Recording at response rather than at pick time keeps a burst of
    /// identical prompts from piling onto the first endpoint picked before any of them ran.
    fn response_header(&self, ctx: &ResponseCtx<'_>, _out: &mut Vec<(String, String)>) {
        // An endpoint that left discovery while this request ran is not credited: its entry
        // was forgotten and must not come back (the index stays bounded by the fleet).
        if !(200..300).contains(&ctx.status) || ctx.endpoint.load.is_retired() {
            return;
        }
        if let Some(hashes) = ctx.state.block_hashes(self.index.slot()) {
            self.index.record(ctx.endpoint, hashes);
        }
    }
}

fn build(params: Option<&Value>, ctx: &mut BuildCtx<'_>) -> Result<Built, PluginError> {
    let p: Params = decode(params)?;
    for (field, v) in [
        ("blockSizeTokens", p.block_size_tokens),
        ("maxPrefixBlocksToMatch", p.max_prefix_blocks_to_match),
        ("lruCapacityPerServer", p.lru_capacity_per_server),
    ] {
        if v == 0 {
            return Err(PluginError::invalid(field, "must be greater than 0"));
        }
    }
    let hasher = BlockHasher {
        block_tokens: p.block_size_tokens,
        max_blocks: p.max_blocks(),
    };
    let index = Arc::new(
        PrefixIndex::new(ctx.next_slot, hasher, p.lru_capacity_per_server)
            .with_auto_tune(p.auto_tune, p.max_prefix_tokens_to_match),
    );
    ctx.next_slot += 1;
    Ok(Built {
        response_header: Some(Arc::new(ApproxPrefixCacheProducer {
            index: index.clone(),
        })),
        index: Some(crate::prefix::PrefixSource::Approx(index)),
        params: effective(&p),
        ..Built::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_cap_overrides_block_cap() {
        let p = Params {
            max_prefix_tokens_to_match: 16384,
            ..Params::default()
        };
        assert_eq!(p.max_blocks(), 1024);
        assert_eq!(Params::default().max_blocks(), 256);
    }
}
