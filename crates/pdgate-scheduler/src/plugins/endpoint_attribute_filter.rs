//! `endpoint-attribute-filter` — keeps endpoints whose numeric attribute passes a threshold.
//!
//! - **Type:** `endpoint-attribute-filter`
//! - **Extension points:** Filter
//! - **Parameters:** `attribute` (string, required): the attribute's name; `producer` (string,
//!   default [`DEFAULT_PRODUCER`] `core-metrics-extractor`): the plugin publishing it;
//!   `onMissing` (`Pass`, the default — `""` also means Pass — or `Fail`); `fallbackOnEmpty`
//!   (bool, default `false`); `algorithm.type` (required, `threshold` only);
//!   `algorithm.threshold.operator` (required: `LessThan`, `LessThanOrEqual`, `GreaterThan`,
//!   `GreaterThanOrEqual`, `Equal`, `NotEqual`) and `algorithm.threshold.value` (number,
//!   default `0`, finite).
//! - **Inputs:** the attribute, read from the endpoint's scraped engine gauges (see
//!   [`Attribute`]): `WaitingQueueSize` (`vllm:num_requests_waiting`, requests),
//!   `RunningRequestsSize` (`vllm:num_requests_running`, requests) — both truncated to an
//!   integer, as llm-d stores them — and `KVCacheUsagePercent` (`vllm:kv_cache_usage_perc`, a
//!   fraction 0..1). A gauge that is unknown (never scraped, not exported, last scrape failed)
//!   is a missing attribute.
//! - **Outputs:** an endpoint missing the attribute is kept iff `onMissing: Pass`; otherwise it
//!   is kept iff `value <operator> threshold.value`. When nothing is kept and `fallbackOnEmpty`
//!   is set, every candidate is kept.
//! - **Limitations:** pdgate supplies only core-metrics-extractor's three engine-gauge
//!   attributes above. Any other attribute or producer is refused at load time, naming the
//!   field: custom metrics (`engineConfigs[].customMetrics`), producer-agnostic attributes
//!   (`producer: ""`, llm-d's multicluster aggregates) and hardware counters —
//!   `GPUUtilization` comes from `dcgm-extractor` (the DCGM exporter's
//!   `DCGM_FI_DEV_GPU_UTIL`), and pdgate scrapes only the engines' own `/metrics`, so that
//!   attribute would be missing on every endpoint. llm-d's extractor reads the first matching
//!   series of a gauge; pdgate sums the queue and running gauges over an engine's series and
//!   averages its KV usage (design.md §5.4).
//!   Source: llm-d `pkg/epp/framework/plugins/scheduling/filter/endpointattribute/filter.go`,
//!   key resolution in `pkg/epp/framework/plugins/datalayer/attribute/metrics/data_types.go`.

use crate::endpoint::EndpointLoad;
use crate::plugin::{Candidates, Filter};
use crate::registry::{decode, effective, BuildCtx, Built, PluginError, PluginType, Stage};
use crate::request::RequestCtx;
use serde::{Deserialize, Serialize};
use serde_yaml_ng::Value;
use std::sync::Arc;

/// Registry entry.
pub const TYPE: PluginType = PluginType {
    name: "endpoint-attribute-filter",
    stage: Stage::Consumer,
    build,
};

/// The producer an attribute is read from when `producer` is omitted (llm-d's default).
pub const DEFAULT_PRODUCER: &str = "core-metrics-extractor";

/// The only producer of hardware-counter attributes in llm-d (GPU utilization).
pub const HARDWARE_PRODUCER: &str = "dcgm-extractor";

/// llm-d's GPU-utilization attribute (a fraction 0..1), published by `dcgm-extractor` only.
pub const GPU_UTILIZATION: &str = "GPUUtilization";

/// An endpoint attribute pdgate supplies: llm-d's `core-metrics-extractor` keys, read from the
/// endpoint's scraped engine gauges. Shared by `endpoint-attribute-filter` and
/// `endpoint-attribute-scorer`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attribute {
    /// `WaitingQueueSize`: requests waiting in the engine (`vllm:num_requests_waiting`).
    WaitingQueueSize,
    /// `RunningRequestsSize`: requests running in the engine (`vllm:num_requests_running`).
    RunningRequestsSize,
    /// `KVCacheUsagePercent`: KV-cache usage as a fraction 0..1 (`vllm:kv_cache_usage_perc`).
    KvCacheUsagePercent,
}

impl Attribute {
    /// Every supported attribute.
    pub const ALL: [Attribute; 3] = [
        Attribute::WaitingQueueSize,
        Attribute::RunningRequestsSize,
        Attribute::KvCacheUsagePercent,
    ];

