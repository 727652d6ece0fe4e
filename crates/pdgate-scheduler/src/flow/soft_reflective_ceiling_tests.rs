//! Unit tests of `soft_reflective_ceiling.rs`.

use super::*;
use crate::flow::policy::UsageLimit;

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
