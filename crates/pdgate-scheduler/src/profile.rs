//! A scheduling profile: filters → weighted scorers → one picker (design.md §4).

use crate::endpoint::EndpointState;
use crate::error::Rejection;
use crate::plugin::{Candidates, Filter, Picker, Scorer};
use crate::request::RequestCtx;
use std::sync::Arc;

/// One named chain that picks the endpoint for one phase.
pub struct Profile {
    /// Profile name, e.g. `decode`.
    pub name: String,
    /// Filters, in config order.
    pub filters: Vec<Arc<dyn Filter>>,
    /// Scorers with their weights (config `weight`, default 1).
    pub scorers: Vec<(Arc<dyn Scorer>, f64)>,
    /// The picker (`max-score-picker` when the config names none).
    pub picker: Arc<dyn Picker>,
}

impl Profile {
    /// True when `endpoint` passes every filter of this profile (used to keep a request on
    /// its session's endpoint only where the profile would allow it).
    pub fn admits(&self, ctx: &RequestCtx<'_>, endpoint: &Arc<EndpointState>) -> bool {
        let mut one: Candidates<'_> = vec![endpoint];
        for f in &self.filters {
            f.filter(ctx, &mut one);
            if one.is_empty() {
                return false;
            }
        }
        true
    }

    /// Picks one endpoint of `base` (the request's screened candidates: schedulable,
    /// serving the model).
    ///
    /// Filters run in order and stop when nothing is left; each scorer's output is clamped
    /// to [0, 1] (NaN → 0), multiplied by its weight and summed; the picker chooses from the
    /// sums.
    ///
    /// Errors: [`Rejection::Saturated`] when the filters leave nothing.
    pub fn run<'s>(
        &self,
        ctx: &RequestCtx<'_>,
        base: &[&'s Arc<EndpointState>],
    ) -> Result<&'s Arc<EndpointState>, Rejection> {
        let mut candidates: Candidates<'s> = base.to_vec();
        let saturated = || Rejection::Saturated {
            profile: self.name.clone(),
        };
        for f in &self.filters {
            f.filter(ctx, &mut candidates);
            if candidates.is_empty() {
                return Err(saturated());
            }
        }
        let mut total = vec![0.0; candidates.len()];
        let mut one = vec![0.0; candidates.len()];
        for (scorer, weight) in &self.scorers {
            one.fill(0.0);
            scorer.score(ctx, &candidates, &mut one);
            for (t, s) in total.iter_mut().zip(&one) {
                let s = if s.is_nan() { 0.0 } else { s.clamp(0.0, 1.0) };
                *t += weight * s;
            }
        }
        let i = self
            .picker
            .pick(&candidates, &total)
            .ok_or_else(saturated)?;
        candidates.get(i).copied().ok_or_else(saturated)
    }
}
