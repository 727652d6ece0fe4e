//! `kv-cost-scorer` — weighs the prompt's uncached prefix against each endpoint's load, in
//! tokens, as NVIDIA Dynamo's KV router does.
//!
//! - **Type:** `kv-cost-scorer`
//! - **Extension points:** Scorer
//! - **Parameters:** `overlapScoreWeight` (≥ 0, default 1.0; Dynamo's
//!   `--router-kv-overlap-score-weight`): weight of the prefill term against the decode term;
//!   `prefixMatchInfoProducerName` (producer plugin name; default: the first prefix
//!   producer, an `approx-prefix-cache-producer` injected with defaults when none is
//!   configured), as for `prefix-cache-scorer`.
//! - **Inputs:** the prompt length in tokens (token ids, or the 4-bytes-per-token estimate of
//!   text); the producer's prefix match per candidate (matched blocks × block size); and the
//!   router's token bookings per candidate ([`crate::EndpointLoad::pending_prefill_tokens`],
//!   [`crate::EndpointLoad::active_tokens`]): every pick books its uncached prompt tokens as
//!   pending prefill (released at the first token of its response, or its end) and its prompt
//!   as active (released when the request ends: body end, error or disconnect alike).
//! - **Outputs:** per candidate i, in tokens,
//!   `prefill_i = (prompt − cached_i) + pending_prefill_i`,
//!   `decode_i = active_i + prompt`,
//!   `cost_i = overlapScoreWeight · prefill_i + decode_i`;
//!   score `min_j cost_j / cost_i` (1 for the cheapest, falling towards 0 as the cost grows;
//!   1 when the cost is 0). This is Dynamo's `cost = overlap_score_weight · prefill_blocks +
//!   decode_blocks` (Dynamo router docs, "Cost Calculation") in tokens instead of blocks,
//!   with the argmin turned into a monotone score so that `max-score-picker` (ties at random)
//!   picks Dynamo's lowest-cost worker, and other scorers can be weighed beside it.
//! - **Limitations:** counts only this router's bookings: other clients of the engine and
//!   other router replicas are invisible (no engine gauge is read). The active term counts
//!   prompts only, not the tokens generated so far (Dynamo's default, which does not track
//!   output blocks). The prefill term of a streamed request is released at its first body
//!   chunk; a non-streamed response has none before its end, so its uncached tokens stay
//!   pending until then. The cached part is as good as the producer's index.

use crate::endpoint::EndpointState;
use crate::plugin::Scorer;
use crate::plugin_build::{decode, effective, BuildCtx, Built, PluginError, PluginType, Stage};
use crate::prefix::PrefixSource;
use crate::request::RequestCtx;
use serde::{Deserialize, Serialize};
use serde_yaml_ng::Value;
use std::sync::Arc;

/// Registry entry.
pub const TYPE: PluginType = PluginType {
    name: "kv-cost-scorer",
    stage: Stage::Consumer,
    build,
};

/// Parameters.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct Params {
    /// Weight of the prefill term (default 1.0, ≥ 0).
    pub overlap_score_weight: f64,
    /// Producer to read; `None` = the first one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prefix_match_info_producer_name: Option<String>,
}

impl Default for Params {
    fn default() -> Self {
        Params {
            overlap_score_weight: 1.0,
            prefix_match_info_producer_name: None,
        }
    }
}

/// One candidate's load as the cost reads it, in tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CostInputs {
    /// Prompt tokens cached on the candidate (matched prefix, at most the prompt).
    pub cached: u64,
    /// Tokens still to prefill of the requests booked on it.
    pub pending_prefill: u64,
    /// Tokens held by the requests booked on it.
    pub active: u64,
}

/// The scorer.
#[derive(Debug)]
pub struct KvCostScorer {
    index: PrefixSource,
    overlap_score_weight: f64,
}

impl KvCostScorer {
    /// A scorer over `index` with `overlapScoreWeight` (≥ 0).
    pub fn new(index: PrefixSource, overlap_score_weight: f64) -> Self {
        KvCostScorer {
            index,
            overlap_score_weight,
        }
    }

