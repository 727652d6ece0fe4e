//! `core-metrics-extractor` — which metric names of an engine's `/metrics` give pdgate's load
//! gauges, per engine type.
//!
//! - **Type:** `core-metrics-extractor`
//! - **Extension points:** data-layer extractor of a `metrics-data-source`
//!   (`dataLayer.sources[].extractors[].pluginRef`; injected with the source when the config
//!   names none, as llm-d does).
//! - **Parameters:**
//!   - `engineLabelKey` (string, default [`DEFAULT_ENGINE_LABEL_KEY`] `llm-d.ai/engine-type`):
//!     the endpoint label naming its engine type; an endpoint without it (or with an empty
//!     value) falls back to [`LEGACY_ENGINE_LABEL_KEY`], then to `defaultEngine`.
//!   - `defaultEngine` (string, default [`DEFAULT_ENGINE`] `vllm`): the engine of endpoints
//!     whose label is absent or names no engine config; it must name one.
//!   - `engineConfigs` (list, default none): `{name, queuedRequestsSpec, runningRequestsSpec,
//!     kvUsageSpec, loraSpec, cacheInfoSpec, cacheBlockSizeLabelName, cacheNumBlocksLabelName,
//!     cacheBlockSizeSpec, cacheNumBlocksSpec, customMetrics}`. `name` is required and not
//!     `default`; each spec is a PromQL instant selector `name{label=value,...}` (values quoted
//!     or not); an empty or absent spec disables that metric. A config named like a built-in
//!     engine replaces it whole (no field merge). The built-in engines (see [`builtin`]):
//!     `vllm`, `sglang`, `trtllm-serve`, `triton-tensorrt-llm`, `triton`.
//! - **Inputs:** the endpoint's labels (engine type) and the scraped exposition.
//! - **Outputs:** the endpoint's gauges (`EndpointLoad::set_scraped`): waiting = Σ of the
//!   `queuedRequestsSpec` series, running = Σ of the `runningRequestsSpec` series, KV usage
//!   (0..1) = mean of the `kvUsageSpec` series, each over the series whose labels match the
//!   spec; the KV block size (tokens) from label `cacheBlockSizeLabelName` (default
//!   `block_size`) of `cacheInfoSpec`, or from gauge `cacheBlockSizeSpec`. A metric the engine
//!   does not export, or a disabled one, is unknown (never 0).
//! - **Limitations:**
//!   - Series matching a spec are summed (counts) or averaged (KV usage), as pdgate does for
//!     vLLM's one-series-per-engine-core exposition; llm-d takes the single series with the
//!     newest timestamp (in practice the first one).
//!   - `loraSpec` is kept ([`MetricNames::lora`]) for the LoRA reader; `cacheNumBlocks*` are
//!     read but only the block size is used.
//!   - `customMetrics` are refused: pdgate stores no per-endpoint attributes from metrics.
//!   - The built-in `vllm` config also reads `vllm:gpu_cache_usage_perc` when
//!     `vllm:kv_cache_usage_perc` is absent (vLLM before 0.10); a user `vllm` config does not.
//! - **Source:** llm-d-router `pkg/epp/framework/plugins/datalayer/extractor/metrics/`
//!   (`factories.go`, `spec.go`, `mapping.go`, `extractor.go`).

pub use crate::datalayer::engine_metrics::*;
use crate::datalayer::DataPlugin;
use crate::plugin_build::{decode, effective, BuildCtx, Built, PluginError, PluginType, Stage};
use serde_yaml_ng::Value;
use std::sync::Arc;

/// Registry entry.
pub const TYPE: PluginType = PluginType {
    name: "core-metrics-extractor",
    stage: Stage::Producer,
    build,
};

fn build(params: Option<&Value>, _: &mut BuildCtx<'_>) -> Result<Built, PluginError> {
    let p: Params = decode(params)?;
    let engines = EngineMetrics::new(&p)?;
    Ok(Built {
        data: Some(DataPlugin::MetricsExtractor(Arc::new(engines))),
        params: effective(&p),
        ..Built::default()
    })
}

#[cfg(test)]
#[path = "core_metrics_extractor_tests.rs"]
mod tests;