    /// llm-d's attribute name.
    pub fn name(self) -> &'static str {
        match self {
            Attribute::WaitingQueueSize => "WaitingQueueSize",
            Attribute::RunningRequestsSize => "RunningRequestsSize",
            Attribute::KvCacheUsagePercent => "KVCacheUsagePercent",
        }
    }

    /// The value on `load`: requests (truncated to an integer, llm-d's `int(v)`) or a fraction
    /// 0..1; `None` when the gauge is unknown (the attribute is missing).
    pub fn read(self, load: &EndpointLoad) -> Option<f64> {
        match self {
            Attribute::WaitingQueueSize => load.waiting().map(f64::trunc),
            Attribute::RunningRequestsSize => load.running().map(f64::trunc),
            Attribute::KvCacheUsagePercent => load.kv_usage(),
        }
    }

    /// The attribute that `attribute` (parameter `field`) and `producer` (omitted → the
    /// [`DEFAULT_PRODUCER`]) name, as llm-d resolves the key `<attribute>/<producer>`.
    ///
    /// Errors: an empty attribute; an attribute containing `/` without a producer (llm-d's
    /// hint to split a combined `Attribute/Producer` spelling); a hardware counter
    /// (`GPUUtilization`, `producer: dcgm-extractor`); any other producer; any other attribute.
    /// An error about a producer plugin carries its name ([`PluginError::missing`]), so that
    /// a config whose producer plugin itself failed reports that failure only.
    pub fn resolve(
        field: &str,
        attribute: &str,
        producer: Option<&str>,
    ) -> Result<Attribute, PluginError> {
        if attribute.is_empty() {
            return Err(PluginError::invalid(field, "must not be empty"));
        }
        let Some(producer) = producer else {
            if let Some((name, prod)) = attribute.rsplit_once('/') {
                return Err(PluginError::invalid(
                    field,
                    format!(
                        "`{attribute}` contains `/` but `producer` is not set; attribute and \
                         producer are separate parameters: for the combined \
                         `Attribute/Producer` spelling write `{field}: {name}` and \
                         `producer: {prod}` (a name that itself contains `/` needs `producer` \
                         set explicitly)"
                    ),
                ));
            }
            return Self::core(field, attribute);
        };
        if producer == HARDWARE_PRODUCER || attribute == GPU_UTILIZATION {
            return Err(Self::hardware(field, attribute, producer));
        }
        if producer != DEFAULT_PRODUCER {
            let what = if producer.is_empty() {
                "producer-agnostic attributes (llm-d's multicluster aggregates) are not \
                 supplied by pdgate"
                    .to_string()
            } else {
                format!("`{producer}` publishes no attribute pdgate can read")
            };
            return Err(PluginError::missing(
                "producer",
                producer,
                format!(
                    "pdgate's endpoint attributes come from `{DEFAULT_PRODUCER}` only (the \
                     engine gauges it scrapes); {what}"
                ),
            ));
        }
        Self::core(field, attribute)
    }

    /// The refusal of a hardware-counter attribute (key `<attribute>/<producer>`); it names
    /// `dcgm-extractor` as the missing plugin when the config reads from it.
    fn hardware(field: &str, attribute: &str, producer: &str) -> PluginError {
        let message = format!(
            "`{attribute}/{producer}` is a GPU hardware counter: llm-d's `{HARDWARE_PRODUCER}` \
             publishes `{GPU_UTILIZATION}` from the DCGM exporter's DCGM_FI_DEV_GPU_UTIL, and \
             pdgate scrapes only the engines' own /metrics (it has no hardware-counter \
             producer), so every endpoint would miss this attribute"
        );
        if producer == HARDWARE_PRODUCER {
            PluginError::missing(field, producer, message)
        } else {
            PluginError::invalid(field, message)
        }
    }

    /// A `core-metrics-extractor` attribute by name.
    fn core(field: &str, attribute: &str) -> Result<Attribute, PluginError> {
        if attribute == GPU_UTILIZATION {
            return Err(Self::hardware(field, attribute, DEFAULT_PRODUCER));
        }
        Attribute::ALL
            .into_iter()
            .find(|a| a.name() == attribute)
            .ok_or_else(|| {
                PluginError::invalid(
                    field,
                    format!(
                        "`{attribute}` is not an attribute pdgate supplies: \
                         `{DEFAULT_PRODUCER}` publishes WaitingQueueSize, RunningRequestsSize \
                         and KVCacheUsagePercent (custom metrics, \
                         `engineConfigs[].customMetrics`, are not supported)"
                    ),
                )
            })
    }
}