    /// The cost, in tokens, of sending a `prompt`-token request to a candidate with `c`:
    /// `overlapScoreWeight · ((prompt − cached) + pending_prefill) + (active + prompt)`.
    pub fn cost(&self, prompt: u64, c: CostInputs) -> f64 {
        let prefill = prompt.saturating_sub(c.cached) + c.pending_prefill;
        let decode = c.active + prompt;
        self.overlap_score_weight * prefill as f64 + decode as f64
    }
}

/// Maps costs to scores in [0, 1]: `min / cost`, 1 where the cost is 0 (monotone decreasing).
pub fn scores_of_costs(costs: &[f64], out: &mut [f64]) {
    let min = costs.iter().copied().fold(f64::INFINITY, f64::min);
    for (o, &c) in out.iter_mut().zip(costs) {
        *o = if c <= 0.0 { 1.0 } else { min / c };
    }
}

impl Scorer for KvCostScorer {
    fn score(&self, ctx: &RequestCtx<'_>, candidates: &[&Arc<EndpointState>], out: &mut [f64]) {
        let prompt = ctx.prompt_tokens() as u64;
        let mut matched = Vec::with_capacity(candidates.len());
        if ctx.block_hashes(&self.index).is_empty() {
            matched.resize(candidates.len(), 0);
        } else {
            ctx.prefix_matches(&self.index, candidates, &mut matched);
        }
        let block = self.index.block_tokens() as u64;
        let costs: Vec<f64> = candidates
            .iter()
            .zip(&matched)
            .map(|(c, &m)| {
                let inputs = CostInputs {
                    cached: (m as u64 * block).min(prompt),
                    pending_prefill: c.load.pending_prefill_tokens(),
                    active: c.load.active_tokens(),
                };
                self.cost(prompt, inputs)
            })
            .collect();
        scores_of_costs(&costs, out);
    }
}

