//! `weighted-random-picker` — picks a candidate at random with probability proportional to
//! its total score.
//!
//! - **Type:** `weighted-random-picker`
//! - **Extension points:** Picker
//! - **Parameters:** `maxNumOfEndpoints` (default 1, ≥ 1); llm-d's optional top-K pool:
//!   `topK` (default 0 = off), `topKPercent` (default 0 = off, ≤ 100; pool = ⌈n·P/100⌉),
//!   `minTopK` (default 2, ≥ 1: floor of the pool when top-K is on; the stricter of `topK` and
//!   `topKPercent` wins).
//! - **Inputs:** the profile's weighted score sums.
//! - **Outputs:** candidate i with probability `score_i / Σ score` over the pool (llm-d samples
//!   with A-Res keys `U^(1/score)`, the same distribution for one endpoint); zero-score
//!   candidates are never picked unless every score is zero, in which case the pick is
//!   uniform over all candidates. With top-K on, only the K best (ties cut at random) take part.
//! - **Limitations:** one endpoint per phase (see `max-score-picker`).

use crate::endpoint::EndpointState;
use crate::plugin::Picker;
use crate::plugin_build::{decode, effective, BuildCtx, Built, PluginError, PluginType, Stage};
use rand::seq::SliceRandom;
use rand::Rng;
use serde::{Deserialize, Serialize};
use serde_yaml_ng::Value;
use std::sync::Arc;

/// Registry entry.
pub const TYPE: PluginType = PluginType {
    name: "weighted-random-picker",
    stage: Stage::Consumer,
    build,
};

/// Parameters.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct Params {
    /// Endpoints to return (default 1).
    pub max_num_of_endpoints: usize,
    /// Absolute cap of the sampling pool after sorting by score (0 = off).
    pub top_k: usize,
    /// Percentage cap of the sampling pool, ⌈n·P/100⌉ (0 = off).
    pub top_k_percent: usize,
    /// Floor of the pool size when top-K is on (default 2).
    pub min_top_k: usize,
}

impl Default for Params {
    fn default() -> Self {
        Params {
            max_num_of_endpoints: 1,
            top_k: 0,
            top_k_percent: 0,
            min_top_k: 2,
        }
    }
}

impl Params {
    /// Size of the sampling pool for `n` candidates.
    pub fn pool_size(&self, n: usize) -> usize {
        if self.top_k == 0 && self.top_k_percent == 0 {
            return n;
        }
        let mut k = n;
        if self.top_k > 0 {
            k = k.min(self.top_k);
        }
        if self.top_k_percent > 0 {
            k = k.min((n * self.top_k_percent).div_ceil(100));
        }
        k.max(self.min_top_k).min(n)
    }
}

/// The picker.
#[derive(Debug, Default)]
pub struct WeightedRandomPicker {
    params: Params,
}

impl WeightedRandomPicker {
    /// A picker with validated parameters.
    pub fn new(params: Params) -> Self {
        WeightedRandomPicker { params }
    }
}

fn weight(s: f64) -> f64 {
    if s.is_finite() && s > 0.0 {
        s
    } else {
        0.0
    }
}

/// The pick for a uniform draw `u` in [0, 1) over `pool` (indices into `scores`): the first
/// index whose cumulative weight exceeds `u · Σ weight`. `pool` must hold a positive weight.
pub fn pick_in_pool(pool: &[usize], scores: &[f64], u: f64) -> Option<usize> {
    let total: f64 = pool.iter().map(|&i| weight(scores[i])).sum();
    let target = u * total;
    let mut acc = 0.0;
    let mut last = None;
    for &i in pool {
        let w = weight(scores[i]);
        if w == 0.0 {
            continue;
        }
        acc += w;
        last = Some(i);
        if target < acc {
            return Some(i);
        }
    }
    last
}