/// What happens to an endpoint without the attribute.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
pub enum OnMissing {
    /// Keep it (default; `""` also means Pass).
    #[default]
    #[serde(alias = "")]
    Pass,
    /// Drop it.
    Fail,
}

/// `algorithm.type`: only `threshold`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
pub enum FilterAlgorithmType {
    /// Compare the value with `algorithm.threshold`.
    #[serde(rename = "threshold")]
    Threshold,
}

/// `algorithm.threshold.operator`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
pub enum Operator {
    /// `value < threshold`.
    LessThan,
    /// `value <= threshold`.
    LessThanOrEqual,
    /// `value > threshold`.
    GreaterThan,
    /// `value >= threshold`.
    GreaterThanOrEqual,
    /// `value == threshold`.
    Equal,
    /// `value != threshold`.
    NotEqual,
}

impl Operator {
    /// Whether `value <op> threshold` holds.
    pub fn holds(self, value: f64, threshold: f64) -> bool {
        match self {
            Operator::LessThan => value < threshold,
            Operator::LessThanOrEqual => value <= threshold,
            Operator::GreaterThan => value > threshold,
            Operator::GreaterThanOrEqual => value >= threshold,
            Operator::Equal => value == threshold,
            Operator::NotEqual => value != threshold,
        }
    }
}

/// `algorithm.threshold`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Threshold {
    /// The comparison.
    pub operator: Operator,
    /// The value compared with (same unit as the attribute; default 0).
    #[serde(default)]
    pub value: f64,
}

/// `algorithm`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct FilterAlgorithm {
    /// `threshold`.
    #[serde(rename = "type")]
    pub kind: FilterAlgorithmType,
    /// Required when the type is `threshold`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threshold: Option<Threshold>,
}

/// Parameters (llm-d names).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Params {
    /// Attribute name (required).
    pub attribute: String,
    /// Producer plugin; omitted → [`DEFAULT_PRODUCER`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub producer: Option<String>,
    /// Endpoints without the attribute (default Pass).
    #[serde(default)]
    pub on_missing: OnMissing,
    /// Keep every candidate when the filter would keep none (default false).
    #[serde(default)]
    pub fallback_on_empty: bool,
    /// The algorithm (required).
    pub algorithm: FilterAlgorithm,
}

/// The filter.
#[derive(Debug, Clone)]
pub struct EndpointAttributeFilter {
    attribute: Attribute,
    pass_on_missing: bool,
    fallback_on_empty: bool,
    operator: Operator,
    value: f64,
}

impl EndpointAttributeFilter {
    /// Whether `load` passes: the attribute compares true, or is missing and `onMissing` is
    /// Pass.
    pub fn passes(&self, load: &EndpointLoad) -> bool {
        match self.attribute.read(load) {
            Some(v) => self.operator.holds(v, self.value),
            None => self.pass_on_missing,
        }
    }
}

impl Filter for EndpointAttributeFilter {
    fn filter(&self, _ctx: &RequestCtx<'_>, candidates: &mut Candidates<'_>) {
        if self.fallback_on_empty && !candidates.iter().any(|c| self.passes(&c.load)) {
            return;
        }
        candidates.retain(|c| self.passes(&c.load));
    }
}

fn build(params: Option<&Value>, _: &mut BuildCtx<'_>) -> Result<Built, PluginError> {
    let mut p: Params = decode(params)?;
    let Some(threshold) = p.algorithm.threshold.clone() else {
        return Err(PluginError::invalid(
            "algorithm.threshold",
            "is required when algorithm.type is `threshold`",
        ));
    };
    if !threshold.value.is_finite() {
        return Err(PluginError::invalid(
            "algorithm.threshold.value",
            format!("must be a finite number, got {}", threshold.value),
        ));
    }
    let attribute = Attribute::resolve("attribute", &p.attribute, p.producer.as_deref())?;
    p.producer = Some(DEFAULT_PRODUCER.to_string());
    let f = EndpointAttributeFilter {
        attribute,
        pass_on_missing: p.on_missing == OnMissing::Pass,
        fallback_on_empty: p.fallback_on_empty,
        operator: threshold.operator,
        value: threshold.value,
    };
    Ok(Built {
        filter: Some(Arc::new(f)),
        params: effective(&p),
        ..Built::default()
    })
}

#[cfg(test)]
#[path = "endpoint_attribute_filter_tests.rs"]
mod tests;
