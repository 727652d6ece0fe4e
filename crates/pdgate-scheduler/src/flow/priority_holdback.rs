//! `priority-holdback-policy` — fixed, priority-differentiated dispatch ceilings: as the
//! pool's saturation rises, lower bands are held back first, at thresholds spread linearly
//! from `maxCeiling` (top band) down to `minCeiling` (bottom band).
//!
//! - **Type:** `priority-holdback-policy` (registry entry
//!   [`super::plugins::PRIORITY_HOLDBACK`])
//! - **Extension points:** flow-control usage-limit policy (named by
//!   `flowControl.usageLimitPolicyPluginRef`; needs `featureGates: [flowControl]`).
//! - **Parameters:**
//!   - `minCeiling` (float, **required**, in [0, 1)): the lowest band's ceiling (saturation
//!     units).
//!   - `maxCeiling` (float, default [`DEFAULT_MAX_CEILING`] = 1.0, in (0, 1], and strictly
//!     above `minCeiling`): the highest band's ceiling.
//!   - `shape` (string, default [`DEFAULT_SHAPE`] = `linear`; the only shape).
//!   - `domain` (string, default [`DEFAULT_DOMAIN`] = `rank`; or `value`).
//! - **Inputs:** the flow controller's bands, highest priority first (their count `N` and,
//!   for `value`, their priorities `p_i`); not the saturation (the gate compares it).
//! - **Outputs:** one ceiling per band `i` (0 = highest): one band → `maxCeiling`;
//!   `rank`: `c_i = maxCeiling − i·(maxCeiling − minCeiling)/(N − 1)`;
//!   `value`: `c_i = minCeiling + (p_i − pMin)/(pMax − pMin)·(maxCeiling − minCeiling)`, every
//!   band `maxCeiling` when all priorities are equal. A band dispatches while the saturation
//!   is below its ceiling and every higher band's ([`super::usage_limit`]).
//! - **Limitations:** the band set is the flow controller's fixed one (listed bands, priority
//!   0, and the objectives' priorities), where llm-d uses the bands its registry holds at the
//!   time; so `N`, `pMin` and `pMax` are those of every configured band, not only the active
//!   ones. With `minCeiling: 0` the lowest band never dispatches (as in llm-d).
//! - **Source:** llm-d-router
//!   `pkg/epp/framework/plugins/flowcontrol/usagelimits/priorityholdback/{config,priority_holdback}.go`.

use crate::plugin_params::PluginError;
use serde::{Deserialize, Serialize};

/// Default `maxCeiling` (saturation units).
pub const DEFAULT_MAX_CEILING: f64 = 1.0;
/// Default (and only) `shape`.
pub const DEFAULT_SHAPE: &str = "linear";
/// Default `domain`.
pub const DEFAULT_DOMAIN: &str = "rank";
/// The `value` domain.
const DOMAIN_VALUE: &str = "value";

/// The policy's parameters, as written (llm-d's JSON names).
#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct HoldbackParams {
    /// The lowest band's ceiling; required.
    pub min_ceiling: Option<f64>,
    /// The highest band's ceiling.
    #[serde(default = "default_max_ceiling")]
    pub max_ceiling: f64,
    /// The interpolation curve (`linear`).
    #[serde(default = "default_shape")]
    pub shape: String,
    /// `rank` or `value`.
    #[serde(default = "default_domain")]
    pub domain: String,
}

fn default_max_ceiling() -> f64 {
    DEFAULT_MAX_CEILING
}
fn default_shape() -> String {
    DEFAULT_SHAPE.into()
}
fn default_domain() -> String {
    DEFAULT_DOMAIN.into()
}

/// The resolved policy.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Holdback {
    /// The lowest band's ceiling (saturation units), in [0, 1).
    pub min_ceiling: f64,
    /// The highest band's ceiling (saturation units), in (min, 1].
    pub max_ceiling: f64,
    /// True for the `value` domain, false for `rank`.
    pub by_value: bool,
}

impl HoldbackParams {
    /// The validated policy.
    ///
    /// Errors: the first invalid field, named.
    pub fn holdback(&self) -> Result<Holdback, PluginError> {
        let Some(min) = self.min_ceiling else {
            return Err(PluginError::invalid("minCeiling", "is required"));
        };
        if self.shape != DEFAULT_SHAPE {
            return Err(PluginError::invalid(
                "shape",
                format!(
                    "unsupported shape `{}`, must be `{DEFAULT_SHAPE}`",
                    self.shape
                ),
            ));
        }
        let by_value = match self.domain.as_str() {
            DEFAULT_DOMAIN => false,
            DOMAIN_VALUE => true,
            other => {
                return Err(PluginError::invalid(
                    "domain",
                    format!(
                    "unsupported domain `{other}`, must be `{DEFAULT_DOMAIN}` or `{DOMAIN_VALUE}`"
                ),
                ))
            }
        };
        if !(0.0..1.0).contains(&min) {
            return Err(PluginError::invalid(
                "minCeiling",
                format!("must be in [0.0, 1.0), got {min}"),
            ));
        }
        let max = self.max_ceiling;
        if !(max > 0.0 && max <= 1.0) {
            return Err(PluginError::invalid(
                "maxCeiling",
                format!("must be in (0.0, 1.0], got {max}"),
            ));
        }
        if min >= max {
            return Err(PluginError::invalid(
                "minCeiling",
                format!("({min}) must be strictly less than maxCeiling ({max})"),
            ));
        }
        Ok(Holdback {
            min_ceiling: min,
            max_ceiling: max,
            by_value,
        })
    }
}

impl Holdback {
    /// Writes one ceiling per band into `ceilings` (saturation units; `priorities` highest
    /// first, the same length). Formula in the module docs.
    pub fn compute(&self, priorities: &[i32], ceilings: &mut [f64]) {
        let n = priorities.len().min(ceilings.len());
        let (lo, hi) = (self.min_ceiling, self.max_ceiling);
        if n <= 1 {
            ceilings.iter_mut().take(n).for_each(|c| *c = hi);
            return;
        }
        let spread = hi - lo;
        if self.by_value {
            let p_max = f64::from(priorities[0]);
            let p_min = f64::from(priorities[n - 1]);
            let range = p_max - p_min;
            for (c, &p) in ceilings.iter_mut().zip(priorities) {
                *c = if range == 0.0 {
                    hi
                } else {
                    lo + (f64::from(p) - p_min) / range * spread
                };
            }
        } else {
            let step = spread / (n - 1) as f64;
            for (i, c) in ceilings.iter_mut().take(n).enumerate() {
                *c = hi - i as f64 * step;
            }
        }
    }
}

#[cfg(test)]
#[path = "priority_holdback_tests.rs"]
mod tests;