impl Picker for WeightedRandomPicker {
    fn pick(&self, candidates: &[&Arc<EndpointState>], scores: &[f64]) -> Option<usize> {
        let n = candidates.len().min(scores.len());
        if n == 0 {
            return None;
        }
        let mut rng = rand::rng();
        if scores[..n].iter().all(|s| weight(*s) == 0.0) {
            return Some(rng.random_range(0..n));
        }
        let mut pool: Vec<usize> = (0..n).collect();
        let k = self.params.pool_size(n);
        if k < n {
            pool.shuffle(&mut rng);
            pool.sort_by(|a, b| weight(scores[*b]).total_cmp(&weight(scores[*a])));
            pool.truncate(k);
        }
        pick_in_pool(&pool, scores, rng.random::<f64>())
    }
}

fn build(params: Option<&Value>, _: &mut BuildCtx<'_>) -> Result<Built, PluginError> {
    let p: Params = decode(params)?;
    if p.max_num_of_endpoints == 0 {
        return Err(PluginError::invalid(
            "maxNumOfEndpoints",
            "must be at least 1",
        ));
    }
    if p.top_k_percent > 100 {
        return Err(PluginError::invalid(
            "topKPercent",
            "must be between 0 and 100",
        ));
    }
    if p.min_top_k == 0 {
        return Err(PluginError::invalid("minTopK", "must be at least 1"));
    }
    Ok(Built {
        params: effective(&p),
        picker: Some(Arc::new(WeightedRandomPicker::new(p))),
        ..Built::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::testutil::ep;

    #[test]
    fn cumulative_weights_decide_the_pick() {
        let scores = [1.0, 0.0, 3.0, f64::NAN];
        let pool = [0, 1, 2, 3];
        // total 4: [0, 1) → 0, [1, 4) → 2; zero and NaN scores are never chosen.
        assert_eq!(pick_in_pool(&pool, &scores, 0.0), Some(0));
        assert_eq!(pick_in_pool(&pool, &scores, 0.2), Some(0));
        assert_eq!(pick_in_pool(&pool, &scores, 0.25), Some(2));
        assert_eq!(pick_in_pool(&pool, &scores, 0.999), Some(2));
        assert_eq!(pick_in_pool(&[1, 2], &scores, 0.1), Some(2));
    }

    #[test]
    fn pool_sizes_follow_top_k_rules() {
        let p = |top_k, top_k_percent, min_top_k| Params {
            top_k,
            top_k_percent,
            min_top_k,
            ..Params::default()
        };
        assert_eq!(p(0, 0, 2).pool_size(10), 10);
        assert_eq!(p(3, 0, 2).pool_size(10), 3);
        assert_eq!(p(3, 10, 2).pool_size(10), 2); // ⌈10·10/100⌉ = 1, floor 2
        assert_eq!(p(3, 10, 1).pool_size(10), 1);
        assert_eq!(p(0, 25, 1).pool_size(10), 3); // ⌈2.5⌉
        assert_eq!(p(5, 0, 8).pool_size(4), 4);
    }

    #[test]
    fn picks_in_proportion_all_zero_is_uniform_top_one_is_argmax() {
        let eps = [ep("a", None), ep("b", None), ep("c", None)];
        let c: Vec<_> = eps.iter().collect();
        let picker = WeightedRandomPicker::default();
        let mut seen = [0u32; 3];
        for _ in 0..400 {
            seen[picker.pick(&c, &[1.0, 0.0, 3.0]).unwrap()] += 1;
        }
        assert!(
            seen[1] == 0 && seen[0] > 40 && seen[2] > seen[0],
            "{seen:?}"
        );
        let mut seen = [0u32; 3];
        for _ in 0..300 {
            seen[picker.pick(&c, &[0.0, 0.0, 0.0]).unwrap()] += 1;
        }
        assert!(seen.iter().all(|n| *n > 0), "{seen:?}");
        let top1 = WeightedRandomPicker::new(Params {
            top_k: 1,
            min_top_k: 1,
            ..Params::default()
        });
        for _ in 0..50 {
            assert_eq!(top1.pick(&c, &[0.5, 0.9, 0.7]), Some(1));
        }
        assert_eq!(picker.pick(&[], &[]), None);
    }
}
