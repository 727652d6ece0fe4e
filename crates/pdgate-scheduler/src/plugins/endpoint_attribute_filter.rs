//! `endpoint-attribute-filter` — keeps endpoints whose numeric attribute passes a threshold.
//!
//! - **Type:** `endpoint-attribute-filter`
//! - **Extension points:** Filter
//! - **Parameters:** `attribute` (string, required): the attribute's name; `producer` (string,
//!   default [`DEFAULT_PRODUCER`] `core-metrics-extractor`): the plugin publishing it;
//!   `onMissing` (`Pass`, the default — `""` also means Pass — or `Fail`); `fallbackOnEmpty`
//!   (bool, default `false`); `algorithm.type` (required): one of
//!   - `threshold`: `algorithm.threshold.operator` (required: `LessThan`, `LessThanOrEqual`,
//!     `GreaterThan`, `GreaterThanOrEqual`, `Equal`, `NotEqual`) and
//!     `algorithm.threshold.value` (number, default `0`, finite); keeps `value <op> threshold`;
//!   - `range`: `algorithm.range.min` and `.max` (required, finite, `min <= max`); keeps
//!     `min <= value <= max`;
//!   - `topK`: `algorithm.topK.k` (required, ≥ 1) and `.higherIsBetter` (default `true`);
//!     keeps the `k` highest (or lowest) values, ties in candidate order, all when fewer;
//!   - `percentile`: `algorithm.percentile.percentile` (required, 0..=100) and
//!     `.higherIsBetter` (default `true`); the cutoff is the nearest-rank percentile of the
//!     candidates' values (ascending, 1-based position `ceil(P/100 × N)`, at least 1) and
//!     values `>=` (or `<=`) it are kept.
//!
//!   For `topK` and `percentile` only endpoints with the attribute are ranked.
//! - **Inputs:** the attribute, read from the endpoint's scraped engine gauges (see
//!   [`Attribute`]): `WaitingQueueSize` (`vllm:num_requests_waiting`, requests),
//!   `RunningRequestsSize` (`vllm:num_requests_running`, requests) — both truncated to an
//!   integer, as llm-d stores them — and `KVCacheUsagePercent` (`vllm:kv_cache_usage_perc`, a
//!   fraction 0..1). A gauge that is unknown (never scraped, not exported, last scrape failed)
//!   is a missing attribute.
//! - **Outputs:** an endpoint missing the attribute is kept iff `onMissing: Pass`; otherwise it
//!   is kept iff the algorithm keeps its value. When nothing is kept and `fallbackOnEmpty` is
//!   set, every candidate is kept.
//! - **Limitations:** pdgate supplies only core-metrics-extractor's three engine-gauge
//!   attributes above. Any other attribute or producer is refused at load time, naming the
//!   field: custom metrics (`engineConfigs[].customMetrics`), producer-agnostic attributes
//!   (`producer: ""`, llm-d's multicluster aggregates) and hardware counters —
//!   `GPUUtilization` comes from `dcgm-extractor` (the DCGM exporter's
//!   `DCGM_FI_DEV_GPU_UTIL`), and pdgate scrapes only the engines' own `/metrics`, so that
//!   attribute would be missing on every endpoint. llm-d's extractor reads the first matching
//!   series of a gauge; pdgate sums the queue and running gauges over an engine's series and
//!   averages its KV usage (design.md §5.4).
//!   Source: llm-d `pkg/epp/framework/plugins/scheduling/filter/endpointattribute/filter.go`
//!   and its README (the `range`, `topK` and `percentile` algorithms),
//!   key resolution in `pkg/epp/framework/plugins/datalayer/attribute/metrics/data_types.go`.

use crate::plugin::{Candidates, Filter};
use crate::plugin_build::{decode, effective, BuildCtx, Built, PluginError, PluginType, Stage};
pub use crate::plugins::endpoint_attribute::{
    Attribute, DEFAULT_PRODUCER, GPU_UTILIZATION, HARDWARE_PRODUCER,
};
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

/// `algorithm.type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
pub enum FilterAlgorithmType {
    /// Compare the value with `algorithm.threshold`.
    #[serde(rename = "threshold")]
    Threshold,
    /// Keep values within `algorithm.range`.
    #[serde(rename = "range")]
    Range,
    /// Keep the `algorithm.topK.k` best values.
    #[serde(rename = "topK")]
    TopK,
    /// Keep values at or beyond the `algorithm.percentile` cutoff.
    #[serde(rename = "percentile")]
    Percentile,
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

/// `algorithm.range`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Range {
    /// Smallest value kept (inclusive).
    pub min: f64,
    /// Largest value kept (inclusive).
    pub max: f64,
}

/// `algorithm.topK`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TopK {
    /// How many endpoints to keep (≥ 1).
    pub k: i64,
    /// Keep the highest values (default) or the lowest.
    #[serde(default = "yes")]
    pub higher_is_better: bool,
}

/// `algorithm.percentile`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Percentile {
    /// The cutoff percentile, 0..=100.
    pub percentile: f64,
    /// Keep values at or above the cutoff (default) or at or below it.
    #[serde(default = "yes")]
    pub higher_is_better: bool,
}

fn yes() -> bool {
    true
}

/// `algorithm`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct FilterAlgorithm {
    /// Which algorithm; its own section below is required.
    #[serde(rename = "type")]
    pub kind: FilterAlgorithmType,
    /// For `threshold`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threshold: Option<Threshold>,
    /// For `range`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub range: Option<Range>,
    /// For `topK`.
    #[serde(default, rename = "topK", skip_serializing_if = "Option::is_none")]
    pub top_k: Option<TopK>,
    /// For `percentile`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub percentile: Option<Percentile>,
}

