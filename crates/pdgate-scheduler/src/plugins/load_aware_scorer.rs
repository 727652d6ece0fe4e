//! `load-aware-scorer` — absolute queue-length scorer.
//!
//! - **Type:** `load-aware-scorer`
//! - **Extension points:** Scorer
//! - **Parameters:** `threshold` (queue length, default 128, > 0).
//! - **Inputs:** `load.queue_depth()`: max(router bookings, scraped running + waiting).
//! - **Outputs:** q = 0 → 0.5; q ≥ threshold → 0; else 0.5·(1 − q/threshold)
//!   (llm-d load-aware-scorer, design.md §4).
//! - **Limitations:** llm-d reads the waiting queue only; pdgate's queue depth also counts
//!   running requests and the router's own bookings.

use crate::endpoint::EndpointState;
use crate::plugin::Scorer;
use crate::plugin_build::{decode, effective, BuildCtx, Built, PluginError, PluginType, Stage};
use crate::request::RequestCtx;
use serde::{Deserialize, Serialize};
use serde_yaml_ng::Value;
use std::sync::Arc;

/// Registry entry.
pub const TYPE: PluginType = PluginType {
    name: "load-aware-scorer",
    stage: Stage::Consumer,
    build,
};

/// Parameters.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct Params {
    /// Queue length at and above which the score is 0 (default 128).
    pub threshold: u64,
}

impl Default for Params {
    fn default() -> Self {
        Params { threshold: 128 }
    }
}

/// The scorer.
#[derive(Debug)]
pub struct LoadAwareScorer {
    threshold: f64,
}

impl LoadAwareScorer {
    /// A scorer with `threshold` (> 0).
    pub fn new(threshold: u64) -> Self {
        LoadAwareScorer {
            threshold: threshold.max(1) as f64,
        }
    }
}

impl Scorer for LoadAwareScorer {
    fn score(&self, _ctx: &RequestCtx<'_>, candidates: &[&Arc<EndpointState>], out: &mut [f64]) {
        for (o, c) in out.iter_mut().zip(candidates) {
            let q = c.load.queue_depth();
            *o = if q <= 0.0 {
                0.5
            } else if q >= self.threshold {
                0.0
            } else {
                0.5 * (1.0 - q / self.threshold)
            };
        }
    }
}

fn build(params: Option<&Value>, _: &mut BuildCtx<'_>) -> Result<Built, PluginError> {
    let p: Params = decode(params)?;
    if p.threshold == 0 {
        return Err(PluginError::invalid("threshold", "must be greater than 0"));
    }
    Ok(Built {
        scorer: Some(Arc::new(LoadAwareScorer::new(p.threshold))),
        params: effective(&p),
        ..Built::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::testutil::{ep, with_ctx};
    use pdgate_api::PromptInput;

    #[test]
    fn idle_half_saturated_zero_linear_between() {
        let eps = [ep("a", None), ep("b", None), ep("c", None), ep("d", None)];
        eps[1].load.set_scraped(Some(32.0), None, None);
        eps[2].load.set_scraped(Some(128.0), None, None);
        eps[3].load.set_scraped(Some(500.0), None, None);
        let c: Vec<_> = eps.iter().collect();
        let mut out = [0.0; 4];
        with_ctx(&PromptInput::Tokens(vec![]), |ctx| {
            LoadAwareScorer::new(128).score(ctx, &c, &mut out)
        });
        assert_eq!(out, [0.5, 0.375, 0.0, 0.0]);
    }
}
