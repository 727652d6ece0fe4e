//! `soft-reflective-ceiling-policy` — a graduated, priority-aware dispatch ceiling: lower
//! bands are held back first as the pool's saturation rises, the top band never below 1.0.
//!
//! - **Type:** `soft-reflective-ceiling-policy`
//! - **Extension points:** flow-control usage-limit policy (named by
//!   `flowControl.usageLimitPolicyPluginRef`; needs `featureGates: [flowControl]`).
//! - **Parameters:** none; any non-empty `parameters` object is refused (`{}` is accepted).
//! - **Inputs:** the pool's saturation `s` (the configured saturation detector, pending
//!   dispatches included) and the number `N` of priority bands of the flow controller
//!   (configured bands plus those of the InferenceObjectives; rank only, not the values).
//! - **Outputs:** one ceiling per band `i` (0 = highest priority), per dispatch attempt:
//!   - band 0: 1.0;
//!   - band `i ≥ 1`: with the reflective ceiling `r_i = 1 − i·s/(N−1)`: 1.0 when `s < r_i`;
//!     0.0 when `s ≥ 1`; otherwise the band alternates between 1.0 and 0.0 across attempts:
//!     open when `tick % period == 0`, `period = max(1, round(s / (1 − s + 1e-9)))`, so a gated
//!     band dispatches on about 1 attempt in `period` (rate ≈ `(1 − s)/s`).
//!   - The single `tick` is shared by every band (all gated bands open or close together,
//!     which keeps the ceilings monotone in rank) and advances by one on each attempt with
//!     `1 − s ≤ s < 1`, i.e. while any band is in the alternating regime.
//!   - With one band, its ceiling is 1.0. A band dispatches while `s` is below its ceiling
//!     and below every higher band's ([`super::usage_limit`]); gated requests stay queued.
//! - **Limitations:** llm-d runs one dispatch per cycle (a cycle per arrival and per 1 ms),
//!   so its tick counts cycles; pdgate's dispatcher drains several requests per cycle and
//!   asks the policy before each one, so the tick counts dispatch attempts (the duty cycle is
//!   a share of attempts, not of wall time, in both). The band count is the flow
//!   controller's fixed band set (listed bands, priority 0, and the objectives' priorities),
//!   where llm-d counts the bands its registry holds at the time.
//! - **Source:** llm-d-router
//!   `pkg/epp/framework/plugins/flowcontrol/usagelimits/softreflectiveceiling/policy.go`.

use super::plugins::FlowPolicy;
use super::usage_limit::UsageLimit;
use crate::registry::{decode, BuildCtx, Built, NoParams, PluginError, PluginType, Stage};
use serde_yaml_ng::Value;

/// Registry entry.
pub const TYPE: PluginType = PluginType {
    name: "soft-reflective-ceiling-policy",
    stage: Stage::Consumer,
    build,
};

/// Guard against round-off as saturation nears 1.0 in the period's denominator
/// (saturation units).
const PERIOD_EPSILON: f64 = 1e-9;

fn build(params: Option<&Value>, _: &mut BuildCtx<'_>) -> Result<Built, PluginError> {
    decode::<NoParams>(params)?;
    Ok(Built {
        flow_policy: Some(FlowPolicy::UsageLimit(UsageLimit::SoftReflectiveCeiling)),
        ..Built::default()
    })
}

/// The alternation period at saturation `s` (attempts): `max(1, round(s / (1 − s + 1e-9)))`.
pub fn period(s: f64) -> u64 {
    // `as` saturates: a saturation a hair below 1.0 gives a huge but finite period.
    (s / (1.0 - s + PERIOD_EPSILON)).round().max(1.0) as u64
}

