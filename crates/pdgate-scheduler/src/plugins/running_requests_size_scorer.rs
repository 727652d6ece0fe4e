//! `running-requests-size-scorer` — prefers endpoints running fewer requests, relative to the
//! other candidates.
//!
//! - **Type:** `running-requests-size-scorer`
//! - **Extension points:** Scorer
//! - **Parameters:** none.
//! - **Inputs:** `load.running()` (`vllm:num_requests_running`).
//! - **Outputs:** `(maxR − r) / (maxR − minR)` over the candidates whose gauge is known; 1 for
//!   all of them when they are equal (llm-d running-requests-size-scorer min-max
//!   normalisation). **Unknown gauge scores 0.5** and takes no part in min/max: an endpoint
//!   never scraped is neither preferred as idle nor avoided as busiest (llm-d leaves it
//!   unscored, i.e. 0; unknown is never read as 0 running).
//! - **Limitations:** as fresh as the metrics scrape; does not see the router's own bookings
//!   (use `active-request-scorer` or `queue-scorer` for those); relative only.

use crate::endpoint::EndpointState;
use crate::plugin::Scorer;
use crate::plugin_build::{decode, BuildCtx, Built, NoParams, PluginError, PluginType, Stage};
use crate::request::RequestCtx;
use serde_yaml_ng::Value;
use std::sync::Arc;

/// Registry entry.
pub const TYPE: PluginType = PluginType {
    name: "running-requests-size-scorer",
    stage: Stage::Consumer,
    build,
};

/// Score given to an endpoint whose running-requests gauge is unknown.
pub const UNKNOWN_RUNNING_SCORE: f64 = 0.5;

/// The scorer.
#[derive(Debug, Default)]
pub struct RunningRequestsSizeScorer;

impl Scorer for RunningRequestsSizeScorer {
    fn score(&self, _ctx: &RequestCtx<'_>, candidates: &[&Arc<EndpointState>], out: &mut [f64]) {
        let (mut min, mut max) = (f64::INFINITY, f64::NEG_INFINITY);
        for r in candidates.iter().filter_map(|c| c.load.running()) {
            min = min.min(r);
            max = max.max(r);
        }
        for (o, c) in out.iter_mut().zip(candidates) {
            *o = match c.load.running() {
                None => UNKNOWN_RUNNING_SCORE,
                Some(r) if max > min => (max - r) / (max - min),
                Some(_) => 1.0,
            };
        }
    }
}

fn build(params: Option<&Value>, _: &mut BuildCtx<'_>) -> Result<Built, PluginError> {
    decode::<NoParams>(params)?;
    Ok(Built {
        scorer: Some(Arc::new(RunningRequestsSizeScorer)),
        ..Built::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::endpoint::InFlightGuard;
    use crate::plugins::testutil::{ep, with_ctx};
    use pdgate_api::PromptInput;

    fn score(eps: &[Arc<EndpointState>]) -> Vec<f64> {
        let c: Vec<_> = eps.iter().collect();
        let mut out = vec![0.0; c.len()];
        with_ctx(&PromptInput::Tokens(vec![]), |ctx| {
            RunningRequestsSizeScorer.score(ctx, &c, &mut out)
        });
        out
    }

    #[test]
    fn min_max_over_known_gauges_unknown_is_neutral() {
        let eps = [ep("a", None), ep("b", None), ep("c", None), ep("d", None)];
        eps[0].load.set_scraped(Some(2.0), Some(100.0), None); // waiting is not read
        eps[1].load.set_scraped(Some(6.0), None, None);
        eps[2].load.set_scraped(Some(10.0), None, None);
        let _booked = InFlightGuard::book(&eps[3].load); // bookings are not read
        assert_eq!(score(&eps), [1.0, 0.5, 0.0, 0.5]);
        let equal = [ep("x", None), ep("y", None), ep("z", None)];
        equal[0].load.set_scraped(Some(3.0), None, None);
        equal[1].load.set_scraped(Some(3.0), None, None);
        assert_eq!(score(&equal), [1.0, 1.0, 0.5]);
        assert_eq!(score(&[ep("u", None)]), [0.5]);
    }
}
