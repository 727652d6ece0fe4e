//! `precise-prefix-cache-producer` — the precise prefix index, fed by the engines' KV events.
//!
//! - **Type:** `precise-prefix-cache-producer`
//! - **Extension points:** data producer (per-request block hashes and the index, read by
//!   `prefix-cache-scorer` and `prefix-based-pd-decider` that name it in
//!   `prefixMatchInfoProducerName`); PreRequest (speculative credit of the picked endpoints,
//!   when `speculativeIndexing` is on).
//! - **Parameters** (llm-d names and defaults; strict): `tokenProcessorConfig` {`blockSize`
//!   (alias `blockSizeTokens`, canonical tokens per block, default 16), `hashSeed` (accepted;
//!   pdgate's keys need no seed)}; `kvEventsConfig` {`zmqEndpoint` (global socket, default
//!   none), `topicFilter` (default `kv@`), `concurrency` (4), `discoverPods` (true),
//!   `podDiscoveryConfig` {`socketPort` (5557), `replaySocketPort` (default none: replay
//!   off), `podLabelSelector`, `podNamespace`}, `engineType` (`vllm`), `snapshotPort`};
//!   `indexerConfig` {`kvBlockIndexConfig` {`inMemoryConfig`, `enableMetrics`,
//!   `metricsLoggingInterval`}, `tokenizersPoolConfig`, `prefixStoreConfig`,
//!   `kvCacheBackendConfigs`} (accepted; pdgate's index is in memory, bounded per endpoint);
//!   `speculativeIndexing` (default false); `speculativeTTL` (Go duration, default `2s`).
//!   pdgate extensions: `maxBlocksPerEndpoint` (canonical blocks, default 262144);
//!   `maxPrefixBlocksToMatch` (blocks hashed per prompt, default 1024).
//! - **Inputs:** token-id prompts (from the client or `token-producer`); the engines' KV
//!   events, applied by the server's subscribers
//!   ([`crate::Scheduler::kv_event_indexes`], [`crate::prefix::PreciseIndex::apply`]).
//! - **Outputs:** per endpoint, the run of the prompt's blocks its engine holds (see
//!   [`crate::prefix::precise`] for keys, re-cutting, bounds and speculation).
//! - **Limitations:** text prompts match nothing (engines report token ids; put a
//!   `token-producer` first); `redisConfig` / `costAwareMemoryConfig` backends are not
//!   supported (an error); `sglang` events are not decoded; `fullReportRepair` is not
//!   supported. Source: llm-d router `precise-prefix-cache-producer` README, llm-d-kv-cache
//!   `docs/configuration.md`.

use crate::plugin::PreRequest;
use crate::plugin_build::{decode, effective, BuildCtx, Built, PluginError, PluginType, Stage};
use crate::prefix::precise::{
    IndexerConfig, KvEventsConfig, PreciseSettings, TokenProcessorConfig,
    DEFAULT_CAPACITY_PER_ENDPOINT,
};
use crate::prefix::{BlockHasher, PreciseIndex, PrefixSource};
use crate::request::{RequestCtx, SchedulingResult};
use serde::{Deserialize, Serialize};
use serde_yaml_ng::Value;
use std::sync::Arc;

/// Registry entry.
pub const TYPE: PluginType = PluginType {
    name: "precise-prefix-cache-producer",
    stage: Stage::Producer,
    build,
};

/// Parameters (llm-d names and defaults, plus two pdgate extensions).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct Params {
    /// Canonical block size (and llm-d's hash seed, unused).
    pub token_processor_config: TokenProcessorConfig,
    /// llm-d's indexer settings (accepted).
    pub indexer_config: IndexerConfig,
    /// Where the events come from.
    pub kv_events_config: KvEventsConfig,
    /// Credit the picked endpoints at pick time (default false).
    pub speculative_indexing: bool,
    /// TTL of speculative credits, Go duration (default `2s`).
    #[serde(rename = "speculativeTTL")]
    pub speculative_ttl: String,
    /// pdgate: canonical blocks per endpoint (default 262144).
    pub max_blocks_per_endpoint: usize,
    /// pdgate: blocks hashed per prompt (default 1024).
    pub max_prefix_blocks_to_match: usize,
}

impl Default for Params {
    fn default() -> Self {
        Params {
            token_processor_config: TokenProcessorConfig::default(),
            indexer_config: IndexerConfig::default(),
            kv_events_config: KvEventsConfig::default(),
            speculative_indexing: false,
            speculative_ttl: "2s".into(),
            max_blocks_per_endpoint: DEFAULT_CAPACITY_PER_ENDPOINT,
            max_prefix_blocks_to_match: 1024,
        }
    }
}

