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
mod tests {
    use super::*;
    use crate::plugins::testutil::{ep, with_ctx};
    use pdgate_api::PromptInput;

    fn yaml(s: &str) -> Value {
        serde_yaml_ng::from_str(s).unwrap()
    }

    fn build_err(params: &str) -> PluginError {
        let mut ctx = BuildCtx {
            built: &[],
            profiles: &[],
            next_slot: 0,
        };
        match build(Some(&yaml(params)), &mut ctx) {
            Err(e) => e,
            Ok(_) => panic!("accepted: {params}"),
        }
    }

    fn built(params: &str) -> Built {
        let mut ctx = BuildCtx {
            built: &[],
            profiles: &[],
            next_slot: 0,
        };
        build(Some(&yaml(params)), &mut ctx).unwrap_or_else(|e| panic!("{e:?}"))
    }

    /// Names of the candidates `params` keeps out of four endpoints: `a` waiting 2, running 1,
    /// KV 0.25; `b` waiting 5.7 (read as 5), running 3, KV 0.9; `c` waiting 9, KV unknown;
    /// `d` never scraped.
    fn kept(params: &str) -> Vec<String> {
        let eps = [ep("a", None), ep("b", None), ep("c", None), ep("d", None)];
        eps[0].load.set_scraped(Some(1.0), Some(2.0), Some(0.25));
        eps[1].load.set_scraped(Some(3.0), Some(5.7), Some(0.9));
        eps[2].load.set_scraped(None, Some(9.0), None);
        let b = built(params);
        let f = b.filter.unwrap();
        let mut c: Candidates<'_> = eps.iter().collect();
        with_ctx(&PromptInput::Tokens(vec![]), |ctx| f.filter(ctx, &mut c));
        c.iter().map(|e| e.endpoint.name.clone()).collect()
    }

    const ALGO: &str = "algorithm: {type: threshold, threshold: {operator: ";

    #[test]
    fn threshold_operators_on_each_attribute_with_missing_passing_by_default() {
        let q = |op: &str, v: &str| {
            kept(&format!(
                "attribute: WaitingQueueSize\n{ALGO}{op}, value: {v}}}}}"
            ))
        };
        // a=2, b=5 (5.7 truncated), c=9, d missing (passes).
        assert_eq!(q("LessThan", "5"), ["a", "d"]);
        assert_eq!(q("LessThanOrEqual", "5"), ["a", "b", "d"]);
        assert_eq!(q("GreaterThan", "5"), ["c", "d"]);
        assert_eq!(q("GreaterThanOrEqual", "5"), ["b", "c", "d"]);
        assert_eq!(q("Equal", "5"), ["b", "d"]);
        assert_eq!(q("NotEqual", "5"), ["a", "c", "d"]);
        // KV: a=0.25, b=0.9, c and d missing.
        let kv = kept(&format!(
            "attribute: KVCacheUsagePercent\nproducer: core-metrics-extractor\n{ALGO}LessThanOrEqual, value: 0.8}}}}"
        ));
        assert_eq!(kv, ["a", "c", "d"]);
        // Running: a=1, b=3, c and d missing; onMissing Fail drops them.
        let run = kept(&format!(
            "attribute: RunningRequestsSize\nonMissing: Fail\n{ALGO}GreaterThan, value: 1}}}}"
        ));
        assert_eq!(run, ["b"]);
        let empty_is_pass = kept(&format!(
            "attribute: RunningRequestsSize\nonMissing: \"\"\n{ALGO}GreaterThan, value: 1}}}}"
        ));
        assert_eq!(empty_is_pass, ["b", "c", "d"]);
    }

    #[test]
    fn fallback_on_empty_keeps_everyone_only_when_nothing_passes() {
        let none = format!(
            "attribute: WaitingQueueSize\nonMissing: Fail\n{ALGO}GreaterThan, value: 100}}}}"
        );
        assert!(kept(&none).is_empty());
        let fallback = format!("{none}\nfallbackOnEmpty: true");
        assert_eq!(kept(&fallback), ["a", "b", "c", "d"]);
        let some = format!(
            "attribute: WaitingQueueSize\nonMissing: Fail\nfallbackOnEmpty: true\n{ALGO}LessThan, value: 3}}}}"
        );
        assert_eq!(kept(&some), ["a"]);
    }

