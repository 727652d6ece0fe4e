//! Config checking reports every error, in file order, each once (no cascades).

use pdgate_scheduler::config::{self, ConfigErrors};
use pdgate_scheduler::Scheduler;

/// Every error of `yaml`, one string each.
fn errors(yaml: &str) -> Vec<String> {
    match config::check(yaml, "epp.yaml") {
        Ok(y) => panic!("expected errors for:\n{yaml}\ngot:\n{y}"),
        Err(ConfigErrors(es)) => es.iter().map(|e| e.to_string()).collect(),
    }
}

/// Unsupported type on line 5, unknown parameter on line 8, a dangling pluginRef on line 16.
/// The profile also refers to the unsupported plugin (nothing more is said about it) and to
/// the plugin with the bad parameter (fine otherwise).
const THREE_FAULTS: &str = include_str!("data/three-faults.yaml");

const THREE_FAULT_ERRORS: [&str; 3] = [
    "epp.yaml: line 5: plugin `foo-scorer` (type `foo-scorer`): unsupported plugin type `foo-scorer`",
    "epp.yaml: line 8: plugin `queue-scorer` (type `queue-scorer`): parameters: unknown field `bogus`, \
     there are no fields",
    "epp.yaml: line 16: scheduling profile `default`: pluginRef `nothing` names no plugin",
];

#[test]
fn three_independent_faults_are_all_reported_in_file_order() {
    assert_eq!(errors(THREE_FAULTS), THREE_FAULT_ERRORS);
    // Display: one per line.
    let all = config::check(THREE_FAULTS, "epp.yaml").unwrap_err();
    assert_eq!(all.to_string(), THREE_FAULT_ERRORS.join("\n"));
    // `from_yaml` keeps reporting the first one.
    let first = Scheduler::from_yaml(THREE_FAULTS, "epp.yaml")
        .err()
        .unwrap();
    assert_eq!(first.to_string(), THREE_FAULT_ERRORS[0]);
    assert_eq!(first.line, Some(5));
}

#[test]
fn a_single_fault_is_one_error() {
    let yaml =
        "plugins:\n- type: decode-filter\n- type: queue-scorer\n  parameters:\n    bogus: 1\n";
    assert_eq!(
        errors(yaml),
        [THREE_FAULT_ERRORS[1].replace("line 8", "line 5")]
    );
    let yaml =
        "plugins:\n- type: decode-filter\nschedulingProfiles:\n- name: default\n  plugins:\n  \
                - pluginRef: decode-filter\n  - pluginRef: nothing\n";
    assert_eq!(
        errors(yaml),
        ["epp.yaml: line 7: scheduling profile `default`: pluginRef `nothing` names no plugin"]
    );
}

#[test]
fn plugins_with_bad_parameters_are_each_reported() {
    // The producer fails; the scorer is still checked against a stand-in producer.
    let yaml = "plugins:\n- type: approx-prefix-cache-producer\n  parameters:\n    blockSizeTokens: lots\n\
                - type: prefix-cache-scorer\n  parameters:\n    matchLengthWeight: 3\n\
                - type: weighted-random-picker\n  parameters:\n    maxNumOfEndpoints: 0\n\
                schedulingProfiles:\n- name: default\n  plugins:\n  - pluginRef: prefix-cache-scorer\n  \
                - pluginRef: weighted-random-picker\n";
    assert_eq!(
        errors(yaml),
        [
            "epp.yaml: line 4: plugin `approx-prefix-cache-producer` (type `approx-prefix-cache-producer`): \
             parameters.blockSizeTokens: invalid type: string \"lots\", expected a non-negative integer",
            "epp.yaml: line 7: plugin `prefix-cache-scorer` (type `prefix-cache-scorer`): \
             parameters.matchLengthWeight: must be between 0 and 1",
            "epp.yaml: line 10: plugin `weighted-random-picker` (type `weighted-random-picker`): \
             parameters.maxNumOfEndpoints: must be at least 1",
        ]
    );
    // Duplicate names: the second entry is skipped, the first one still checked.
    let yaml = "plugins:\n- type: queue-scorer\n  parameters:\n    x: 1\n- type: queue-scorer\n- type: foo\n\
                - type: foo\n";
    assert_eq!(
        errors(yaml),
        [
            "epp.yaml: line 4: plugin `queue-scorer` (type `queue-scorer`): parameters: unknown field `x`, \
             there are no fields",
            "epp.yaml: line 5: plugin `queue-scorer` (type `queue-scorer`): duplicate plugin name `queue-scorer`",
            "epp.yaml: line 6: plugin `foo` (type `foo`): unsupported plugin type `foo`",
            "epp.yaml: line 7: plugin `foo` (type `foo`): unsupported plugin type `foo`",
        ]
    );
}

