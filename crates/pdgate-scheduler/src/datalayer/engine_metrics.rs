//! The engine → metric-names mapping of a `core-metrics-extractor`
//! ([`crate::plugins::core_metrics_extractor`], whose docs give the parameters and rules):
//! which series of an engine's `/metrics` give pdgate's load gauges, per engine type.

use crate::plugin_params::PluginError;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Default `engineLabelKey`.
pub const DEFAULT_ENGINE_LABEL_KEY: &str = "llm-d.ai/engine-type";
/// The older label read when `engineLabelKey` is absent on an endpoint (gateway-api
/// inference extension).
pub const LEGACY_ENGINE_LABEL_KEY: &str = "inference.networking.k8s.io/engine-type";
/// Default `defaultEngine`.
pub const DEFAULT_ENGINE: &str = "vllm";
/// The engine name llm-d reserves for its fallback mapping.
pub const RESERVED_ENGINE: &str = "default";
/// Default `cacheBlockSizeLabelName`.
pub const DEFAULT_BLOCK_SIZE_LABEL: &str = "block_size";
/// Default `cacheNumBlocksLabelName`.
pub const DEFAULT_NUM_BLOCKS_LABEL: &str = "num_gpu_blocks";

fn default_label_key() -> String {
    DEFAULT_ENGINE_LABEL_KEY.into()
}

fn default_engine() -> String {
    DEFAULT_ENGINE.into()
}

/// Parameters as written.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Params {
    /// Endpoint label naming the engine type.
    #[serde(default = "default_label_key")]
    pub engine_label_key: String,
    /// Engine of endpoints without (a known) engine label.
    #[serde(default = "default_engine")]
    pub default_engine: String,
    /// User engine configs; they replace built-in ones of the same name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub engine_configs: Vec<EngineConfig>,
}

/// One `engineConfigs` entry.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct EngineConfig {
    /// Engine type (the label value).
    #[serde(default)]
    pub name: String,
    /// Waiting requests.
    #[serde(default)]
    pub queued_requests_spec: String,
    /// Running requests.
    #[serde(default)]
    pub running_requests_spec: String,
    /// KV-cache usage, 0..1.
    #[serde(default)]
    pub kv_usage_spec: String,
    /// LoRA adapters info gauge.
    #[serde(default)]
    pub lora_spec: String,
    /// Info gauge whose labels carry the cache geometry.
    #[serde(default)]
    pub cache_info_spec: String,
    /// Label of `cacheInfoSpec` holding the block size (tokens).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub cache_block_size_label_name: String,
    /// Label of `cacheInfoSpec` holding the number of blocks.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub cache_num_blocks_label_name: String,
    /// Gauge whose value is the block size (tokens).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub cache_block_size_spec: String,
    /// Gauge whose value is the number of blocks.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub cache_num_blocks_spec: String,
    /// Extra scalar metrics stored as endpoint attributes (refused, see the module docs).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub custom_metrics: Vec<CustomMetric>,
}

/// One `customMetrics` entry.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct CustomMetric {
    /// Endpoint attribute key.
    #[serde(default)]
    pub attribute_key: String,
    /// Source metric selector.
    #[serde(default)]
    pub metric_spec: String,
}

/// A PromQL instant selector: a metric name and label equalities a series must have.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetricSpec {
    /// Metric name, e.g. `vllm:num_requests_waiting`.
    pub name: String,
    /// `(label, value)` pairs the series must carry, in spec order.
    pub labels: Vec<(String, String)>,
}

impl MetricSpec {
    /// A spec without label matchers.
    pub fn named(name: &str) -> MetricSpec {
        MetricSpec {
            name: name.into(),
            labels: Vec::new(),
        }
    }