    #[test]
    fn effective_params_fill_the_producer_and_defaults() {
        let b = built(&format!("attribute: WaitingQueueSize\n{ALGO}LessThan}}}}"));
        let want = yaml(
            "attribute: WaitingQueueSize\nproducer: core-metrics-extractor\nonMissing: Pass\n\
             fallbackOnEmpty: false\nalgorithm: {type: threshold, threshold: {operator: LessThan, value: 0.0}}",
        );
        assert_eq!(b.params, want);
    }

    #[test]
    fn bad_parameters_name_the_field() {
        let e = build_err(&format!(
            "attribute: GPUUtilization\nproducer: dcgm-extractor\n{ALGO}LessThan}}}}"
        ));
        assert_eq!(e.path.as_deref(), Some("attribute"));
        assert_eq!(e.missing.as_deref(), Some("dcgm-extractor"));
        assert!(
            e.message
                .starts_with("`GPUUtilization/dcgm-extractor` is a GPU hardware counter"),
            "{}",
            e.message
        );
        assert!(
            e.message.contains("no hardware-counter producer"),
            "{}",
            e.message
        );
        let e = build_err(&format!("attribute: GPUUtilization\n{ALGO}LessThan}}}}"));
        assert_eq!((e.path.as_deref(), e.missing), (Some("attribute"), None));
        assert!(
            e.message
                .starts_with("`GPUUtilization/core-metrics-extractor` is a GPU hardware"),
            "{}",
            e.message
        );
        let e = build_err(&format!(
            "attribute: custom.queue_depth\n{ALGO}LessThan}}}}"
        ));
        assert_eq!(e.path.as_deref(), Some("attribute"));
        assert!(e
            .message
            .contains("`custom.queue_depth` is not an attribute pdgate supplies"));
        let e = build_err(&format!(
            "attribute: WaitingQueueSize/core-metrics-extractor\n{ALGO}LessThan}}}}"
        ));
        assert_eq!(e.path.as_deref(), Some("attribute"));
        assert!(
            e.message.contains(
                "write `attribute: WaitingQueueSize` and `producer: core-metrics-extractor`"
            ),
            "{}",
            e.message
        );
        let e = build_err(&format!(
            "attribute: WaitingQueueSize\nproducer: \"\"\n{ALGO}LessThan}}}}"
        ));
        assert_eq!(e.path.as_deref(), Some("producer"));
        assert!(e.message.contains("producer-agnostic"), "{}", e.message);
        let e = build_err(&format!(
            "attribute: WaitingQueueSize\nproducer: other\n{ALGO}LessThan}}}}"
        ));
        assert_eq!(
            (e.path.as_deref(), e.missing.as_deref()),
            (Some("producer"), Some("other"))
        );
        let e = build_err(&format!("attribute: \"\"\n{ALGO}LessThan}}}}"));
        assert_eq!(
            (e.path.as_deref(), e.message.as_str()),
            (Some("attribute"), "must not be empty")
        );
        let e = build_err("attribute: WaitingQueueSize\nalgorithm: {type: threshold}");
        assert_eq!(e.path.as_deref(), Some("algorithm.threshold"));
        let e = build_err("attribute: WaitingQueueSize\nalgorithm: {type: topK}");
        assert_eq!(e.path.as_deref(), Some("algorithm.type"));
        assert!(e.message.contains("expected `threshold`"), "{}", e.message);
        let e = build_err(&format!("attribute: WaitingQueueSize\n{ALGO}Below}}}}"));
        assert_eq!(e.path.as_deref(), Some("algorithm.threshold.operator"));
        let e = build_err(&format!(
            "attribute: WaitingQueueSize\n{ALGO}LessThan, value: .nan}}}}"
        ));
        assert_eq!(e.path.as_deref(), Some("algorithm.threshold.value"));
        let e = build_err(&format!(
            "attribute: WaitingQueueSize\nonMissing: Drop\n{ALGO}LessThan}}}}"
        ));
        assert_eq!(e.path.as_deref(), Some("onMissing"));
        let e = build_err(&format!(
            "attribute: WaitingQueueSize\nbogus: 1\n{ALGO}LessThan}}}}"
        ));
        assert_eq!(e.key.as_deref(), Some("bogus"));
        let e = build_err(&format!("{ALGO}LessThan}}}}"));
        assert!(
            e.message.contains("missing field `attribute`"),
            "{}",
            e.message
        );
        let e = build_err("attribute: WaitingQueueSize");
        assert!(
            e.message.contains("missing field `algorithm`"),
            "{}",
            e.message
        );
    }
}
