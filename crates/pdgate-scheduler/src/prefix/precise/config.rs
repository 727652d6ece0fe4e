//! The parameters of `precise-prefix-cache-producer` in llm-d's shapes (llm-d-kv-cache
//! `docs/configuration.md`: `kvEventsConfig`, `tokenProcessorConfig`, `indexerConfig`;
//! llm-d router `precise-prefix-cache-producer` README: `speculativeIndexing`,
//! `speculativeTTL`). Decoded strictly: an unknown field is an error naming it. Defaults are
//! llm-d's, defined here once.

use serde::{Deserialize, Serialize};
use serde_yaml_ng::Value;

/// `kvEventsConfig`: where the engines' KV events come from. pdgate reads it and the server
/// subscribes (ZMQ SUB per endpoint and DP rank); the scheduler itself does no IO.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct KvEventsConfig {
    /// Global-socket mode: one ZMQ address all engines publish to (llm-d binds it);
    /// `None` = per-endpoint subscribers (pod discovery mode, the default).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub zmq_endpoint: Option<String>,
    /// ZMQ subscription prefix (default `kv@`). vLLM's default topic is empty: a non-empty
    /// filter only matches engines started with a matching `topic`.
    pub topic_filter: String,
    /// llm-d's parallel event workers (default 4); pdgate's subscriber sizes its workers
    /// with it.
    pub concurrency: usize,
    /// Subscribe to every discovered endpoint (default true). pdgate discovers endpoints
    /// itself (static file or Kubernetes); this says whether to subscribe to them.
    pub discover_pods: bool,
    /// Per-endpoint subscription settings.
    pub pod_discovery_config: PodDiscoveryConfig,
    /// `vllm` (default) or `sglang`; pdgate decodes vLLM's events only.
    pub engine_type: String,
    /// llm-d's snapshot socket port (newer llm-d); accepted, unused by pdgate.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub snapshot_port: Option<u16>,
}

impl Default for KvEventsConfig {
    fn default() -> Self {
        KvEventsConfig {
            zmq_endpoint: None,
            topic_filter: "kv@".into(),
            concurrency: 4,
            discover_pods: true,
            pod_discovery_config: PodDiscoveryConfig::default(),
            engine_type: "vllm".into(),
            snapshot_port: None,
        }
    }
}

/// `kvEventsConfig.podDiscoveryConfig`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct PodDiscoveryConfig {
    /// Port of the engine's ZMQ PUB socket (default 5557); DP rank *i* publishes on
    /// `socketPort + i` (vLLM).
    pub socket_port: u16,
    /// Port of the engine's replay (ROUTER) socket, when the engine has one
    /// (`replay_endpoint` of vLLM's `--kv-events-config`); rank *i* on `+ i`. Newer llm-d
    /// has this field; for older llm-d configs it is a pdgate extension. `None` = no replay:
    /// a sequence gap clears the endpoint instead.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replay_socket_port: Option<u16>,
    /// llm-d's Kubernetes pod selector (default `llm-d.ai/inferenceServing=true`). pdgate
    /// subscribes to the endpoints its own discovery found; kept for compatibility.
    pub pod_label_selector: String,
    /// llm-d's pod namespace (default all); kept for compatibility.
    pub pod_namespace: String,
}

impl Default for PodDiscoveryConfig {
    fn default() -> Self {
        PodDiscoveryConfig {
            socket_port: 5557,
            replay_socket_port: None,
            pod_label_selector: "llm-d.ai/inferenceServing=true".into(),
            pod_namespace: String::new(),
        }
    }
}

/// `tokenProcessorConfig`: how prompts and events are cut into canonical blocks.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct TokenProcessorConfig {
    /// Tokens per canonical block (default 16; alias `blockSizeTokens`, newer llm-d). Need
    /// not match the engine's: events are re-cut to this size.
    #[serde(alias = "blockSizeTokens")]
    pub block_size: usize,
    /// llm-d's hash seed (match vLLM's `PYTHONHASHSEED`). pdgate hashes with its own
    /// function seeded by the model, so any value is accepted and none is needed.
    pub hash_seed: String,
}

impl Default for TokenProcessorConfig {
    fn default() -> Self {
        TokenProcessorConfig {
            block_size: 16,
            hash_seed: String::new(),
        }
    }
}

/// `indexerConfig` (llm-d `kvcache.Config`). pdgate's index is in memory and bounded per
/// endpoint (`maxBlocksPerEndpoint`); these fields are accepted for compatibility.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct IndexerConfig {
    /// `kvBlockIndexConfig`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kv_block_index_config: Option<KvBlockIndexConfig>,
    /// llm-d's tokenizer pool (pdgate: `token-producer`); accepted, unused.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tokenizers_pool_config: Option<Value>,
    /// llm-d's tokenization prefix store; accepted, unused.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prefix_store_config: Option<Value>,
    /// llm-d's device-tier weights; accepted, unused (every tier counts as held).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kv_cache_backend_configs: Option<Value>,
}

/// `indexerConfig.kvBlockIndexConfig`. Only the in-memory backend exists in pdgate: a
/// `redisConfig` or `costAwareMemoryConfig` is an error (unknown field).
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct KvBlockIndexConfig {
    /// `inMemoryConfig` {`size`, `podCacheSize`}; accepted, unused (the bound is per
    /// endpoint, `maxBlocksPerEndpoint`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub in_memory_config: Option<Value>,
    /// Accepted; pdgate always counts (see the index's counts and dump).
    pub enable_metrics: bool,
    /// Accepted, unused (Go duration or nanoseconds).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metrics_logging_interval: Option<Value>,
}
