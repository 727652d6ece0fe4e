//! `random-picker` — picks a candidate uniformly at random, ignoring scores.
//!
//! - **Type:** `random-picker`
//! - **Extension points:** Picker
//! - **Parameters:** `maxNumOfEndpoints` (default 1, ≥ 1).
//! - **Inputs:** the candidate list.
//! - **Outputs:** one candidate, uniform.
//! - **Limitations:** one endpoint per phase (see `max-score-picker`).

use super::max_score_picker::PickerParams;
use crate::endpoint::EndpointState;
use crate::plugin::Picker;
use crate::plugin_build::{effective, BuildCtx, Built, PluginError, PluginType, Stage};
use rand::Rng;
use serde_yaml_ng::Value;
use std::sync::Arc;

/// Registry entry.
pub const TYPE: PluginType = PluginType {
    name: "random-picker",
    stage: Stage::Consumer,
    build,
};

/// The picker.
#[derive(Debug, Default)]
pub struct RandomPicker;

impl Picker for RandomPicker {
    fn pick(&self, candidates: &[&Arc<EndpointState>], _scores: &[f64]) -> Option<usize> {
        (!candidates.is_empty()).then(|| rand::rng().random_range(0..candidates.len()))
    }
}

fn build(params: Option<&Value>, _: &mut BuildCtx<'_>) -> Result<Built, PluginError> {
    let p = PickerParams::decode(params)?;
    Ok(Built {
        picker: Some(Arc::new(RandomPicker)),
        params: effective(&p),
        ..Built::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::testutil::ep;

    #[test]
    fn reaches_every_candidate() {
        let eps = [ep("a", None), ep("b", None)];
        let c: Vec<_> = eps.iter().collect();
        let mut seen = [0; 2];
        for _ in 0..200 {
            seen[RandomPicker.pick(&c, &[1.0, 0.0]).unwrap()] += 1;
        }
        assert!(seen.iter().all(|n| *n > 0), "{seen:?}");
        assert_eq!(RandomPicker.pick(&[], &[]), None);
    }
}