#[test]
fn a_failed_plugin_is_not_reported_again_by_what_refers_to_it() {
    // A handler naming an unsupported decider.
    let yaml = "plugins:\n- type: prefill-filter\n- type: decode-filter\n- type: magic-pd-decider\n  name: dec\n\
                - type: disagg-profile-handler\n  parameters:\n    deciders:\n      prefill: dec\n\
                schedulingProfiles:\n- name: prefill\n  plugins:\n  - pluginRef: prefill-filter\n\
                - name: decode\n  plugins:\n  - pluginRef: decode-filter\n";
    assert_eq!(
        errors(yaml),
        ["epp.yaml: line 4: plugin `dec` (type `magic-pd-decider`): unsupported plugin type `magic-pd-decider`"]
    );
    // An unsupported handler: two profiles do not also report a missing handler.
    let yaml =
        "plugins:\n- type: decode-filter\n- type: disag-profile-handler\nschedulingProfiles:\n\
                - name: a\n- name: b\n";
    assert_eq!(
        errors(yaml),
        [
            "epp.yaml: line 3: plugin `disag-profile-handler` (type `disag-profile-handler`): \
          unsupported plugin type `disag-profile-handler`"
        ]
    );
    // An unsupported picker in a profile: no injected picker, nothing about the profile.
    let yaml =
        "plugins:\n- type: decode-filter\n- type: best-picker\nschedulingProfiles:\n- name: a\n  \
                plugins:\n  - pluginRef: decode-filter\n  - pluginRef: best-picker\n";
    assert_eq!(
        errors(yaml),
        ["epp.yaml: line 3: plugin `best-picker` (type `best-picker`): unsupported plugin type `best-picker`"]
    );
}

#[test]
fn every_profile_problem_is_reported() {
    let yaml = "plugins:\n- type: decode-filter\n- type: queue-scorer\n- type: random-picker\n\
                - type: max-score-picker\n- type: always-disagg-pd-decider\nschedulingProfiles:\n- name: a\n  \
                plugins:\n  - pluginRef: always-disagg-pd-decider\n  - pluginRef: queue-scorer\n    weight: -1\n  \
                - pluginRef: random-picker\n  - pluginRef: max-score-picker\n  - pluginRef: gone\n\
                - name: a\n  plugins:\n  - pluginRef: decode-filter\n";
    assert_eq!(
        errors(yaml),
        [
            "epp.yaml: line 10: scheduling profile `a`: plugin `always-disagg-pd-decider` \
             (type `always-disagg-pd-decider`) is not a filter, scorer or picker",
            "epp.yaml: line 11: scheduling profile `a`: weight of `queue-scorer` must be a number ≥ 0",
            "epp.yaml: line 14: scheduling profile `a`: more than one picker (`random-picker`, `max-score-picker`)",
            "epp.yaml: line 15: scheduling profile `a`: pluginRef `gone` names no plugin",
            "epp.yaml: line 16: duplicate scheduling profile `a`",
        ]
    );
}

#[test]
fn handler_problems_come_with_the_handlers_own_errors() {
    let yaml = "plugins:\n- type: decode-filter\n- type: single-profile-handler\n- type: header-profile-handler\n  \
                parameters:\n    headerName: x\n";
    assert_eq!(
        errors(yaml),
        [
            "epp.yaml: line 6: plugin `header-profile-handler` (type `header-profile-handler`): \
             parameters.headerName: `x` is not supported: pdgate reads the profile from \
             `x-llm-d-epp-profile` (or legacy `EPP-Profile`)",
            "epp.yaml: more than one profile handler: `single-profile-handler`, `header-profile-handler`",
        ]
    );
    let yaml = "plugins:\n- type: decode-filter\n- type: queue-scorer\n  parameters:\n    x: 1\n\
                schedulingProfiles:\n- name: a\n- name: b\n";
    assert_eq!(
        errors(yaml),
        [
            "epp.yaml: line 5: plugin `queue-scorer` (type `queue-scorer`): parameters: unknown field `x`, \
             there are no fields",
            "epp.yaml: no profile handler: 2 scheduling profiles need one (e.g. `disagg-profile-handler`)",
        ]
    );
}