    /// Parses `name{l1=v1,l2="v2"}` (llm-d `parseStringToSpec`); `""` is `None` (the metric
    /// is disabled).
    ///
    /// Errors: llm-d's messages, `not a valid metric specification: "…"` or
    /// `invalid label pair "…" in specification: "…"`.
    pub fn parse(spec: &str) -> Result<Option<MetricSpec>, String> {
        if spec.is_empty() {
            return Ok(None);
        }
        let invalid = || format!("not a valid metric specification: {spec:?}");
        let t = spec.trim();
        let (name, block) = match t.find('{') {
            Some(i) => {
                let rest = t[i + 1..].strip_suffix('}').ok_or_else(invalid)?;
                if rest.contains('}') {
                    return Err(invalid());
                }
                (t[..i].trim_end(), Some(rest))
            }
            None => (t, None),
        };
        if !valid_name(name, true) {
            return Err(invalid());
        }
        let mut labels = Vec::new();
        if let Some(block) = block.filter(|b| !b.trim().is_empty()) {
            for pair in block.split(',') {
                let bad = || format!("invalid label pair {pair:?} in specification: {spec:?}");
                let (k, v) = pair.split_once('=').ok_or_else(bad)?;
                let (k, v) = (k.trim(), v.trim());
                let value = match v.strip_prefix('"') {
                    Some(q) => q.strip_suffix('"').filter(|q| !q.contains('"')),
                    None => Some(v).filter(|v| {
                        !v.is_empty() && !v.contains(|c: char| c == '"' || c.is_whitespace())
                    }),
                };
                match value {
                    Some(value) if valid_name(k, false) => {
                        labels.push((k.to_string(), value.to_string()))
                    }
                    _ => return Err(bad()),
                }
            }
        }
        Ok(Some(MetricSpec {
            name: name.to_string(),
            labels,
        }))
    }

    /// Whether a series of this metric matches: `label(key)` gives the series' value of a
    /// label (`None` when it has none); every matcher must equal it.
    pub fn matches(&self, mut label: impl FnMut(&str) -> Option<String>) -> bool {
        self.labels
            .iter()
            .all(|(k, v)| label(k).as_deref() == Some(v.as_str()))
    }
}

impl std::fmt::Display for MetricSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.name)?;
        if !self.labels.is_empty() {
            let pairs: Vec<String> = self
                .labels
                .iter()
                .map(|(k, v)| format!("{k}={v:?}"))
                .collect();
            write!(f, "{{{}}}", pairs.join(","))?;
        }
        Ok(())
    }
}

/// Prometheus legacy name rules: `[a-zA-Z_:][a-zA-Z0-9_:]*` for metrics, no `:` for labels.
fn valid_name(s: &str, colon: bool) -> bool {
    let ok = |c: char, first: bool| {
        c.is_ascii_alphabetic() || c == '_' || (colon && c == ':') || (!first && c.is_ascii_digit())
    };
    let mut chars = s.chars();
    chars.next().is_some_and(|c| ok(c, true)) && chars.all(|c| ok(c, false))
}

/// The metric names of one engine type (`None`: not read, the gauge stays unknown).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetricNames {
    /// Waiting requests (summed over matching series).
    pub queue: Option<MetricSpec>,
    /// Running requests (summed over matching series).
    pub running: Option<MetricSpec>,
    /// KV-cache usage, 0..1 (averaged over matching series).
    pub kv_usage: Option<MetricSpec>,
    /// Read for the KV usage when `kv_usage` has no series (built-in `vllm` only:
    /// `vllm:gpu_cache_usage_perc` of vLLM before 0.10).
    pub kv_usage_fallback: Option<MetricSpec>,
    /// LoRA info gauge (`vllm:lora_requests_info`).
    pub lora: Option<MetricSpec>,
    /// Info gauge whose labels carry the cache geometry.
    pub cache_info: Option<MetricSpec>,
    /// Label of `cache_info` holding the block size, tokens.
    pub cache_block_size_label: String,
    /// Label of `cache_info` holding the number of KV blocks.
    pub cache_num_blocks_label: String,
    /// Gauge whose value is the block size, tokens.
    pub cache_block_size: Option<MetricSpec>,
    /// Gauge whose value is the number of KV blocks.
    pub cache_num_blocks: Option<MetricSpec>,
}

