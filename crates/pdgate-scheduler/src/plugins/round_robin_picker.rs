//! `round-robin-picker` — pdgate's baseline picker: cycles through the candidates.
//!
//! - **Type:** `round-robin-picker` (pdgate; not an llm-d type)
//! - **Extension points:** Picker
//! - **Parameters:** `maxNumOfEndpoints` (default 1, ≥ 1).
//! - **Inputs:** the candidate list (ignores scores).
//! - **Outputs:** candidate `n mod len` for the n-th pick of this plugin instance.
//! - **Limitations:** the counter is per plugin instance and shared by every profile that
//!   references it; when the candidate list changes the cycle position shifts.

use super::max_score_picker::PickerParams;
use crate::endpoint::EndpointState;
use crate::plugin::Picker;
use crate::plugin_build::{effective, BuildCtx, Built, PluginError, PluginType, Stage};
use serde_yaml_ng::Value;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Registry entry.
pub const TYPE: PluginType = PluginType {
    name: "round-robin-picker",
    stage: Stage::Consumer,
    build,
};

/// The picker.
#[derive(Debug, Default)]
pub struct RoundRobinPicker {
    next: AtomicUsize,
}

impl Picker for RoundRobinPicker {
    fn pick(&self, candidates: &[&Arc<EndpointState>], _scores: &[f64]) -> Option<usize> {
        (!candidates.is_empty())
            .then(|| self.next.fetch_add(1, Ordering::Relaxed) % candidates.len())
    }
}

fn build(params: Option<&Value>, _: &mut BuildCtx<'_>) -> Result<Built, PluginError> {
    let p = PickerParams::decode(params)?;
    Ok(Built {
        picker: Some(Arc::new(RoundRobinPicker::default())),
        params: effective(&p),
        ..Built::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::testutil::ep;

    #[test]
    fn cycles_exactly() {
        let eps = [ep("a", None), ep("b", None), ep("c", None)];
        let c: Vec<_> = eps.iter().collect();
        let rr = RoundRobinPicker::default();
        let picks: Vec<usize> = (0..7).map(|_| rr.pick(&c, &[0.0; 3]).unwrap()).collect();
        assert_eq!(picks, [0, 1, 2, 0, 1, 2, 0]);
    }
}
