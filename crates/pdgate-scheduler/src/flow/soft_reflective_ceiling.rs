//! `soft-reflective-ceiling-policy` — a graduated, priority-aware dispatch ceiling: lower
//! bands are held back first as the pool's saturation rises, the top band never below 1.0.
//!
//! - **Type:** `soft-reflective-ceiling-policy` (registry entry
//!   [`super::plugins::SOFT_REFLECTIVE_CEILING`])
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

/// Guard against round-off as saturation nears 1.0 in the period's denominator
/// (saturation units).
const PERIOD_EPSILON: f64 = 1e-9;

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
#[path = "soft_reflective_ceiling_tests.rs"]
mod tests;
