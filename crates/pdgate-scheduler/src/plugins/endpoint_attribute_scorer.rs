//! `endpoint-attribute-scorer` — scores endpoints by one numeric attribute, linearly.
//!
//! - **Type:** `endpoint-attribute-scorer`
//! - **Extension points:** Scorer (llm-d category `Distribution`)
//! - **Parameters:** `attributeKey` (string, required — note: not `attribute` as in the
//!   filter); `producer` (string, default `core-metrics-extractor`, the same rules as
//!   `endpoint-attribute-filter`); `algorithm.type` (required: `linear_lower_is_better` or
//!   `linear_higher_is_better`); `algorithm.normalization`: at most one of
//!   `fixedRange: {min, max}` (numbers, each default `0`, finite, `min < max`) and
//!   `adaptiveRange: {}` (the default when neither is set).
//! - **Inputs:** the attribute, read from the endpoint's scraped engine gauges
//!   ([`Attribute`]: `WaitingQueueSize`, `RunningRequestsSize` in requests, `KVCacheUsagePercent`
//!   as a fraction 0..1); an unknown gauge is a missing attribute.
//! - **Outputs:** `n = (v − min) / (max − min)`, and `1 − n` when lower is better.
//!   `fixedRange`: min and max as configured, `n` clamped to [0, 1]. `adaptiveRange`: min and
//!   max over the candidates that have the attribute; when they are equal, every such
//!   candidate scores `1`. A candidate missing the attribute scores `0` (and takes no part in
//!   the adaptive range).
//! - **Limitations:** as `endpoint-attribute-filter`: only the three core-metrics-extractor
//!   attributes are supplied; custom metrics, producer-agnostic attributes and hardware
//!   counters (`GPUUtilization` from `dcgm-extractor`) are refused at load time, naming the
//!   field, since no endpoint would ever have them.
//!   Source: llm-d `pkg/epp/framework/plugins/scheduling/scorer/endpointattribute/endpointattribute.go`.

use crate::endpoint::EndpointState;
use crate::plugin::Scorer;
use crate::plugin_build::{decode, effective, BuildCtx, Built, PluginError, PluginType, Stage};
use crate::plugins::endpoint_attribute::{Attribute, DEFAULT_PRODUCER};
use crate::request::RequestCtx;
use serde::{Deserialize, Serialize};
use serde_yaml_ng::Value;
use std::sync::Arc;

/// Registry entry.
pub const TYPE: PluginType = PluginType {
    name: "endpoint-attribute-scorer",
    stage: Stage::Consumer,
    build,
};

/// `algorithm.type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ScorerAlgorithmType {
    /// The lowest value scores 1.
    LinearLowerIsBetter,
    /// The highest value scores 1.
    LinearHigherIsBetter,
}

/// `algorithm.normalization.fixedRange`: a configured range (the attribute's unit).
#[derive(Debug, Clone, Copy, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct FixedRange {
    /// Lower bound (default 0).
    #[serde(default)]
    pub min: f64,
    /// Upper bound (default 0; must exceed `min`).
    #[serde(default)]
    pub max: f64,
}

/// `algorithm.normalization.adaptiveRange`: the range over the candidates (no fields).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct AdaptiveRange {}

/// `algorithm.normalization`: at most one strategy; adaptive when neither is set.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Normalization {
    /// Fixed range.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fixed_range: Option<FixedRange>,
    /// Adaptive range.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adaptive_range: Option<AdaptiveRange>,
}

/// `algorithm`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ScorerAlgorithm {
    /// Direction.
    #[serde(rename = "type")]
    pub kind: ScorerAlgorithmType,
    /// Range.
    #[serde(default)]
    pub normalization: Normalization,
}

/// Parameters (llm-d names).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Params {
    /// Attribute name (required).
    pub attribute_key: String,
    /// Producer plugin; omitted → `core-metrics-extractor`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub producer: Option<String>,
    /// The algorithm (required).
    pub algorithm: ScorerAlgorithm,
}

/// The scorer.
#[derive(Debug, Clone)]
pub struct EndpointAttributeScorer {
    attribute: Attribute,
    lower_is_better: bool,
    fixed: Option<FixedRange>,
}

impl Scorer for EndpointAttributeScorer {
    fn score(&self, _ctx: &RequestCtx<'_>, candidates: &[&Arc<EndpointState>], out: &mut [f64]) {
        // `out` holds the values first (NaN = missing), then the scores.
        let (mut min, mut max) = (f64::INFINITY, f64::NEG_INFINITY);
        for (o, c) in out.iter_mut().zip(candidates) {
            *o = self.attribute.read(&c.load).unwrap_or(f64::NAN);
            if !o.is_nan() {
                min = min.min(*o);
                max = max.max(*o);
            }
        }
        let scale = match self.fixed {
            Some(r) => {
                min = r.min;
                1.0 / (r.max - r.min)
            }
            None if max > min => 1.0 / (max - min),
            // Every candidate with the attribute has the same value (or none has it).
            None => {
                out.iter_mut()
                    .for_each(|o| *o = if o.is_nan() { 0.0 } else { 1.0 });
                return;
            }
        };
        for o in out.iter_mut() {
            *o = if o.is_nan() {
                0.0
            } else {
                let n = ((*o - min) * scale).clamp(0.0, 1.0);
                if self.lower_is_better {
                    1.0 - n
                } else {
                    n
                }
            };
        }
    }
}