/// A checked algorithm.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Rule {
    /// `value <op> threshold`.
    Threshold(Operator, f64),
    /// `min <= value <= max`.
    Range(f64, f64),
    /// The `k` highest (`true`) or lowest values.
    TopK(usize, bool),
    /// At or above (`true`) or at or below the nearest-rank percentile `P` (0..=100).
    Percentile(f64, bool),
}

impl Rule {
    /// Which of `values` (one per candidate, `None` where the attribute is missing) the rule
    /// keeps; a missing value is kept iff `pass_on_missing`.
    pub fn keep(self, values: &[Option<f64>], pass_on_missing: bool) -> Vec<bool> {
        let cutoff = match self {
            Rule::TopK(k, higher) => {
                let mut ranked: Vec<(usize, f64)> = values
                    .iter()
                    .enumerate()
                    .filter_map(|(i, v)| Some((i, (*v)?)))
                    .collect();
                // Stable: equal values keep candidate order.
                ranked.sort_by(|a, b| {
                    let o = a.1.total_cmp(&b.1);
                    if higher {
                        o.reverse()
                    } else {
                        o
                    }
                });
                let mut keep: Vec<bool> = values
                    .iter()
                    .map(|v| v.is_none() && pass_on_missing)
                    .collect();
                for (i, _) in ranked.into_iter().take(k) {
                    keep[i] = true;
                }
                return keep;
            }
            Rule::Percentile(p, _) => {
                let mut sorted: Vec<f64> = values.iter().flatten().copied().collect();
                sorted.sort_by(f64::total_cmp);
                let n = sorted.len();
                let rank = ((p / 100.0 * n as f64).ceil() as usize).clamp(1, n.max(1));
                sorted.get(rank - 1).copied()
            }
            _ => None,
        };
        values
            .iter()
            .map(|v| match *v {
                None => pass_on_missing,
                Some(v) => match self {
                    Rule::Threshold(op, t) => op.holds(v, t),
                    Rule::Range(min, max) => min <= v && v <= max,
                    Rule::Percentile(_, higher) => {
                        cutoff.is_some_and(|c| if higher { v >= c } else { v <= c })
                    }
                    // Ranked and returned above.
                    Rule::TopK(..) => false,
                },
            })
            .collect()
    }
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
    rule: Rule,
}

impl Filter for EndpointAttributeFilter {
    fn filter(&self, _ctx: &RequestCtx<'_>, candidates: &mut Candidates<'_>) {
        let values: Vec<Option<f64>> = candidates
            .iter()
            .map(|c| self.attribute.read(&c.load))
            .collect();
        let keep = self.rule.keep(&values, self.pass_on_missing);
        if self.fallback_on_empty && !keep.contains(&true) {
            return;
        }
        let mut i = 0;
        candidates.retain(|_| {
            i += 1;
            keep[i - 1]
        });
    }
}

/// The checked rule of `a`.
///
/// Errors: the type's section missing, or a value out of its range, naming the field.
fn rule(a: &FilterAlgorithm) -> Result<Rule, PluginError> {
    let required = |section: &str, t: &str| {
        PluginError::invalid(
            &format!("algorithm.{section}"),
            format!("is required when algorithm.type is `{t}`"),
        )
    };
    let finite = |field: &str, v: f64| {
        if v.is_finite() {
            Ok(v)
        } else {
            Err(PluginError::invalid(
                field,
                format!("must be a finite number, got {v}"),
            ))
        }
    };
    Ok(match a.kind {
        FilterAlgorithmType::Threshold => {
            let t = a
                .threshold
                .as_ref()
                .ok_or_else(|| required("threshold", "threshold"))?;
            Rule::Threshold(t.operator, finite("algorithm.threshold.value", t.value)?)
        }
        FilterAlgorithmType::Range => {
            let r = a.range.as_ref().ok_or_else(|| required("range", "range"))?;
            let (min, max) = (
                finite("algorithm.range.min", r.min)?,
                finite("algorithm.range.max", r.max)?,
            );
            if min > max {
                return Err(PluginError::invalid(
                    "algorithm.range.min",
                    format!("must be <= algorithm.range.max ({max}), got {min}"),
                ));
            }
            Rule::Range(min, max)
        }
        FilterAlgorithmType::TopK => {
            let t = a.top_k.as_ref().ok_or_else(|| required("topK", "topK"))?;
            let k = usize::try_from(t.k)
                .ok()
                .filter(|k| *k >= 1)
                .ok_or_else(|| {
                    PluginError::invalid(
                        "algorithm.topK.k",
                        format!("must be a positive integer, got {}", t.k),
                    )
                })?;
            Rule::TopK(k, t.higher_is_better)
        }
        FilterAlgorithmType::Percentile => {
            let p = a
                .percentile
                .as_ref()
                .ok_or_else(|| required("percentile", "percentile"))?;
            if !(0.0..=100.0).contains(&p.percentile) {
                return Err(PluginError::invalid(
                    "algorithm.percentile.percentile",
                    format!("must be in [0, 100], got {}", p.percentile),
                ));
            }
            Rule::Percentile(p.percentile, p.higher_is_better)
        }
    })
}

fn build(params: Option<&Value>, _: &mut BuildCtx<'_>) -> Result<Built, PluginError> {
    let mut p: Params = decode(params)?;
    let rule = rule(&p.algorithm)?;
    let attribute = Attribute::resolve("attribute", &p.attribute, p.producer.as_deref())?;
    p.producer = Some(DEFAULT_PRODUCER.to_string());
    let f = EndpointAttributeFilter {
        attribute,
        pass_on_missing: p.on_missing == OnMissing::Pass,
        fallback_on_empty: p.fallback_on_empty,
        rule,
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