/// Writes the ceilings of one dispatch attempt at saturation `s` into `ceilings` (one per
/// band, highest priority first; saturation units), advancing the shared `tick` when any
/// band is in the alternating regime (module docs for the formula).
pub fn compute(s: f64, ceilings: &mut [f64], tick: &mut u64) {
    let n = ceilings.len();
    if n <= 1 {
        ceilings.iter_mut().for_each(|c| *c = 1.0);
        return;
    }
    // Reflective ceilings fall with rank, so some band is reached iff the lowest one is
    // (its ceiling is 1 − s).
    let alternating = s >= 1.0 - s && s < 1.0;
    let mut open = false;
    if alternating {
        *tick = tick.wrapping_add(1);
        open = tick.is_multiple_of(period(s));
    }
    let step = s / (n - 1) as f64;
    for (i, c) in ceilings.iter_mut().enumerate() {
        let reflective = 1.0 - i as f64 * step;
        *c = if i == 0 || s < reflective || (open && s < 1.0) {
            1.0
        } else {
            0.0
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flow::plugins::Declared;

    /// `n` ceilings at saturation `s`, the tick before → after.
    fn ceilings(s: f64, n: usize, tick: &mut u64) -> Vec<f64> {
        let mut c = vec![1.0; n];
        compute(s, &mut c, tick);
        c
    }

    #[test]
    fn below_every_reflective_ceiling_all_bands_open_and_the_tick_stays() {
        let mut t = 0;
        // 3 bands at 0.3: r1 = 1 − 0.15 = 0.85, r2 = 1 − 0.3 = 0.7, both above 0.3.
        assert_eq!(ceilings(0.3, 3, &mut t), [1.0, 1.0, 1.0]);
        // 0.49: r2 = 0.51 > 0.49 still.
        assert_eq!(ceilings(0.49, 3, &mut t), [1.0, 1.0, 1.0]);
        assert_eq!(t, 0);
    }

    #[test]
    fn a_reached_band_alternates_with_the_period() {
        // 3 bands at 0.65: r1 = 0.675 > 0.65 open; r2 = 0.35 reached; period
        // round(0.65 / 0.35) = round(1.857) = 2.
        assert_eq!(period(0.65), 2);
        let mut t = 0;
        assert_eq!(ceilings(0.65, 3, &mut t), [1.0, 1.0, 0.0], "tick 1");
        assert_eq!(ceilings(0.65, 3, &mut t), [1.0, 1.0, 1.0], "tick 2");
        assert_eq!(ceilings(0.65, 3, &mut t), [1.0, 1.0, 0.0], "tick 3");
        assert_eq!(t, 3);
        // At 0.6 the ratio is 1.5 less the epsilon's share (1.4999999963): period 1, as in llm-d.
        assert_eq!(period(0.6), 1);
        assert_eq!(ceilings(0.6, 3, &mut t), [1.0, 1.0, 1.0], "tick 4");
        // 3 bands at 0.8: r1 = 0.6, r2 = 0.2, both reached; period round(0.8/0.2) = 4: the
        // gated bands close and open together.
        assert_eq!(period(0.8), 4);
        let mut t = 0;
        let got: Vec<Vec<f64>> = (0..4).map(|_| ceilings(0.8, 3, &mut t)).collect();
        assert_eq!(
            got,
            [
                [1.0, 0.0, 0.0],
                [1.0, 0.0, 0.0],
                [1.0, 0.0, 0.0],
                [1.0, 1.0, 1.0]
            ]
        );
        // 5 bands at 0.75: r = 1, 0.8125, 0.625, 0.4375, 0.25: bands 2–4 reached; period 3.
        assert_eq!(period(0.75), 3);
        let mut t = 0;
        assert_eq!(ceilings(0.75, 5, &mut t), [1.0, 1.0, 0.0, 0.0, 0.0]);
        assert_eq!(ceilings(0.75, 5, &mut t), [1.0, 1.0, 0.0, 0.0, 0.0]);
        assert_eq!(ceilings(0.75, 5, &mut t), [1.0; 5]);
        // At 0.5 the lowest band is reached but the period is 1: always open.
        assert_eq!(period(0.5), 1);
        let mut t = 0;
        assert_eq!(ceilings(0.5, 3, &mut t), [1.0, 1.0, 1.0]);
        assert_eq!(t, 1, "0.5 is in the alternating regime");
        // 2 bands at 0.7: r1 = 0.3; period round(2.33) = 2.
        assert_eq!(period(0.7), 2);
        let mut t = 1;
        assert_eq!(ceilings(0.7, 2, &mut t), [1.0, 1.0], "tick 2");
    }

    #[test]
    fn at_full_saturation_every_lower_band_is_shut_and_one_band_is_always_open() {
        let mut t = 7;
        assert_eq!(ceilings(1.0, 3, &mut t), [1.0, 0.0, 0.0]);
        assert_eq!(ceilings(1.5, 2, &mut t), [1.0, 0.0]);
        assert_eq!(t, 7, "no alternation at or over 1.0");
        assert_eq!(ceilings(0.9, 1, &mut t), [1.0]);
        assert_eq!(ceilings(2.0, 1, &mut t), [1.0]);
        let mut none: [f64; 0] = [];
        compute(0.7, &mut none, &mut t);
        assert_eq!(t, 7);
        // A hair below 1.0: a huge but finite period.
        assert!(period(0.999_999) > 900_000);
    }

    #[test]
    fn builds_the_policy_and_refuses_any_parameter() {
        let mut ctx = BuildCtx {
            built: &[],
            profiles: &[],
            next_slot: 0,
        };
        for ok in [None, Some(serde_yaml_ng::from_str::<Value>("{}").unwrap())] {
            let b = build(ok.as_ref(), &mut ctx).unwrap();
            assert_eq!(
                b.flow_policy,
                Some(FlowPolicy::UsageLimit(UsageLimit::SoftReflectiveCeiling))
            );
        }
        let bad: Value = serde_yaml_ng::from_str("threshold: 0.5").unwrap();
        let err = build(Some(&bad), &mut ctx).err().expect("refused");
        assert_eq!(err.key.as_deref(), Some("threshold"), "{err:?}");
        assert!(err.message.contains("unknown field `threshold`"), "{err:?}");
        assert!(matches!(
            Declared::by_type(TYPE.name),
            Some(Declared::Policy(FlowPolicy::UsageLimit(
                UsageLimit::SoftReflectiveCeiling
            )))
        ));
    }

    #[test]
    fn the_llm_d_sample_loads_with_the_policy() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/data/llm-d-router/soft-reflective-ceiling-epp-config.yaml"
        );
        let text = std::fs::read_to_string(path).unwrap();
        let s = crate::Scheduler::from_yaml(&text, "soft-reflective-ceiling-epp-config.yaml")
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(s.flow().gate);
        assert_eq!(
            s.flow().control.usage_limit,
            UsageLimit::SoftReflectiveCeiling
        );
        // The effective config names it and loads to the same settings.
        let again = crate::Scheduler::from_yaml(&s.effective_config_yaml(), "effective").unwrap();
        assert_eq!(again.flow().control, s.flow().control);
    }
}