impl MetricNames {
    /// The names of engine config `c`; errors name the offending field of `c` (relative).
    fn from_config(c: &EngineConfig) -> Result<MetricNames, (&'static str, String)> {
        let spec = |field: &'static str, s: &str| MetricSpec::parse(s).map_err(|e| (field, e));
        let label = |s: &str, default: &str| if s.is_empty() { default } else { s }.to_string();
        Ok(MetricNames {
            queue: spec("queuedRequestsSpec", &c.queued_requests_spec)?,
            running: spec("runningRequestsSpec", &c.running_requests_spec)?,
            kv_usage: spec("kvUsageSpec", &c.kv_usage_spec)?,
            kv_usage_fallback: None,
            lora: spec("loraSpec", &c.lora_spec)?,
            cache_info: spec("cacheInfoSpec", &c.cache_info_spec)?,
            cache_block_size_label: label(&c.cache_block_size_label_name, DEFAULT_BLOCK_SIZE_LABEL),
            cache_num_blocks_label: label(&c.cache_num_blocks_label_name, DEFAULT_NUM_BLOCKS_LABEL),
            cache_block_size: spec("cacheBlockSizeSpec", &c.cache_block_size_spec)?,
            cache_num_blocks: spec("cacheNumBlocksSpec", &c.cache_num_blocks_spec)?,
        })
    }
}

/// The built-in engine configs, in llm-d's order (`factories.go` `defaultEngineConfigs`).
pub fn builtin() -> Vec<EngineConfig> {
    let e = |name: &str, q: &str, r: &str, kv: &str| EngineConfig {
        name: name.into(),
        queued_requests_spec: q.into(),
        running_requests_spec: r.into(),
        kv_usage_spec: kv.into(),
        ..EngineConfig::default()
    };
    let mut vllm = e(
        "vllm",
        "vllm:num_requests_waiting",
        "vllm:num_requests_running",
        "vllm:kv_cache_usage_perc",
    );
    vllm.lora_spec = "vllm:lora_requests_info".into();
    vllm.cache_info_spec = "vllm:cache_config_info".into();
    let mut sglang = e(
        "sglang",
        "sglang:num_queue_reqs",
        "sglang:num_running_reqs",
        "sglang:token_usage",
    );
    sglang.cache_info_spec = "sglang:cache_config_info".into();
    sglang.cache_block_size_label_name = "page_size".into();
    sglang.cache_num_blocks_label_name = "num_pages".into();
    let mut trtllm = e(
        "trtllm-serve",
        "trtllm_num_requests_waiting",
        "trtllm_num_requests_running",
        "trtllm_kv_cache_utilization",
    );
    trtllm.cache_block_size_spec = "trtllm_kv_cache_tokens_per_block".into();
    trtllm.cache_num_blocks_spec = "trtllm_kv_cache_max_blocks".into();
    let mut triton_trt = e(
        "triton-tensorrt-llm",
        "nv_trt_llm_request_metrics{request_type=waiting}",
        "nv_trt_llm_request_metrics{request_type=scheduled}",
        "nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type=fraction}",
    );
    triton_trt.cache_block_size_spec =
        "nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type=tokens_per}".into();
    triton_trt.cache_num_blocks_spec =
        "nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type=max}".into();
    let triton = e(
        "triton",
        "nv_inference_pending_request_count",
        "nv_inference_exec_count",
        "",
    );
    vec![vllm, sglang, trtllm, triton_trt, triton]
}

/// The engine → metric names mapping of one `core-metrics-extractor`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineMetrics {
    /// Endpoint label naming the engine type.
    pub label_key: String,
    /// `(engine name, names)`: user configs first, then the built-ins they do not replace.
    pub engines: Vec<(String, MetricNames)>,
    /// Index in `engines` of `defaultEngine`.
    pub default: usize,
}

