//! The endpoint attributes pdgate supplies to `endpoint-attribute-filter` and
//! `endpoint-attribute-scorer`: llm-d's `core-metrics-extractor` keys read from each endpoint's
//! scraped engine gauges, and the resolution of an `attribute` / `producer` pair as llm-d
//! resolves the key `<attribute>/<producer>` (refusing hardware counters, custom metrics and
//! other producers, naming the field).
//!
//! Source: llm-d `pkg/epp/framework/plugins/datalayer/attribute/metrics/data_types.go`.

use crate::endpoint::EndpointLoad;
use crate::plugin_params::PluginError;

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
