//! `kv-cache-utilization-scorer` — prefers endpoints with free KV-cache space.
//!
//! - **Type:** `kv-cache-utilization-scorer`
//! - **Extension points:** Scorer
//! - **Parameters:** none.
//! - **Inputs:** `load.kv_usage()` (`vllm:kv_cache_usage_perc`, 0..1).
//! - **Outputs:** `1 − usage` (llm-d kv-cache-utilization-scorer); usage outside [0, 1] is
//!   clamped. **Unknown usage scores 0.5** (neutral: an endpoint never scraped is neither
//!   preferred as empty nor avoided as full; unknown is never read as 0 usage).
//! - **Limitations:** as fresh as the metrics scrape; it does not see the router's bookings.

use crate::endpoint::EndpointState;
use crate::plugin::Scorer;
use crate::plugin_build::{decode, BuildCtx, Built, NoParams, PluginError, PluginType, Stage};
use crate::request::RequestCtx;
use serde_yaml_ng::Value;
use std::sync::Arc;

/// Registry entry.
pub const TYPE: PluginType = PluginType {
    name: "kv-cache-utilization-scorer",
    stage: Stage::Consumer,
    build,
};

/// Score given to an endpoint whose KV usage is unknown.
pub const UNKNOWN_USAGE_SCORE: f64 = 0.5;

/// The scorer.
#[derive(Debug, Default)]
pub struct KvCacheUtilizationScorer;

impl Scorer for KvCacheUtilizationScorer {
    fn score(&self, _ctx: &RequestCtx<'_>, candidates: &[&Arc<EndpointState>], out: &mut [f64]) {
        for (o, c) in out.iter_mut().zip(candidates) {
            *o = c
                .load
                .kv_usage()
                .map_or(UNKNOWN_USAGE_SCORE, |u| 1.0 - u.clamp(0.0, 1.0));
        }
    }
}

fn build(params: Option<&Value>, _: &mut BuildCtx<'_>) -> Result<Built, PluginError> {
    decode::<NoParams>(params)?;
    Ok(Built {
        scorer: Some(Arc::new(KvCacheUtilizationScorer)),
        ..Built::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::testutil::{ep, with_ctx};
    use pdgate_api::PromptInput;

    #[test]
    fn one_minus_usage_and_unknown_is_half() {
        let eps = [ep("a", None), ep("b", None), ep("c", None)];
        eps[0].load.set_scraped(None, None, Some(0.25));
        eps[1].load.set_scraped(None, None, Some(1.0));
        let c: Vec<_> = eps.iter().collect();
        let mut out = [0.0; 3];
        with_ctx(&PromptInput::Tokens(vec![]), |ctx| {
            KvCacheUtilizationScorer.score(ctx, &c, &mut out)
        });
        assert_eq!(out, [0.75, 0.0, 0.5]);
    }
}