fn build(params: Option<&Value>, ctx: &mut BuildCtx<'_>) -> Result<Built, PluginError> {
    let p: Params = decode(params)?;
    if !(p.overlap_score_weight >= 0.0 && p.overlap_score_weight.is_finite()) {
        return Err(PluginError::invalid(
            "overlapScoreWeight",
            "must be a finite number >= 0",
        ));
    }
    let index = ctx.producer(
        p.prefix_match_info_producer_name.as_deref(),
        "prefixMatchInfoProducerName",
    )?;
    Ok(Built {
        scorer: Some(Arc::new(KvCostScorer::new(index, p.overlap_score_weight))),
        params: effective(&p),
        ..Built::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::endpoint::TokenGuard;
    use crate::plugins::testutil::{ep, with_ctx};
    use crate::prefix::BlockHasher;
    use pdgate_api::PromptInput;

    use crate::prefix::PrefixIndex;

    fn index() -> Arc<PrefixIndex> {
        let hasher = BlockHasher {
            block_tokens: 4,
            max_blocks: 256,
        };
        Arc::new(PrefixIndex::new(0, hasher, 100))
    }

    #[test]
    fn cost_is_weighted_prefill_plus_decode_in_tokens() {
        let s = KvCostScorer::new(PrefixSource::Approx(index()), 1.0);
        let c = |cached, pending_prefill, active| CostInputs {
            cached,
            pending_prefill,
            active,
        };
        // 100-token prompt, 60 cached, 30 pending, 500 active: (40 + 30) + (500 + 100).
        assert_eq!(s.cost(100, c(60, 30, 500)), 670.0);
        // A match longer than the prompt counts the prompt only.
        assert_eq!(s.cost(100, c(160, 0, 0)), 100.0);
        let w2 = KvCostScorer::new(PrefixSource::Approx(index()), 2.0);
        assert_eq!(w2.cost(100, c(60, 30, 500)), 2.0 * 70.0 + 600.0);
        assert_eq!(
            KvCostScorer::new(PrefixSource::Approx(index()), 0.0).cost(100, c(0, 9, 5)),
            105.0
        );
    }

    #[test]
    fn scores_are_min_over_cost() {
        let mut out = [0.0; 3];
        scores_of_costs(&[200.0, 400.0, 800.0], &mut out);
        assert_eq!(out, [1.0, 0.5, 0.25]);
        scores_of_costs(&[0.0, 0.0, 10.0], &mut out);
        assert_eq!(out, [1.0, 1.0, 0.0]);
    }

    /// A 16-token prompt (4 blocks of 4): `a` holds 3 blocks but has 40 tokens pending
    /// prefill, `b` holds 1 block, `c` none and is idle.
    /// Costs (w = 1): a = (4 + 40) + (0 + 16) = 60; b = 12 + 16 = 28; c = 16 + 16 = 32.
    #[test]
    fn a_cached_prefix_loses_to_a_queue_of_prefill() {
        let ix = index();
        let prompt = PromptInput::Tokens((0..16).collect());
        let eps = [ep("a", None), ep("b", None), ep("c", None)];
        let busy = TokenGuard::book(&eps[0].load, 40, 0);
        let cand: Vec<_> = eps.iter().collect();
        let mut out = [0.0; 3];
        with_ctx(&prompt, |ctx| {
            let h = ctx.block_hashes(&PrefixSource::Approx(ix.clone())).to_vec();
            ix.record(&eps[0], &h[..3]);
            ix.record(&eps[1], &h[..1]);
            KvCostScorer::new(PrefixSource::Approx(ix.clone()), 1.0).score(ctx, &cand, &mut out);
        });
        assert_eq!(out, [28.0 / 60.0, 1.0, 28.0 / 32.0]);
        // Without the queue, the longest prefix is cheapest: a = 4 + 16 = 20.
        drop(busy);
        with_ctx(&prompt, |ctx| {
            KvCostScorer::new(PrefixSource::Approx(ix.clone()), 1.0).score(ctx, &cand, &mut out)
        });
        assert_eq!(out, [1.0, 20.0 / 28.0, 20.0 / 32.0]);
    }

    /// Active tokens count once per token: `a` holds the whole prompt but 100 active tokens;
    /// `b` is idle and cold. a = 0 + (100 + 16) = 116, b = 16 + 16 = 32 at w = 1; at w = 10,
    /// a = 116, b = 160 + 16 = 176.
    #[test]
    fn the_weight_trades_prefill_against_decode_load() {
        let ix = index();
        let prompt = PromptInput::Tokens((0..16).collect());
        let eps = [ep("a", None), ep("b", None)];
        let _active = TokenGuard::book(&eps[0].load, 0, 100);
        let cand: Vec<_> = eps.iter().collect();
        let mut out = [0.0; 2];
        with_ctx(&prompt, |ctx| {
            let h = ctx.block_hashes(&PrefixSource::Approx(ix.clone())).to_vec();
            ix.record(&eps[0], &h);
            KvCostScorer::new(PrefixSource::Approx(ix.clone()), 1.0).score(ctx, &cand, &mut out);
            assert_eq!(out, [32.0 / 116.0, 1.0]);
            KvCostScorer::new(PrefixSource::Approx(ix.clone()), 10.0).score(ctx, &cand, &mut out);
            assert_eq!(out, [1.0, 116.0 / 176.0]);
        });
    }

    #[test]
    fn parameters_are_strict_and_checked() {
        let ix = index();
        let built = [(
            "approx-prefix-cache-producer".to_string(),
            "approx-prefix-cache-producer".to_string(),
            Built {
                index: Some(PrefixSource::Approx(ix)),
                ..Built::default()
            },
        )];
        let mut ctx = BuildCtx {
            built: &built,
            profiles: &[],
            next_slot: 1,
        };
        let yaml = |s: &str| serde_yaml_ng::from_str::<Value>(s).unwrap();
        let e = build(Some(&yaml("overlapScoreWeight: -1")), &mut ctx).err();
        assert_eq!(e.unwrap().path.as_deref(), Some("overlapScoreWeight"));
        let e = build(Some(&yaml("bogus: 1")), &mut ctx).err();
        assert_eq!(e.unwrap().key.as_deref(), Some("bogus"));
        let e = build(Some(&yaml("prefixMatchInfoProducerName: nope")), &mut ctx).err();
        assert_eq!(e.unwrap().missing.as_deref(), Some("nope"));
        let ok = build(None, &mut ctx).unwrap();
        assert_eq!(ok.params, yaml("overlapScoreWeight: 1.0"));
    }
}
