//! `max-score-picker` — picks the highest total score, ties broken at random.
//!
//! - **Type:** `max-score-picker`
//! - **Extension points:** Picker
//! - **Parameters:** `maxNumOfEndpoints` (default 1, ≥ 1).
//! - **Inputs:** the profile's weighted score sums.
//! - **Outputs:** one candidate among those within 1e-9 of the maximum, uniformly at random
//!   (so a burst of equal scores never lands on the first endpoint every time).
//! - **Limitations:** pdgate routes to one endpoint per phase; `maxNumOfEndpoints` is
//!   validated and echoed but fallback endpoints are not returned.

use crate::endpoint::EndpointState;
use crate::plugin::Picker;
use crate::plugin_build::{decode, effective, BuildCtx, Built, PluginError, PluginType, Stage};
use rand::Rng;
use serde::{Deserialize, Serialize};
use serde_yaml_ng::Value;
use std::sync::Arc;

/// Registry entry.
pub const TYPE: PluginType = PluginType {
    name: "max-score-picker",
    stage: Stage::Consumer,
    build,
};

/// Scores closer than this to the maximum count as ties.
pub const TIE_EPSILON: f64 = 1e-9;

/// Parameters shared by the pickers.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct PickerParams {
    /// Endpoints to return (default 1).
    pub max_num_of_endpoints: usize,
}

impl Default for PickerParams {
    fn default() -> Self {
        PickerParams {
            max_num_of_endpoints: 1,
        }
    }
}

impl PickerParams {
    /// Decodes and validates picker parameters.
    pub fn decode(params: Option<&Value>) -> Result<Self, PluginError> {
        let p: PickerParams = decode(params)?;
        if p.max_num_of_endpoints == 0 {
            return Err(PluginError::invalid(
                "maxNumOfEndpoints",
                "must be at least 1",
            ));
        }
        Ok(p)
    }
}

/// The picker.
#[derive(Debug, Default)]
pub struct MaxScorePicker;

impl Picker for MaxScorePicker {
    fn pick(&self, candidates: &[&Arc<EndpointState>], scores: &[f64]) -> Option<usize> {
        let n = candidates.len().min(scores.len());
        let max = scores[..n]
            .iter()
            .copied()
            .fold(f64::NEG_INFINITY, f64::max);
        let mut rng = rand::rng();
        let mut chosen = None;
        let mut ties = 0u32;
        for (i, s) in scores[..n].iter().enumerate() {
            if max - s <= TIE_EPSILON {
                ties += 1;
                if rng.random_range(0..ties) == 0 {
                    chosen = Some(i);
                }
            }
        }
        chosen
    }
}

fn build(params: Option<&Value>, _: &mut BuildCtx<'_>) -> Result<Built, PluginError> {
    let p = PickerParams::decode(params)?;
    Ok(Built {
        picker: Some(Arc::new(MaxScorePicker)),
        params: effective(&p),
        ..Built::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::testutil::ep;

    #[test]
    fn picks_the_max_and_spreads_ties() {
        let eps = [ep("a", None), ep("b", None), ep("c", None)];
        let c: Vec<_> = eps.iter().collect();
        assert_eq!(MaxScorePicker.pick(&c, &[0.1, 0.9, 0.3]), Some(1));
        let mut seen = [0; 3];
        for _ in 0..300 {
            seen[MaxScorePicker.pick(&c, &[0.5, 0.5, 0.2]).unwrap()] += 1;
        }
        assert!(seen[0] > 0 && seen[1] > 0 && seen[2] == 0, "{seen:?}");
        assert_eq!(MaxScorePicker.pick(&[], &[]), None);
    }
}
