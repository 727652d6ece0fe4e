//! Config loading: llm-d samples, strict errors with lines, injected defaults.

mod common;

use pdgate_scheduler::{Scheduler, DEFAULT_CONFIG_YAML, ROUND_ROBIN_CONFIG_YAML};

fn err(yaml: &str) -> String {
    match Scheduler::from_yaml(yaml, "epp.yaml") {
        Ok(_) => panic!("expected an error for:\n{yaml}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn llm_d_samples_and_builtins_load_unchanged() {
    for f in [
        "epp-config.yaml",
        "pd-epp-config.yaml",
        "sim-pd-epp-config.yaml",
    ] {
        let s = Scheduler::from_yaml(&common::compat(f), f).unwrap_or_else(|e| panic!("{e}"));
        // The effective config loads again and is a fixed point.
        let again = Scheduler::from_yaml(&s.effective_config_yaml(), "effective").unwrap();
        assert_eq!(
            again.effective_config_yaml(),
            s.effective_config_yaml(),
            "{f}"
        );
    }
    let pd = Scheduler::from_yaml(&common::compat("pd-epp-config.yaml"), "pd").unwrap();
    assert_eq!(
        pd.profile_names().collect::<Vec<_>>(),
        ["prefill", "decode"]
    );
    Scheduler::from_yaml(DEFAULT_CONFIG_YAML, "default").unwrap();
    Scheduler::from_yaml(ROUND_ROBIN_CONFIG_YAML, "round-robin").unwrap();
}

#[test]
fn defaults_are_injected_like_llm_d() {
    let s = Scheduler::from_yaml(&common::compat("epp-config.yaml"), "epp-config.yaml").unwrap();
    let want = "\
apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- name: approx-prefix-cache-producer
  type: approx-prefix-cache-producer
  parameters:
    blockSizeTokens: 16
    maxPrefixBlocksToMatch: 256
    maxPrefixTokensToMatch: 0
    lruCapacityPerServer: 31250
    autoTune: true
- name: prefix-cache-scorer
  type: prefix-cache-scorer
  parameters:
    matchLengthWeight: 0.0
    matchLengthScaleTokens: 8192
- name: decode-filter
  type: decode-filter
- name: max-score-picker
  type: max-score-picker
  parameters:
    maxNumOfEndpoints: 1
- name: single-profile-handler
  type: single-profile-handler
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: decode-filter
  - pluginRef: max-score-picker
  - pluginRef: prefix-cache-scorer
    weight: 2
";
    assert_eq!(s.effective_config_yaml(), want);
}

#[test]
fn no_profiles_gives_a_default_profile_with_every_filter_scorer_and_a_picker() {
    let s = Scheduler::from_yaml(
        "plugins:\n- type: decode-filter\n- type: queue-scorer\n",
        "x",
    )
    .unwrap();
    let y = s.effective_config_yaml();
    assert!(
        y.ends_with(
            "schedulingProfiles:\n- name: default\n  plugins:\n  - pluginRef: decode-filter\n  \
             - pluginRef: queue-scorer\n    weight: 1\n  - pluginRef: max-score-picker\n"
        ),
        "{y}"
    );
    assert!(
        y.contains("- name: max-score-picker\n  type: max-score-picker\n"),
        "{y}"
    );
    assert!(
        y.contains("- name: single-profile-handler\n  type: single-profile-handler\n"),
        "{y}"
    );
}

#[test]
fn unknown_parameter_names_plugin_field_and_line() {
    let yaml = "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: decode-filter\n\
                - type: load-aware-scorer\n  name: load\n  parameters:\n    threshold: 4\n    treshold: 5\n";
    assert_eq!(
        err(yaml),
        "epp.yaml: line 9: plugin `load` (type `load-aware-scorer`): parameters: unknown field `treshold`, \
         expected `threshold`"
    );
}

#[test]
fn nested_unknown_parameter_points_at_its_line() {
    let yaml = "plugins:\n- type: always-disagg-pd-decider\n- type: disagg-profile-handler\n  parameters:\n    \
                deciders:\n      prefill: always-disagg-pd-decider\n      decode: x\n";
    assert_eq!(
        err(yaml),
        "epp.yaml: line 7: plugin `disagg-profile-handler` (type `disagg-profile-handler`): parameters.deciders: \
         unknown field `decode`, expected `prefill` or `encode`"
    );
}

#[test]
fn wrong_parameter_type_names_the_field() {
    let yaml =
        "plugins:\n- type: prefix-based-pd-decider\n  parameters:\n    nonCachedTokens: lots\n";
    assert_eq!(
        err(yaml),
        "epp.yaml: line 4: plugin `prefix-based-pd-decider` (type `prefix-based-pd-decider`): \
         parameters.nonCachedTokens: invalid type: string \"lots\", expected a non-negative integer"
    );
    let yaml = "plugins:\n- type: prefix-cache-scorer\n  parameters:\n    matchLengthWeight: 2\n";
    assert_eq!(
        err(yaml),
        "epp.yaml: line 4: plugin `prefix-cache-scorer` (type `prefix-cache-scorer`): \
         parameters.matchLengthWeight: must be between 0 and 1"
    );
}

#[test]
fn unknown_plugin_type_and_bad_plugin_ref() {
    assert_eq!(
        err("plugins:\n- type: decode-filter\n- type: magic-scorer\n  name: m\n"),
        "epp.yaml: line 3: plugin `m` (type `magic-scorer`): unsupported plugin type `magic-scorer`"
    );
    let yaml =
        "plugins:\n- type: decode-filter\nschedulingProfiles:\n- name: default\n  plugins:\n  \
                - pluginRef: decode-filter\n  - pluginRef: queue-scorer\n    weight: 2\n";
    assert_eq!(
        err(yaml),
        "epp.yaml: line 7: scheduling profile `default`: pluginRef `queue-scorer` names no plugin"
    );
    let yaml = "plugins:\n- type: always-disagg-pd-decider\nschedulingProfiles:\n- name: default\n  plugins:\n  \
                - pluginRef: always-disagg-pd-decider\n";
    assert_eq!(
        err(yaml),
        "epp.yaml: line 6: scheduling profile `default`: plugin `always-disagg-pd-decider` \
         (type `always-disagg-pd-decider`) is not a filter, scorer or picker"
    );
}

#[test]
fn structural_errors() {
    assert_eq!(
        err("plugin: []\n"),
        "epp.yaml: line 1: unknown field `plugin`, expected one of `apiVersion`, `kind`, `plugins`, \
         `schedulingProfiles`, `featureGates`, `saturationDetector`, `dataLayer`, `flowControl`, `requestHandler`"
    );
    assert_eq!(
        err("plugins:\n- type: decode-filter\nschedulingProfiles:\n- name: a\n- name: b\n"),
        "epp.yaml: no profile handler: 2 scheduling profiles need one (e.g. `disagg-profile-handler`)"
    );
    assert_eq!(
        err("plugins:\n- type: decode-filter\n- type: decode-filter\n"),
        "epp.yaml: line 3: plugin `decode-filter` (type `decode-filter`): duplicate plugin name `decode-filter`"
    );
    assert_eq!(
        err("kind: Other\n"),
        "epp.yaml: kind `Other` is not supported, expected `EndpointPickerConfig`"
    );
    assert_eq!(
        err("plugins:\n- type: disagg-profile-handler\n  parameters:\n    deciders:\n      prefill: nope\n\
             - type: decode-filter\nschedulingProfiles:\n- name: decode\n  plugins:\n  - pluginRef: decode-filter\n"),
        "epp.yaml: line 5: plugin `disagg-profile-handler` (type `disagg-profile-handler`): \
         parameters.deciders.prefill: no plugin named `nope`"
    );
    assert_eq!(
        err("plugins:\n- type: disagg-profile-handler\nschedulingProfiles:\n- name: main\n"),
        "epp.yaml: line 2: plugin `disagg-profile-handler` (type `disagg-profile-handler`): \
         parameters.profiles.decode: scheduling profile `decode` is not defined"
    );
    assert_eq!(
        err("plugins:\n- type: random-picker\n- type: max-score-picker\nschedulingProfiles:\n- name: a\n  plugins:\n  \
             - pluginRef: random-picker\n  - pluginRef: max-score-picker\n"),
        "epp.yaml: line 8: scheduling profile `a`: more than one picker (`random-picker`, `max-score-picker`)"
    );
}