impl Params {
    /// The index settings these parameters give.
    ///
    /// Errors: the field that is out of range or unreadable.
    pub fn settings(&self) -> Result<PreciseSettings, PluginError> {
        for (field, v) in [
            (
                "tokenProcessorConfig.blockSize",
                self.token_processor_config.block_size,
            ),
            ("maxBlocksPerEndpoint", self.max_blocks_per_endpoint),
            ("maxPrefixBlocksToMatch", self.max_prefix_blocks_to_match),
            (
                "kvEventsConfig.concurrency",
                self.kv_events_config.concurrency,
            ),
        ] {
            if v == 0 {
                return Err(PluginError::invalid(field, "must be greater than 0"));
            }
        }
        let pod = &self.kv_events_config.pod_discovery_config;
        if pod.socket_port == 0 {
            return Err(PluginError::invalid(
                "kvEventsConfig.podDiscoveryConfig.socketPort",
                "must be a port number from 1 to 65535",
            ));
        }
        match pod.replay_socket_port {
            Some(0) => {
                return Err(PluginError::invalid(
                    "kvEventsConfig.podDiscoveryConfig.replaySocketPort",
                    "must be a port number from 1 to 65535",
                ))
            }
            Some(r) if r == pod.socket_port => {
                return Err(PluginError::invalid(
                    "kvEventsConfig.podDiscoveryConfig.replaySocketPort",
                    "must differ from socketPort (one engine binds both)",
                ))
            }
            _ => {}
        }
        if self.kv_events_config.engine_type != "vllm" {
            return Err(PluginError::invalid(
                "kvEventsConfig.engineType",
                format!(
                    "`{}` is not supported (pdgate decodes vLLM's events: `vllm`)",
                    self.kv_events_config.engine_type
                ),
            ));
        }
        let ttl = crate::flow::duration::parse(&self.speculative_ttl)
            .map_err(|e| PluginError::invalid("speculativeTTL", e))?;
        if self.speculative_indexing && ttl.is_zero() {
            return Err(PluginError::invalid(
                "speculativeTTL",
                "must be greater than 0 when speculativeIndexing is on",
            ));
        }
        Ok(PreciseSettings {
            hasher: BlockHasher {
                block_tokens: self.token_processor_config.block_size,
                max_blocks: self.max_prefix_blocks_to_match,
            },
            capacity_per_endpoint: self.max_blocks_per_endpoint,
            speculative_ttl_ms: self
                .speculative_indexing
                .then(|| u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX)),
            events: self.kv_events_config.clone(),
        })
    }
}

/// The producer: owns the index; credits picks speculatively when configured.
#[derive(Debug)]
pub struct PrecisePrefixCacheProducer {
    index: Arc<PreciseIndex>,
}

impl PreRequest for PrecisePrefixCacheProducer {
    /// Credits the prompt's blocks to the endpoints picked for prefill and decode (both
    /// engines will hold them) from the request's [`RequestCtx::now_ms`] until the TTL
    /// passes or their events confirm them.
    fn pre_request(&self, ctx: &RequestCtx<'_>, result: &SchedulingResult) {
        let Some(hashes) = ctx.state().block_hashes(self.index.slot()) else {
            return;
        };
        let now = ctx.now_ms();
        for pick in std::iter::once(&result.decode).chain(result.prefill.as_ref()) {
            if !pick.endpoint.load.is_retired() {
                self.index.speculate(&pick.endpoint, hashes, now);
            }
        }
    }
}

fn build(params: Option<&Value>, ctx: &mut BuildCtx<'_>) -> Result<Built, PluginError> {
    let p: Params = decode(params)?;
    let settings = p.settings()?;
    let speculative = settings.speculative_ttl_ms.is_some();
    let index = Arc::new(PreciseIndex::new(ctx.next_slot, settings));
    ctx.next_slot += 1;
    Ok(Built {
        pre_request: speculative.then(|| {
            Arc::new(PrecisePrefixCacheProducer {
                index: index.clone(),
            }) as Arc<dyn PreRequest>
        }),
        index: Some(PrefixSource::Precise(index)),
        params: effective(&p),
        ..Built::default()
    })
}

#[cfg(test)]
#[path = "precise_prefix_cache_producer_tests.rs"]
mod tests;