impl Default for EngineMetrics {
    /// The mapping with default parameters (built-in engines, default `vllm`).
    fn default() -> Self {
        let p = Params {
            engine_label_key: default_label_key(),
            default_engine: default_engine(),
            engine_configs: Vec::new(),
        };
        EngineMetrics::new(&p).expect("the built-in engine configs are valid")
    }
}

impl EngineMetrics {
    /// The mapping of `p` (built-ins appended), validated.
    ///
    /// Errors: a [`PluginError`] naming the field (`engineConfigs[i].name`, a bad spec, an
    /// unknown `defaultEngine`, any `customMetrics`).
    pub fn new(p: &Params) -> Result<EngineMetrics, PluginError> {
        let mut engines: Vec<(String, MetricNames)> = Vec::new();
        for (i, c) in p.engine_configs.iter().enumerate() {
            let field = |f: &str| format!("engineConfigs[{i}].{f}");
            if c.name.is_empty() {
                return Err(PluginError::invalid(
                    &field("name"),
                    "engine config name cannot be empty",
                ));
            }
            if c.name == RESERVED_ENGINE {
                return Err(PluginError::invalid(
                    &field("name"),
                    format!("engine config name cannot be {RESERVED_ENGINE:?} (reserved)"),
                ));
            }
            if engines.iter().any(|(n, _)| *n == c.name) {
                return Err(PluginError::invalid(
                    &field("name"),
                    format!("mapping for engine type {:?} already exists", c.name),
                ));
            }
            if !c.custom_metrics.is_empty() {
                return Err(PluginError::invalid(
                    &field("customMetrics"),
                    "not supported: pdgate stores no per-endpoint attributes from custom metrics",
                ));
            }
            let names = MetricNames::from_config(c).map_err(|(f, e)| {
                PluginError::invalid(&field(f), format!("engine {:?}: {e}", c.name))
            })?;
            engines.push((c.name.clone(), names));
        }
        for c in builtin() {
            if engines.iter().any(|(n, _)| *n == c.name) {
                continue;
            }
            let mut names = MetricNames::from_config(&c).expect("built-in specs parse");
            if c.name == "vllm" {
                names.kv_usage_fallback = Some(MetricSpec::named("vllm:gpu_cache_usage_perc"));
            }
            engines.push((c.name, names));
        }
        let default_engine = if p.default_engine.is_empty() {
            DEFAULT_ENGINE
        } else {
            &p.default_engine
        };
        let default = engines
            .iter()
            .position(|(n, _)| n == default_engine)
            .ok_or_else(|| {
                PluginError::invalid(
                    "defaultEngine",
                    format!("defaultEngine {default_engine:?} not found in engineConfigs"),
                )
            })?;
        let label_key = if p.engine_label_key.is_empty() {
            DEFAULT_ENGINE_LABEL_KEY
        } else {
            &p.engine_label_key
        };
        Ok(EngineMetrics {
            label_key: label_key.to_string(),
            engines,
            default,
        })
    }

    /// The names of engine `name`, if configured.
    pub fn engine(&self, name: &str) -> Option<&MetricNames> {
        self.engines.iter().find(|(n, _)| n == name).map(|(_, m)| m)
    }

    /// The names for an endpoint with `labels`: its `engineLabelKey` value (else the legacy
    /// label's), or `defaultEngine` when that is absent, empty or names no engine config.
    pub fn for_labels(&self, labels: &BTreeMap<String, String>) -> &MetricNames {
        let value = |k: &str| labels.get(k).filter(|v| !v.is_empty());
        value(&self.label_key)
            .or_else(|| value(LEGACY_ENGINE_LABEL_KEY))
            .and_then(|v| self.engine(v))
            .unwrap_or(&self.engines[self.default].1)
    }
}
