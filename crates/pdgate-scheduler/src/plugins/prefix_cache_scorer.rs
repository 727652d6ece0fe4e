//! `prefix-cache-scorer` — prefers endpoints that hold a longer prefix of the prompt.
//!
//! - **Type:** `prefix-cache-scorer`
//! - **Extension points:** Scorer
//! - **Parameters:** `matchLengthWeight` (alias `prefixLengthWeight`, 0..1, default 0);
//!   `matchLengthScaleTokens` (alias `maxModelLen`, tokens, default 8192, > 0);
//!   `prefixMatchInfoProducerName` (producer plugin name, `approx-prefix-cache-producer` or
//!   `precise-prefix-cache-producer`; default: the first `approx-prefix-cache-producer`,
//!   injected with defaults when none is configured).
//! - **Inputs:** the producer's prefix index: longest consecutive prefix of the prompt's
//!   blocks held by each candidate (believed held for the approximate index; reported by
//!   the engine, or credited speculatively, for the precise one).
//! - **Outputs:** `w·min(1, matched_tokens/scale)² + (1−w)·matched_blocks/total_blocks`
//!   (llm-d prefix-cache-scorer); 0 when the prompt has no full block.
//! - **Limitations:** as good as the index (the approximate one is fed by the router's own
//!   picks; the precise one matches token-id prompts only, as engines report token ids);
//!   `total_blocks` is capped by the producer's `maxPrefixBlocksToMatch`.

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
    name: "prefix-cache-scorer",
    stage: Stage::Consumer,
    build,
};

/// Parameters.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct Params {
    /// Weight of the absolute match length (default 0: only the match ratio counts).
    #[serde(alias = "prefixLengthWeight")]
    pub match_length_weight: f64,
    /// Tokens at which the length term saturates (default 8192).
    #[serde(alias = "maxModelLen")]
    pub match_length_scale_tokens: usize,
    /// Producer to read; `None` = the first one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prefix_match_info_producer_name: Option<String>,
}

impl Default for Params {
    fn default() -> Self {
        Params {
            match_length_weight: 0.0,
            match_length_scale_tokens: 8192,
            prefix_match_info_producer_name: None,
        }
    }
}

/// The scorer.
#[derive(Debug)]
pub struct PrefixCacheScorer {
    index: PrefixSource,
    weight: f64,
    scale_tokens: f64,
}

impl PrefixCacheScorer {
    /// A scorer over `index` with `matchLengthWeight` and `matchLengthScaleTokens`.
    pub fn new(index: PrefixSource, weight: f64, scale_tokens: usize) -> Self {
        PrefixCacheScorer {
            index,
            weight,
            scale_tokens: scale_tokens.max(1) as f64,
        }
    }

    /// The formula, for `matched` of `total` blocks of `block_tokens` tokens.
    pub fn formula(&self, matched: usize, total: usize, block_tokens: usize) -> f64 {
        if total == 0 {
            return 0.0;
        }
        let length = ((matched * block_tokens) as f64 / self.scale_tokens).min(1.0);
        self.weight * length * length + (1.0 - self.weight) * matched as f64 / total as f64
    }
}

impl Scorer for PrefixCacheScorer {
    fn score(&self, ctx: &RequestCtx<'_>, candidates: &[&Arc<EndpointState>], out: &mut [f64]) {
        let hashes = ctx.block_hashes(&self.index);
        if hashes.is_empty() {
            return;
        }
        let mut matched = Vec::with_capacity(candidates.len());
        ctx.prefix_matches(&self.index, candidates, &mut matched);
        for (o, m) in out.iter_mut().zip(matched) {
            *o = self.formula(m, hashes.len(), self.index.block_tokens());
        }
    }
}

fn build(params: Option<&Value>, ctx: &mut BuildCtx<'_>) -> Result<Built, PluginError> {
    let p: Params = decode(params)?;
    if !(0.0..=1.0).contains(&p.match_length_weight) {
        return Err(PluginError::invalid(
            "matchLengthWeight",
            "must be between 0 and 1",
        ));
    }
    if p.match_length_scale_tokens == 0 {
        return Err(PluginError::invalid(
            "matchLengthScaleTokens",
            "must be greater than 0",
        ));
    }
    let index = ctx.producer(
        p.prefix_match_info_producer_name.as_deref(),
        "prefixMatchInfoProducerName",
    )?;
    let scorer = PrefixCacheScorer::new(index, p.match_length_weight, p.match_length_scale_tokens);
    Ok(Built {
        scorer: Some(Arc::new(scorer)),
        params: effective(&p),
        ..Built::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::testutil::{ep, with_ctx};
    use crate::prefix::BlockHasher;
    use pdgate_api::PromptInput;

    fn index() -> Arc<crate::prefix::PrefixIndex> {
        Arc::new(crate::prefix::PrefixIndex::new(
            0,
            BlockHasher {
                block_tokens: 4,
                max_blocks: 256,
            },
            100,
        ))
    }

    #[test]
    fn ratio_only_with_default_weight() {
        let ix = index();
        let prompt = PromptInput::Tokens((0..16).collect()); // 4 blocks
        let eps = [ep("a", None), ep("b", None), ep("c", None)];
        let c: Vec<_> = eps.iter().collect();
        let mut out = [0.0; 3];
        with_ctx(&prompt, |ctx| {
            let src = PrefixSource::Approx(ix.clone());
            let h = ctx.block_hashes(&src).to_vec();
            ix.record(&eps[0], &h[..3]);
            ix.record(&eps[1], &h[..1]);
            PrefixCacheScorer::new(src, 0.0, 8192).score(ctx, &c, &mut out);
        });
        assert_eq!(out, [0.75, 0.25, 0.0]);
    }

    #[test]
    fn half_weight_mixes_squared_length_and_ratio() {
        // w = 0.5, scale 16 tokens, 3 of 4 blocks of 4 tokens: 0.5·(12/16)² + 0.5·0.75.
        let s = PrefixCacheScorer::new(PrefixSource::Approx(index()), 0.5, 16);
        assert_eq!(s.formula(3, 4, 4), 0.5 * 0.5625 + 0.5 * 0.75);
        assert_eq!(s.formula(4, 4, 4), 1.0);
        assert_eq!(s.formula(8, 8, 4), 1.0); // length term saturates at 1
        assert_eq!(s.formula(0, 0, 4), 0.0);
    }
}
