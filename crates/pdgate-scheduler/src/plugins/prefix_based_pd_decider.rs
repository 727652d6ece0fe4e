//! `prefix-based-pd-decider` — splits prefill out when the decode endpoint lacks enough of
//! the prompt.
//!
//! - **Type:** `prefix-based-pd-decider`
//! - **Extension points:** Decider
//! - **Parameters:** `nonCachedTokens` (tokens, default 0 = never split); `promptTokens`
//!   (tokens, default 0); `prefixMatchInfoProducerName` (alias `prefixPluginName`; an
//!   approximate or precise producer; default the first `approx-prefix-cache-producer`).
//! - **Inputs:** prompt tokens (token count, or text bytes ÷ 4) and the decode endpoint's
//!   cached prefix from the producer's index (matched blocks, unweighted).
//! - **Outputs:** split iff `nonCachedTokens > 0`, `prompt ≥ promptTokens`, and
//!   `prompt − cached_blocks·block_size ≥ nonCachedTokens` (llm-d PrefixBasedPDDecider,
//!   design.md §4). For a conditional-decode probe the same rule answers 412 when it would
//!   split; `nonCachedTokens: 0` never splits and so never answers 412.
//! - **Limitations:** with the approximate producer the cached prefix is the router's
//!   estimate, not the engine's. Its data
//!   is always readable (the index lives in-process), so it never answers `Unknown`.

use crate::endpoint::EndpointState;
use crate::plugin::{Decider, Decision};
use crate::plugin_build::{decode, effective, BuildCtx, Built, PluginError, PluginType, Stage};
use crate::prefix::PrefixSource;
use crate::request::RequestCtx;
use serde::{Deserialize, Serialize};
use serde_yaml_ng::Value;
use std::sync::Arc;

/// Registry entry.
pub const TYPE: PluginType = PluginType {
    name: "prefix-based-pd-decider",
    stage: Stage::Consumer,
    build,
};

/// Parameters.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct Params {
    /// Uncached tokens at and above which prefill is split out; 0 disables splitting.
    pub non_cached_tokens: usize,
    /// Prompts shorter than this are never split.
    pub prompt_tokens: usize,
    /// Producer to read; `None` = the first one.
    #[serde(alias = "prefixPluginName", skip_serializing_if = "Option::is_none")]
    pub prefix_match_info_producer_name: Option<String>,
}

/// The decider.
#[derive(Debug)]
pub struct PrefixBasedPdDecider {
    index: PrefixSource,
    non_cached_tokens: usize,
    prompt_tokens: usize,
}

impl PrefixBasedPdDecider {
    /// The decision for a prompt of `prompt` tokens of which `cached_blocks` blocks of
    /// `block_tokens` tokens are cached on the decode endpoint.
    pub fn split(&self, prompt: usize, cached_blocks: usize, block_tokens: usize) -> bool {
        let uncached = prompt.saturating_sub(cached_blocks * block_tokens);
        self.non_cached_tokens > 0
            && prompt >= self.prompt_tokens
            && uncached >= self.non_cached_tokens
    }
}

impl Decider for PrefixBasedPdDecider {
    fn decide(&self, ctx: &RequestCtx<'_>, decode: &EndpointState) -> Decision {
        if self.non_cached_tokens == 0 {
            return Decision::Keep;
        }
        let cached = ctx.prefix_match(&self.index, decode);
        if self.split(ctx.prompt_tokens(), cached, self.index.block_tokens()) {
            Decision::Split
        } else {
            Decision::Keep
        }
    }
}

fn build(params: Option<&Value>, ctx: &mut BuildCtx<'_>) -> Result<Built, PluginError> {
    let p: Params = decode(params)?;
    let index = ctx.producer(
        p.prefix_match_info_producer_name.as_deref(),
        "prefixMatchInfoProducerName",
    )?;
    let decider = PrefixBasedPdDecider {
        index,
        non_cached_tokens: p.non_cached_tokens,
        prompt_tokens: p.prompt_tokens,
    };
    Ok(Built {
        decider: Some(Arc::new(decider)),
        params: effective(&p),
        ..Built::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prefix::BlockHasher;

    fn decider(non_cached: usize, prompt: usize) -> PrefixBasedPdDecider {
        let index = PrefixSource::Approx(Arc::new(crate::prefix::PrefixIndex::new(
            0,
            BlockHasher {
                block_tokens: 16,
                max_blocks: 256,
            },
            10,
        )));
        PrefixBasedPdDecider {
            index,
            non_cached_tokens: non_cached,
            prompt_tokens: prompt,
        }
    }

    #[test]
    fn decision_table() {
        // (nonCachedTokens, promptTokens, prompt, cached blocks of 16) → split
        let table = [
            (0, 0, 1000, 0, false),   // disabled
            (16, 0, 1000, 0, true),   // nothing cached
            (16, 0, 100, 5, true),    // 100 − 80 = 20 ≥ 16
            (16, 0, 100, 6, false),   // 100 − 96 = 4 < 16
            (16, 0, 96, 5, true),     // exactly 16 uncached
            (16, 200, 100, 0, false), // prompt below promptTokens
            (16, 100, 100, 0, true),  // prompt == promptTokens
            (16, 0, 10, 0, false),    // prompt shorter than the threshold
        ];
        for (nc, pt, prompt, cached, want) in table {
            assert_eq!(
                decider(nc, pt).split(prompt, cached, 16),
                want,
                "{nc} {pt} {prompt} {cached}"
            );
        }
    }
}
