//! Unit tests of `request_parsers.rs`.

use crate::Scheduler;

#[test]
fn a_config_declaring_it_loads_and_a_parameter_is_refused() {
    let yaml = |params: &str| {
        format!(
            "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: anthropic-parser\n- type: vllmhttp-parser\n- type: openai-parser{params}\n- type: queue-scorer\nschedulingProfiles:\n- name: default\n  plugins:\n  - pluginRef: queue-scorer\n"
        )
    };
    assert!(Scheduler::from_yaml(&yaml(""), "epp.yaml").is_ok());
    let e = Scheduler::from_yaml(&yaml("\n  parameters:\n    strict: true"), "epp.yaml")
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("unknown field `strict`"), "{e}");
}
