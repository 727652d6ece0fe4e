//! Config loading of the selector filters, load scorers, weighted picker and header handler:
//! with and without parameters, effective defaults, errors naming plugin, field and line.

use pdgate_scheduler::Scheduler;

fn load(yaml: &str) -> Scheduler {
    Scheduler::from_yaml(yaml, "epp.yaml").unwrap_or_else(|e| panic!("{e}"))
}

fn err(yaml: &str) -> String {
    match Scheduler::from_yaml(yaml, "epp.yaml") {
        Ok(_) => panic!("expected an error for:\n{yaml}"),
        Err(e) => e.to_string(),
    }
}

/// The effective `plugins:` entry of the only plugin of type `t`.
fn entry(s: &Scheduler, t: &str) -> String {
    let y = s.effective_config_yaml();
    let start = y
        .find(&format!("- name: {t}\n"))
        .unwrap_or_else(|| panic!("{y}"));
    let rest = &y[start + 2..];
    let end = rest
        .find("\n- ")
        .or_else(|| rest.find("\nschedulingProfiles:"))
        .unwrap();
    format!("- {}", &rest[..end + 1])
}

/// The effective config loads again to the same text.
fn fixed_point(s: &Scheduler) {
    let again = load(&s.effective_config_yaml());
    assert_eq!(again.effective_config_yaml(), s.effective_config_yaml());
}

#[test]
fn new_plugins_load_without_parameters_and_show_their_defaults() {
    let cases = [
        (
            "encode-filter",
            "- name: encode-filter\n  type: encode-filter\n",
        ),
        (
            "label-selector-filter",
            "- name: label-selector-filter\n  type: label-selector-filter\n  parameters:\n    \
             matchLabels: {}\n    matchExpressions: []\n",
        ),
        (
            "by-label",
            "- name: by-label\n  type: by-label\n  parameters:\n    matchLabels: {}\n    \
             matchExpressions: []\n",
        ),
        (
            "active-request-scorer",
            "- name: active-request-scorer\n  type: active-request-scorer\n  parameters:\n    \
             idleThreshold: 0\n    maxBusyScore: 1.0\n",
        ),
        (
            "running-requests-size-scorer",
            "- name: running-requests-size-scorer\n  type: running-requests-size-scorer\n",
        ),
        (
            "weighted-random-picker",
            "- name: weighted-random-picker\n  type: weighted-random-picker\n  parameters:\n    \
             maxNumOfEndpoints: 1\n    topK: 0\n    topKPercent: 0\n    minTopK: 2\n",
        ),
    ];
    for (t, want) in cases {
        let s = load(&format!("plugins:\n- type: {t}\n"));
        assert_eq!(entry(&s, t), want, "{t}");
        fixed_point(&s);
    }
    let s = load(
        "plugins:\n- type: decode-filter\n- type: header-profile-handler\nschedulingProfiles:\n\
         - name: decode\n  plugins:\n  - pluginRef: decode-filter\n- name: prefill\n  plugins:\n  \
         - pluginRef: decode-filter\n",
    );
    assert_eq!(
        entry(&s, "header-profile-handler"),
        "- name: header-profile-handler\n  type: header-profile-handler\n  parameters:\n    \
         headerName: EPP-Profile\n    defaultProfile: decode\n"
    );
    fixed_point(&s);
}

#[test]
fn new_plugins_load_with_parameters() {
    let s = load(
        "plugins:\n- type: label-selector-filter\n  name: gold\n  parameters:\n    matchLabels:\n      \
         tier: gold\n    matchExpressions:\n    - key: llm-d.ai/role\n      operator: NotIn\n      \
         values: [prefill]\n    - key: zone\n      operator: Exists\n",
    );
    assert_eq!(
        entry(&s, "gold"),
        "- name: gold\n  type: label-selector-filter\n  parameters:\n    matchLabels:\n      tier: gold\n    \
         matchExpressions:\n    - key: llm-d.ai/role\n      operator: NotIn\n      values:\n      - prefill\n    \
         - key: zone\n      operator: Exists\n"
    );
    fixed_point(&s);
    let s = load(
        "plugins:\n- type: by-label\n  name: roles\n  parameters:\n    label: llm-d.ai/role\n    \
         validValues: [decode, both]\n    allowsNoLabel: true\n",
    );
    assert_eq!(
        entry(&s, "roles"),
        "- name: roles\n  type: by-label\n  parameters:\n    matchLabels: {}\n    matchExpressions: []\n    \
         label: llm-d.ai/role\n    validValues:\n    - decode\n    - both\n    allowsNoLabel: true\n"
    );
    fixed_point(&s);
    let s = load(
        "plugins:\n- type: active-request-scorer\n  parameters:\n    idleThreshold: 2\n    \
         maxBusyScore: 0.5\n    requestTimeout: 2m\n",
    );
    assert_eq!(
        entry(&s, "active-request-scorer"),
        "- name: active-request-scorer\n  type: active-request-scorer\n  parameters:\n    idleThreshold: 2\n    \
         maxBusyScore: 0.5\n    requestTimeout: 2m\n"
    );
    fixed_point(&s);
    let s = load(
        "plugins:\n- type: weighted-random-picker\n  parameters:\n    maxNumOfEndpoints: 1\n    topK: 3\n",
    );
    assert!(entry(&s, "weighted-random-picker").contains("    topK: 3\n"));
    let s = load(
        "plugins:\n- type: prefill-filter\n- type: decode-filter\n- type: header-profile-handler\n  \
         parameters:\n    headerName: x-llm-d-epp-profile\n    defaultProfile: prefill\n\
         schedulingProfiles:\n- name: decode\n  plugins:\n  - pluginRef: decode-filter\n\
         - name: prefill\n  plugins:\n  - pluginRef: prefill-filter\n",
    );
    assert!(entry(&s, "header-profile-handler")
        .ends_with("    headerName: x-llm-d-epp-profile\n    defaultProfile: prefill\n"));
    // One profile: any default is fine (that profile always runs).
    load("plugins:\n- type: decode-filter\n- type: header-profile-handler\n  parameters:\n    defaultProfile: x\n");
}

