//! `queue-scorer` — prefers endpoints with shorter queues, relative to the other candidates.
//!
//! - **Type:** `queue-scorer`
//! - **Extension points:** Scorer
//! - **Parameters:** none.
//! - **Inputs:** `load.queue_depth()`: max(router bookings, scraped running + waiting).
//! - **Outputs:** `(maxQ − q) / (maxQ − minQ)` over the candidates; 1 for all when every
//!   queue is equal (llm-d queue-scorer min-max normalisation).
//! - **Limitations:** relative only — one request of difference spans the whole [0, 1] range.

use crate::endpoint::EndpointState;
use crate::plugin::Scorer;
use crate::plugin_build::{decode, BuildCtx, Built, NoParams, PluginError, PluginType, Stage};
use crate::request::RequestCtx;
use serde_yaml_ng::Value;
use std::sync::Arc;

/// Registry entry.
pub const TYPE: PluginType = PluginType {
    name: "queue-scorer",
    stage: Stage::Consumer,
    build,
};

/// The scorer.
#[derive(Debug, Default)]
pub struct QueueScorer;

impl Scorer for QueueScorer {
    fn score(&self, _ctx: &RequestCtx<'_>, candidates: &[&Arc<EndpointState>], out: &mut [f64]) {
        // Depths are never NaN (bookings and known gauges only), so plain comparisons do;
        // one pass reads them, the second scales with one reciprocal.
        let n = candidates.len().min(out.len());
        let out = &mut out[..n];
        let (mut min, mut max) = (f64::INFINITY, f64::NEG_INFINITY);
        for (o, c) in out.iter_mut().zip(candidates) {
            let q = c.load.queue_depth();
            *o = q;
            min = if q < min { q } else { min };
            max = if q > max { q } else { max };
        }
        if max > min {
            let scale = 1.0 / (max - min);
            out.iter_mut().for_each(|o| *o = (max - *o) * scale);
        } else {
            out.iter_mut().for_each(|o| *o = 1.0);
        }
    }
}

fn build(params: Option<&Value>, _: &mut BuildCtx<'_>) -> Result<Built, PluginError> {
    decode::<NoParams>(params)?;
    Ok(Built {
        scorer: Some(Arc::new(QueueScorer)),
        ..Built::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::testutil::{ep, with_ctx};
    use pdgate_api::PromptInput;

    #[test]
    fn min_max_normalised_and_all_equal_is_one() {
        let eps = [ep("a", None), ep("b", None), ep("c", None)];
        eps[0].load.set_scraped(Some(2.0), Some(0.0), None);
        eps[1].load.set_scraped(Some(4.0), Some(2.0), None);
        eps[2].load.set_scraped(Some(10.0), None, None);
        let c: Vec<_> = eps.iter().collect();
        let mut out = [0.0; 3];
        with_ctx(&PromptInput::Tokens(vec![]), |ctx| {
            QueueScorer.score(ctx, &c, &mut out)
        });
        assert_eq!(out, [1.0, 0.5, 0.0]);
        let fresh = [ep("x", None), ep("y", None)];
        let c: Vec<_> = fresh.iter().collect();
        let mut out = [0.0; 2];
        with_ctx(&PromptInput::Tokens(vec![]), |ctx| {
            QueueScorer.score(ctx, &c, &mut out)
        });
        assert_eq!(out, [1.0, 1.0]);
    }
}
