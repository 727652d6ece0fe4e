//! `active-request-scorer` — prefers endpoints with fewer requests this router has in flight.
//!
//! - **Type:** `active-request-scorer`
//! - **Extension points:** Scorer
//! - **Parameters:** `idleThreshold` (default 0): an endpoint with at most this many active
//!   requests is idle; `maxBusyScore` (default 1.0, in [0, 1]): the best score of a busy
//!   endpoint; `requestTimeout` (Go duration such as `2m`, unset by default): deprecated in
//!   llm-d and ignored, validated only.
//! - **Inputs:** `load.in_flight()`: the requests this router booked on the endpoint and has
//!   not released (booked at pick time, released by the `InFlightGuard`).
//! - **Outputs:** n ≤ idleThreshold → 1; else (maxN − n) / maxN · maxBusyScore, maxN being the
//!   largest count among the candidates (llm-d active-request-scorer).
//! - **Limitations:** counts only this router's requests (no engine gauges, no other router
//!   replicas); releases are exact (guard drop), so no timeout is needed — `requestTimeout`
//!   has no effect.

use crate::endpoint::EndpointState;
use crate::plugin::Scorer;
use crate::plugin_build::{decode, effective, BuildCtx, Built, PluginError, PluginType, Stage};
use crate::request::RequestCtx;
use serde::{Deserialize, Serialize};
use serde_yaml_ng::Value;
use std::sync::Arc;

/// Registry entry.
pub const TYPE: PluginType = PluginType {
    name: "active-request-scorer",
    stage: Stage::Consumer,
    build,
};

/// Parameters.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct Params {
    /// Active requests at or below which an endpoint scores 1 (default 0).
    pub idle_threshold: u64,
    /// Highest score of a busy endpoint (default 1.0).
    pub max_busy_score: f64,
    /// Deprecated and ignored (llm-d's stale-request TTL).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_timeout: Option<String>,
}

impl Default for Params {
    fn default() -> Self {
        Params {
            idle_threshold: 0,
            max_busy_score: 1.0,
            request_timeout: None,
        }
    }
}

/// The scorer.
#[derive(Debug)]
pub struct ActiveRequestScorer {
    idle_threshold: u64,
    max_busy_score: f64,
}

impl ActiveRequestScorer {
    /// A scorer with the given idle threshold and busy-score ceiling (in [0, 1]).
    pub fn new(idle_threshold: u64, max_busy_score: f64) -> Self {
        ActiveRequestScorer {
            idle_threshold,
            max_busy_score,
        }
    }
}

impl Scorer for ActiveRequestScorer {
    fn score(&self, _ctx: &RequestCtx<'_>, candidates: &[&Arc<EndpointState>], out: &mut [f64]) {
        let max = candidates
            .iter()
            .map(|c| c.load.in_flight())
            .max()
            .unwrap_or(0);
        for (o, c) in out.iter_mut().zip(candidates) {
            let n = c.load.in_flight();
            *o = if u64::from(n) <= self.idle_threshold || max == 0 {
                1.0
            } else {
                f64::from(max - n) / f64::from(max) * self.max_busy_score
            };
        }
    }
}

/// True for a Go duration string (`300ms`, `1m30s`, `2h`): one or more decimal numbers, each
/// followed by a unit `ns`, `us`, `µs`, `ms`, `s`, `m` or `h`.
fn is_go_duration(s: &str) -> bool {
    let mut rest = s;
    if rest.is_empty() {
        return false;
    }
    while !rest.is_empty() {
        let num = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        if num == 0 || rest[..num].parse::<f64>().is_err() {
            return false;
        }
        rest = &rest[num..];
        let unit = ["ns", "us", "µs", "ms", "s", "m", "h"]
            .into_iter()
            .find(|u| rest.starts_with(u));
        match unit {
            Some(u) => rest = &rest[u.len()..],
            None => return false,
        }
    }
    true
}

fn build(params: Option<&Value>, _: &mut BuildCtx<'_>) -> Result<Built, PluginError> {
    let p: Params = decode(params)?;
    if !(0.0..=1.0).contains(&p.max_busy_score) {
        return Err(PluginError::invalid(
            "maxBusyScore",
            "must be between 0 and 1",
        ));
    }
    if let Some(t) = &p.request_timeout {
        if !is_go_duration(t) {
            return Err(PluginError::invalid(
                "requestTimeout",
                format!("`{t}` is not a duration such as `30s`, `2m` or `1h`"),
            ));
        }
    }
    Ok(Built {
        scorer: Some(Arc::new(ActiveRequestScorer::new(
            p.idle_threshold,
            p.max_busy_score,
        ))),
        params: effective(&p),
        ..Built::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::endpoint::InFlightGuard;
    use crate::plugins::testutil::{ep, with_ctx};
    use pdgate_api::PromptInput;

    #[test]
    fn scores_from_router_bookings() {
        let eps = [ep("a", None), ep("b", None), ep("c", None), ep("d", None)];
        let mut guards = Vec::new();
        for (e, n) in eps.iter().zip([0, 1, 2, 4]) {
            guards.extend((0..n).map(|_| InFlightGuard::book(&e.load)));
        }
        // Scraped gauges are not read.
        eps[0].load.set_scraped(Some(50.0), Some(50.0), None);
        let c: Vec<_> = eps.iter().collect();
        let mut out = [0.0; 4];
        let score = |s: ActiveRequestScorer, out: &mut [f64]| {
            with_ctx(&PromptInput::Tokens(vec![]), |ctx| s.score(ctx, &c, out))
        };
        score(ActiveRequestScorer::new(0, 1.0), &mut out);
        assert_eq!(out, [1.0, 0.75, 0.5, 0.0]);
        score(ActiveRequestScorer::new(1, 0.5), &mut out);
        assert_eq!(out, [1.0, 1.0, 0.25, 0.0]);
        drop(guards);
        score(ActiveRequestScorer::new(0, 1.0), &mut out);
        assert_eq!(out, [1.0; 4]);
    }

    #[test]
    fn go_durations() {
        for ok in ["2m", "30s", "1h30m", "1.5h", "300ms", "10us", "5µs"] {
            assert!(is_go_duration(ok), "{ok}");
        }
        for bad in ["", "2", "m", "2 m", "2d", "-1s"] {
            assert!(!is_go_duration(bad), "{bad}");
        }
    }
}