#[test]
fn malformed_entries_are_reported_one_each_and_skipped() {
    // A misspelled key in a plugin entry, a bad parameter, a mistyped weight; the profile
    // referring to the malformed plugin says nothing more about it.
    let yaml = "plugins:\n- type: decode-filter\n- nmae: x\n  type: queue-scorer\n\
                - type: kv-cache-utilization-scorer\n  parameters:\n    x: 1\nschedulingProfiles:\n\
                - name: a\n  plugins:\n  - pluginRef: decode-filter\n  - pluginRef: queue-scorer\n\
                - name: b\n  plugins:\n  - pluginRef: decode-filter\n    weight: heavy\n\
                - plugins: []\n";
    assert_eq!(
        errors(yaml),
        [
            "epp.yaml: line 3: plugins[1]: unknown field `nmae`, expected one of `name`, `type`, `parameters`",
            "epp.yaml: line 7: plugin `kv-cache-utilization-scorer` (type `kv-cache-utilization-scorer`): \
             parameters: unknown field `x`, there are no fields",
            "epp.yaml: line 16: schedulingProfiles[1].plugins[0].weight: invalid type: string \"heavy\", \
             expected a number",
            "epp.yaml: line 17: schedulingProfiles[2]: missing field `name`",
            // Profiles `a` and `b` (malformed or not) need a handler.
            "epp.yaml: no profile handler: 2 scheduling profiles need one (e.g. `disagg-profile-handler`)",
        ]
    );
    // A malformed producer, decider or handler entry stands in for what refers to it.
    let yaml = "plugins:\n- type: approx-prefix-cache-producer\n  parameter:\n    blockSizeTokens: 8\n\
                - type: prefix-cache-scorer\n- type: prefix-based-pd-decider\n  name: dec\n  nonCachedTokens: 8\n\
                - type: prefill-filter\n- type: decode-filter\n- type: disagg-profile-handler\n  \
                paramters:\n    deciders:\n      prefill: dec\n\
                schedulingProfiles:\n- name: prefill\n  plugins:\n  - pluginRef: prefill-filter\n\
                - name: decode\n  plugins:\n  - pluginRef: decode-filter\n  - pluginRef: prefix-cache-scorer\n";
    assert_eq!(
        errors(yaml),
        [
            "epp.yaml: line 3: plugins[0]: unknown field `parameter`, expected one of `name`, `type`, \
             `parameters`",
            "epp.yaml: line 8: plugins[2]: unknown field `nonCachedTokens`, expected one of `name`, `type`, \
             `parameters`",
            "epp.yaml: line 12: plugins[5]: unknown field `paramters`, expected one of `name`, `type`, \
             `parameters`",
        ]
    );
    // Alone, it reads as `from_yaml` always reported it.
    let yaml = "plugins:\n- type: decode-filter\n- nmae: x\n  type: queue-scorer\n";
    assert_eq!(
        errors(yaml),
        ["epp.yaml: line 3: plugins[1]: unknown field `nmae`, expected one of `name`, `type`, `parameters`"]
    );
}

#[test]
fn documents_that_do_not_parse_are_one_error() {
    for (yaml, want) in [
        (
            "plugins:\n- type: decode-filter\n- type: queue-scorer\n  parameters: [\n",
            "epp.yaml: line 5: did not find expected node content",
        ),
        (
            "plugins:\n- type: foo\nscheduling: []\n",
            "epp.yaml: line 3: unknown field `scheduling`, expected one of `apiVersion`, `kind`, `plugins`, \
             `schedulingProfiles`, `featureGates`, `saturationDetector`, `dataLayer`, `flowControl`, \
             `requestHandler`",
        ),
        (
            "kind: Other\nplugins:\n- type: foo\n",
            "epp.yaml: kind `Other` is not supported, expected `EndpointPickerConfig`",
        ),
        (
            "plugins: 3\n",
            "epp.yaml: line 1: plugins: invalid type: integer `3`, expected a sequence",
        ),
    ] {
        assert_eq!(errors(yaml), [want], "{yaml}");
    }
}

#[test]
fn every_llm_d_sample_checks_clean() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/compat/llm-d");
    let mut checked = 0;
    for entry in std::fs::read_dir(dir).expect("compat dir") {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        if path.extension().is_none_or(|e| e != "yaml")
            || !text.contains("kind: EndpointPickerConfig")
        {
            continue;
        }
        let name = path.display().to_string();
        let effective = config::check(&text, &name).unwrap_or_else(|e| panic!("{e}"));
        let s = Scheduler::from_yaml(&text, &name).unwrap();
        assert_eq!(effective, s.effective_config_yaml(), "{name}");
        checked += 1;
    }
    assert!(checked >= 3, "{checked} samples");
}

#[test]
fn a_pluginref_listed_twice_and_an_empty_profile_name_are_errors() {
    // Found by a fresh-eyes run: both loaded silently (the scorer then counted twice).
    let yaml = "plugins:\n- type: decode-filter\n- type: queue-scorer\nschedulingProfiles:\n\
                - name: a\n  plugins:\n  - pluginRef: queue-scorer\n  - pluginRef: queue-scorer\n\
                - name: ''\n  plugins:\n  - pluginRef: decode-filter\n";
    assert_eq!(
        errors(yaml),
        [
            "epp.yaml: line 8: scheduling profile `a`: pluginRef `queue-scorer` is listed twice",
            "epp.yaml: line 9: a scheduling profile has an empty name",
        ]
    );
}
