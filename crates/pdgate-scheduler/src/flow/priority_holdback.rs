//! `priority-holdback-policy` — fixed, priority-differentiated dispatch ceilings: as the
//! pool's saturation rises, lower bands are held back first, at thresholds spread linearly
//! from `maxCeiling` (top band) down to `minCeiling` (bottom band).
//!
//! - **Type:** `priority-holdback-policy`
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

use super::plugins::FlowPolicy;
use super::usage_limit::UsageLimit;
use crate::registry::{decode, effective, BuildCtx, Built, PluginError, PluginType, Stage};
use serde::{Deserialize, Serialize};
use serde_yaml_ng::Value;

/// Registry entry.
pub const TYPE: PluginType = PluginType {
    name: "priority-holdback-policy",
    stage: Stage::Consumer,
    build,
};

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

fn build(params: Option<&Value>, _: &mut BuildCtx<'_>) -> Result<Built, PluginError> {
    let p: HoldbackParams = decode(params)?;
    let h = p.holdback()?;
    Ok(Built {
        flow_policy: Some(FlowPolicy::UsageLimit(UsageLimit::PriorityHoldback(h))),
        params: effective(&p),
        ..Built::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holdback(yaml: &str) -> Result<Holdback, PluginError> {
        let v: Value = serde_yaml_ng::from_str(yaml).unwrap();
        let mut ctx = BuildCtx {
            built: &[],
            profiles: &[],
            next_slot: 0,
        };
        match build(Some(&v), &mut ctx)?.flow_policy {
            Some(FlowPolicy::UsageLimit(UsageLimit::PriorityHoldback(h))) => Ok(h),
            other => panic!("{other:?}"),
        }
    }

    fn ceilings(h: Holdback, priorities: &[i32]) -> Vec<f64> {
        let mut c = vec![1.0; priorities.len()];
        h.compute(priorities, &mut c);
        c
    }

    fn close(got: &[f64], want: &[f64]) {
        assert_eq!(got.len(), want.len(), "{got:?}");
        for (g, w) in got.iter().zip(want) {
            assert!((g - w).abs() < 1e-12, "{got:?} != {want:?}");
        }
    }

    #[test]
    fn rank_spreads_evenly_from_max_to_min() {
        let h = holdback("minCeiling: 0.4\nmaxCeiling: 0.9").unwrap();
        // step (0.9 − 0.4)/2 = 0.25.
        close(&ceilings(h, &[10, 0, -10]), &[0.9, 0.65, 0.4]);
        // Defaults: max 1.0; 5 bands from 1.0 to 0.0 in steps of 0.25; rank ignores values.
        let h = holdback("minCeiling: 0.0").unwrap();
        close(
            &ceilings(h, &[100, 99, 0, -1, -100]),
            &[1.0, 0.75, 0.5, 0.25, 0.0],
        );
        // One band: maxCeiling.
        let h = holdback("minCeiling: 0.2\nmaxCeiling: 0.8").unwrap();
        close(&ceilings(h, &[0]), &[0.8]);
        assert!(ceilings(h, &[]).is_empty());
    }

    #[test]
    fn value_scales_with_the_priority_values() {
        let h = holdback("domain: value\nminCeiling: 0.3\nmaxCeiling: 0.9").unwrap();
        // r = 1, 0.5, 0 → 0.9, 0.6, 0.3.
        close(&ceilings(h, &[10, 0, -10]), &[0.9, 0.6, 0.3]);
        // r = 1, 0.1, 0 → 1.0, 0.2 + 0.1·0.8 = 0.28, 0.2.
        let h = holdback("domain: value\nminCeiling: 0.2\nshape: linear").unwrap();
        close(&ceilings(h, &[100, 10, 0]), &[1.0, 0.28, 0.2]);
        // All equal: maxCeiling everywhere.
        close(&ceilings(h, &[5, 5]), &[1.0, 1.0]);
    }

    #[test]
    fn bad_parameters_name_the_field() {
        let cases = [
            ("maxCeiling: 0.9", "minCeiling"),
            ("{}", "minCeiling"),
            ("minCeiling: -0.1", "minCeiling"),
            ("minCeiling: 1.0", "minCeiling"),
            ("minCeiling: 0.5\nmaxCeiling: 0.0", "maxCeiling"),
            ("minCeiling: 0.5\nmaxCeiling: 1.1", "maxCeiling"),
            ("minCeiling: 0.5\nmaxCeiling: 0.5", "minCeiling"),
            ("minCeiling: 0.8\nmaxCeiling: 0.5", "minCeiling"),
            ("minCeiling: 0.5\nshape: sigmoid", "shape"),
            ("minCeiling: 0.5\ndomain: unknown", "domain"),
            ("minCeiling: 0.5\nthreshold: 0.5", "threshold"),
        ];
        for (yaml, field) in cases {
            let e = holdback(yaml)
                .err()
                .unwrap_or_else(|| panic!("{yaml}: accepted"));
            assert_eq!(e.key.as_deref(), Some(field), "{yaml}: {e:?}");
        }
        let e = holdback("minCeiling: 0.5\nmaxCeiling: 0.5").unwrap_err();
        assert_eq!(
            e.message,
            "(0.5) must be strictly less than maxCeiling (0.5)"
        );
    }

    #[test]
    fn a_config_using_it_loads_and_round_trips() {
        let yaml = "featureGates: [flowControl]\nplugins:\n- type: max-score-picker\n\
                    - type: priority-holdback-policy\n  name: hold\n  parameters:\n    \
                    minCeiling: 0.4\n    maxCeiling: 0.9\nschedulingProfiles:\n- name: default\n  \
                    plugins:\n  - pluginRef: max-score-picker\nflowControl:\n  \
                    usageLimitPolicyPluginRef: hold\n";
        let s = crate::Scheduler::from_yaml(yaml, "holdback").unwrap_or_else(|e| panic!("{e}"));
        let want = UsageLimit::PriorityHoldback(Holdback {
            min_ceiling: 0.4,
            max_ceiling: 0.9,
            by_value: false,
        });
        assert_eq!(s.flow().control.usage_limit, want);
        let again = crate::Scheduler::from_yaml(&s.effective_config_yaml(), "effective").unwrap();
        assert_eq!(again.flow().control, s.flow().control);
    }
}