fn build(params: Option<&Value>, _: &mut BuildCtx<'_>) -> Result<Built, PluginError> {
    let mut p: Params = decode(params)?;
    let norm = &mut p.algorithm.normalization;
    if norm.fixed_range.is_some() && norm.adaptive_range.is_some() {
        return Err(PluginError::invalid(
            "algorithm.normalization",
            "allows at most one strategy, got both fixedRange and adaptiveRange",
        ));
    }
    if let Some(r) = norm.fixed_range {
        if !(r.min.is_finite() && r.max.is_finite()) {
            return Err(PluginError::invalid(
                "algorithm.normalization.fixedRange",
                format!(
                    "min and max must be finite numbers, got min {}, max {}",
                    r.min, r.max
                ),
            ));
        }
        if r.min >= r.max {
            return Err(PluginError::invalid(
                "algorithm.normalization.fixedRange",
                format!("requires min < max, got min {}, max {}", r.min, r.max),
            ));
        }
    } else {
        norm.adaptive_range = Some(AdaptiveRange {});
    }
    let attribute = Attribute::resolve("attributeKey", &p.attribute_key, p.producer.as_deref())?;
    p.producer = Some(DEFAULT_PRODUCER.to_string());
    let s = EndpointAttributeScorer {
        attribute,
        lower_is_better: p.algorithm.kind == ScorerAlgorithmType::LinearLowerIsBetter,
        fixed: p.algorithm.normalization.fixed_range,
    };
    Ok(Built {
        scorer: Some(Arc::new(s)),
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

    fn build_yaml(params: &str) -> Result<Built, PluginError> {
        let mut ctx = BuildCtx {
            built: &[],
            profiles: &[],
            next_slot: 0,
        };
        build(Some(&yaml(params)), &mut ctx)
    }

    /// Scores of four endpoints: KV 0.2, 0.5, 0.8, and one never scraped; waiting 2, 4, 4
    /// (the fourth missing).
    fn scores(params: &str) -> Vec<f64> {
        let eps = [ep("a", None), ep("b", None), ep("c", None), ep("d", None)];
        eps[0].load.set_scraped(None, Some(2.0), Some(0.2));
        eps[1].load.set_scraped(None, Some(4.0), Some(0.5));
        eps[2].load.set_scraped(None, Some(4.0), Some(0.8));
        let s = build_yaml(params)
            .unwrap_or_else(|e| panic!("{e:?}"))
            .scorer
            .unwrap();
        let c: Vec<_> = eps.iter().collect();
        let mut out = vec![0.0; c.len()];
        with_ctx(&PromptInput::Tokens(vec![]), |ctx| {
            s.score(ctx, &c, &mut out)
        });
        out.iter().map(|v| (v * 1e9).round() / 1e9).collect()
    }

    #[test]
    fn adaptive_range_over_the_candidates_that_have_the_attribute() {
        // KV 0.2, 0.5, 0.8: min 0.2, max 0.8 → n = 0, 0.5, 1; missing → 0.
        let up =
            scores("attributeKey: KVCacheUsagePercent\nalgorithm: {type: linear_higher_is_better}");
        assert_eq!(up, [0.0, 0.5, 1.0, 0.0]);
        let down = scores(
            "attributeKey: KVCacheUsagePercent\nalgorithm: {type: linear_lower_is_better, normalization: {adaptiveRange: {}}}",
        );
        assert_eq!(down, [1.0, 0.5, 0.0, 0.0]);
        // Waiting 2, 4, 4: n = 0, 1, 1.
        let q = scores("attributeKey: WaitingQueueSize\nalgorithm: {type: linear_lower_is_better}");
        assert_eq!(q, [1.0, 0.0, 0.0, 0.0]);
        // No candidate has the attribute (running never scraped): all 0.
        let none =
            scores("attributeKey: RunningRequestsSize\nalgorithm: {type: linear_lower_is_better}");
        assert_eq!(none, [0.0, 0.0, 0.0, 0.0]);
    }

    #[test]
    fn equal_values_all_score_one_and_missing_zero() {
        let eps = [ep("a", None), ep("b", None), ep("c", None)];
        eps[0].load.set_scraped(Some(3.0), None, None);
        eps[1].load.set_scraped(Some(3.0), None, None);
        let s = build_yaml(
            "attributeKey: RunningRequestsSize\nalgorithm: {type: linear_lower_is_better}",
        )
        .unwrap()
        .scorer
        .unwrap();
        let c: Vec<_> = eps.iter().collect();
        let mut out = vec![0.0; 3];
        with_ctx(&PromptInput::Tokens(vec![]), |ctx| {
            s.score(ctx, &c, &mut out)
        });
        assert_eq!(out, [1.0, 1.0, 0.0]);
    }

    #[test]
    fn fixed_range_clamps_and_inverts() {
        // Range [0.4, 0.6]: KV 0.2 → 0 (clamped), 0.5 → 0.5, 0.8 → 1 (clamped).
        let up = scores(
            "attributeKey: KVCacheUsagePercent\nalgorithm: {type: linear_higher_is_better, normalization: {fixedRange: {min: 0.4, max: 0.6}}}",
        );
        assert_eq!(up, [0.0, 0.5, 1.0, 0.0]);
        // Range [0, 1], lower is better: 1 − v.
        let down = scores(
            "attributeKey: KVCacheUsagePercent\nalgorithm: {type: linear_lower_is_better, normalization: {fixedRange: {min: 0, max: 1}}}",
        );
        assert_eq!(down, [0.8, 0.5, 0.2, 0.0]);
        // Waiting in [0, 8], lower is better: 2 → 0.75, 4 → 0.5.
        let q = scores(
            "attributeKey: WaitingQueueSize\nalgorithm: {type: linear_lower_is_better, normalization: {fixedRange: {max: 8}}}",
        );
        assert_eq!(q, [0.75, 0.5, 0.5, 0.0]);
    }

    #[test]
    fn effective_params_name_the_default_strategy_and_producer() {
        let b =
            build_yaml("attributeKey: WaitingQueueSize\nalgorithm: {type: linear_lower_is_better}")
                .unwrap();
        let want = yaml(
            "attributeKey: WaitingQueueSize\nproducer: core-metrics-extractor\n\
             algorithm: {type: linear_lower_is_better, normalization: {adaptiveRange: {}}}",
        );
        assert_eq!(b.params, want);
    }

    #[test]
    fn bad_parameters_name_the_field() {
        let err = |p: &str| match build_yaml(p) {
            Err(e) => e,
            Ok(_) => panic!("accepted: {p}"),
        };
        let e = err("attributeKey: GPUUtilization\nproducer: dcgm-extractor\nalgorithm: {type: linear_lower_is_better, normalization: {fixedRange: {min: 0.0, max: 1.0}}}");
        assert_eq!(e.path.as_deref(), Some("attributeKey"));
        assert_eq!(e.missing.as_deref(), Some("dcgm-extractor"));
        assert!(e.message.contains("GPU hardware counter"), "{}", e.message);
        let e = err("attributeKey: custom.queue_depth\nalgorithm: {type: linear_lower_is_better}");
        assert_eq!(e.path.as_deref(), Some("attributeKey"));
        let e = err("attributeKey: a/b\nalgorithm: {type: linear_lower_is_better}");
        assert!(
            e.message
                .contains("write `attributeKey: a` and `producer: b`"),
            "{}",
            e.message
        );
        let e = err("attributeKey: WaitingQueueSize\nalgorithm: {type: linear}");
        assert_eq!(e.path.as_deref(), Some("algorithm.type"));
        let e = err("attributeKey: WaitingQueueSize\nalgorithm: {type: linear_lower_is_better, normalization: {fixedRange: {min: 1, max: 1}}}");
        assert_eq!(
            e.path.as_deref(),
            Some("algorithm.normalization.fixedRange")
        );
        assert_eq!(e.message, "requires min < max, got min 1, max 1");
        let e = err("attributeKey: WaitingQueueSize\nalgorithm: {type: linear_lower_is_better, normalization: {fixedRange: {min: 0, max: .inf}}}");
        assert_eq!(
            e.path.as_deref(),
            Some("algorithm.normalization.fixedRange")
        );
        let e = err("attributeKey: WaitingQueueSize\nalgorithm: {type: linear_lower_is_better, normalization: {fixedRange: {max: 1}, adaptiveRange: {}}}");
        assert_eq!(e.path.as_deref(), Some("algorithm.normalization"));
        let e = err("attributeKey: WaitingQueueSize\nalgorithm: {type: linear_lower_is_better, normalization: {adaptiveRange: {x: 1}}}");
        assert_eq!(
            e.key.as_deref(),
            Some("algorithm.normalization.adaptiveRange.x")
        );
        let e = err("attribute: WaitingQueueSize\nalgorithm: {type: linear_lower_is_better}");
        assert_eq!(e.key.as_deref(), Some("attribute"));
        let e = err("attributeKey: \"\"\nalgorithm: {type: linear_lower_is_better}");
        assert_eq!(
            (e.path.as_deref(), e.message.as_str()),
            (Some("attributeKey"), "must not be empty")
        );
    }
}