#[test]
fn bad_parameters_name_plugin_field_and_line() {
    let cases = [
        (
            "plugins:\n- type: label-selector-filter\n  name: sel\n  parameters:\n    matchExpressions:\n    \
             - key: a\n      operator: In\n      values: [x]\n    - key: b\n      operator: Equals\n",
            "epp.yaml: line 10: plugin `sel` (type `label-selector-filter`): parameters.matchExpressions[1].operator: \
             unknown variant `Equals`, expected one of `In`, `NotIn`, `Exists`, `DoesNotExist`",
        ),
        (
            "plugins:\n- type: label-selector-filter\n  parameters:\n    matchExpressions:\n    - key: a\n      \
             operator: In\n",
            "epp.yaml: line 5: plugin `label-selector-filter` (type `label-selector-filter`): \
             parameters.matchExpressions[0].values: operator In needs at least one value",
        ),
        (
            "plugins:\n- type: label-selector-filter\n  parameters:\n    matchLabel:\n      a: b\n",
            "epp.yaml: line 4: plugin `label-selector-filter` (type `label-selector-filter`): parameters: \
             unknown field `matchLabel`, expected `matchLabels` or `matchExpressions`",
        ),
        (
            "plugins:\n- type: by-label\n  parameters:\n    validValues: [decode]\n",
            "epp.yaml: line 4: plugin `by-label` (type `by-label`): parameters.label: \
             required when `validValues` or `allowsNoLabel` is set",
        ),
        (
            "plugins:\n- type: encode-filter\n  parameters:\n    role: encode\n",
            "epp.yaml: line 4: plugin `encode-filter` (type `encode-filter`): parameters: unknown field `role`, \
             there are no fields",
        ),
        (
            "plugins:\n- type: active-request-scorer\n  parameters:\n    idleThreshold: 1\n    maxBusyScore: 1.5\n",
            "epp.yaml: line 5: plugin `active-request-scorer` (type `active-request-scorer`): \
             parameters.maxBusyScore: must be between 0 and 1",
        ),
        (
            "plugins:\n- type: active-request-scorer\n  parameters:\n    requestTimeout: 2 minutes\n",
            "epp.yaml: line 4: plugin `active-request-scorer` (type `active-request-scorer`): \
             parameters.requestTimeout: `2 minutes` is not a duration such as `30s`, `2m` or `1h`",
        ),
        (
            "plugins:\n- type: running-requests-size-scorer\n  parameters:\n    threshold: 3\n",
            "epp.yaml: line 4: plugin `running-requests-size-scorer` (type `running-requests-size-scorer`): \
             parameters: unknown field `threshold`, there are no fields",
        ),
        (
            "plugins:\n- type: weighted-random-picker\n  parameters:\n    maxNumOfEndpoints: 0\n",
            "epp.yaml: line 4: plugin `weighted-random-picker` (type `weighted-random-picker`): \
             parameters.maxNumOfEndpoints: must be at least 1",
        ),
        (
            "plugins:\n- type: weighted-random-picker\n  parameters:\n    topKPercent: 101\n",
            "epp.yaml: line 4: plugin `weighted-random-picker` (type `weighted-random-picker`): \
             parameters.topKPercent: must be between 0 and 100",
        ),
        (
            "plugins:\n- type: decode-filter\n- type: header-profile-handler\n  parameters:\n    \
             defaultProfile: main\nschedulingProfiles:\n- name: decode\n- name: prefill\n",
            "epp.yaml: line 5: plugin `header-profile-handler` (type `header-profile-handler`): \
             parameters.defaultProfile: scheduling profile `main` is not defined",
        ),
        (
            "plugins:\n- type: decode-filter\n- type: header-profile-handler\n  parameters:\n    \
             headerName: x-profile\n",
            "epp.yaml: line 5: plugin `header-profile-handler` (type `header-profile-handler`): \
             parameters.headerName: `x-profile` is not supported: pdgate reads the profile from \
             `x-llm-d-epp-profile` (or legacy `EPP-Profile`)",
        ),
    ];
    for (yaml, want) in cases {
        assert_eq!(err(yaml), want, "{yaml}");
    }
}
