//! Unit tests of `priority_holdback.rs`.

use super::*;
use crate::flow::policy::UsageLimit;
use crate::plugin_params::decode;
use serde_yaml_ng::Value;

/// What `priority-holdback-policy` builds from `yaml` ([`crate::flow::plugins`]: decode,
/// then [`HoldbackParams::holdback`]).
fn holdback(yaml: &str) -> Result<Holdback, PluginError> {
    let v: Value = serde_yaml_ng::from_str(yaml).unwrap();
    decode::<HoldbackParams>(Some(&v))?.holdback()
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
