//! llm-d's flow-control sample configs load with llm-d's meaning: the loader test inputs of
//! llm-d-router (`pkg/epp/config/loader/testdata_test.go`) and the samples of the Gateway API
//! Inference Extension guides (`site-src/guides/flow-control.md`, `epp-configuration/
//! config-text.md`); and the effective config keeps the sections (loading it again gives the
//! same settings).

use pdgate_scheduler::flow::plugins::{Fairness, Ordering};
use pdgate_scheduler::Scheduler;
use std::time::Duration;

const HEAD: &str = "apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- name: maxScore
  type: max-score-picker
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: maxScore
";

fn load(yaml: &str) -> Scheduler {
    let s = Scheduler::from_yaml(yaml, "sample").unwrap_or_else(|e| panic!("{e}\n{yaml}"));
    // The effective config carries the sections: loading it again gives the same settings.
    let again = Scheduler::from_yaml(&s.effective_config_yaml(), "effective").unwrap();
    assert_eq!(again.flow().gate, s.flow().gate);
    assert_eq!(again.flow().control, s.flow().control);
    s
}

#[test]
fn loader_success_flow_control_config() {
    let s = load(&format!(
        "{HEAD}featureGates:\n- flowControl\nflowControl:\n  maxBytes: \"1024\"\n  \
         defaultRequestTTL: 1m\n  noEndpointRequestTTL: 5m\n"
    ));
    let f = s.flow();
    assert!(f.gate);
    assert_eq!(f.control.max_bytes, 1024);
    assert_eq!(f.control.default_ttl, Duration::from_secs(60));
    assert_eq!(f.control.no_endpoint_ttl, Duration::from_secs(300));
    assert_eq!(f.detector.type_name(), "utilization-detector");
}

#[test]
fn loader_inherited_ttl_and_disabled_gate() {
    let s = load(&format!(
        "{HEAD}featureGates:\n- flowControl\nflowControl:\n  defaultRequestTTL: 0s\n"
    ));
    assert_eq!(s.flow().control.default_ttl, Duration::ZERO);
    assert_eq!(s.flow().control.no_endpoint_ttl, Duration::ZERO);
    let s = load(&format!(
        "{HEAD}featureGates: [\"flowControl=false\"]\nflowControl:\n  maxBytes: \"1024\"\n"
    ));
    assert!(!s.flow().gate);
    assert_eq!(s.flow().warnings.len(), 1, "{:?}", s.flow().warnings);
}

#[test]
fn loader_complex_flow_control_config() {
    let yaml = "apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- name: maxScore
  type: max-score-picker
- name: customFCFS
  type: fcfs-ordering-policy
- name: customFairness
  type: round-robin-fairness-policy
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: maxScore
featureGates:
- flowControl
flowControl:
  priorityBands:
  - priority: 100
    orderingPolicyRef: customFCFS
    fairnessPolicyRef: customFairness
";
    let s = load(yaml);
    // The effective config writes the defaults out (check-config shows what runs).
    let eff = s.effective_config_yaml();
    for line in [
        "defaultRequestTTL: 60s",
        "noEndpointRequestTTL: 60s",
        "usageLimitPolicyPluginRef: static-usage-limit-policy",
        "pluginRef: utilization-detector",
        "maxRequests: 5000",
    ] {
        assert!(eff.contains(line), "{line} missing in\n{eff}");
    }
    let band = s.flow().control.band(100);
    assert_eq!(
        (
            band.fairness,
            band.ordering,
            band.max_requests,
            band.max_bytes
        ),
        (Fairness::RoundRobin, Ordering::Fcfs, 5000, 1_000_000_000)
    );
    assert_eq!(
        s.flow()
            .control
            .bands
            .iter()
            .map(|b| b.priority)
            .collect::<Vec<_>>(),
        vec![100, 0]
    );
}

#[test]
fn gaie_flow_control_guide_samples() {
    for detector in [
        "- type: utilization-detector\n  parameters:\n    queueDepthThreshold: 2\n    kvCacheUtilThreshold: 0.85\n",
        "- type: concurrency-detector\n  parameters:\n    concurrencyMode: \"requests\"\n    maxConcurrency: 110\n",
    ] {
        let name = if detector.contains("utilization") {
            "utilization-detector"
        } else {
            "concurrency-detector"
        };
        let yaml = format!(
            "apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
featureGates:
- flowControl
plugins:
{detector}- type: queue-scorer
- type: max-score-picker
saturationDetector:
  pluginRef: {name}
flowControl:
  maxBytes: 1000000000
  defaultRequestTTL: 30s
  priorityBands:
  - priority: 100
    maxBytes: 500000000
    fairnessPolicyRef: \"global-strict-fairness-policy\"
    orderingPolicyRef: \"fcfs-ordering-policy\"
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: queue-scorer
  - pluginRef: max-score-picker
"
        );
        let s = load(&yaml);
        assert_eq!(s.flow().detector.type_name(), name);
        assert_eq!(s.flow().control.band(100).max_bytes, 500_000_000);
        assert_eq!(s.flow().control.default_ttl, Duration::from_secs(30));
    }
}

#[test]
fn unsupported_flow_plugins_are_named() {
    // llm-d's probabilistic-admitter sample loads since issue 13 (the admitter is built).
    let yaml = "apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: probabilistic-admitter
- type: random-picker
- type: utilization-detector
  parameters:
    queueDepthThreshold: 999999999
    kvCacheUtilThreshold: 1.0
flowControl:
  saturationDetector:
    pluginRef: utilization-detector
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: random-picker
";
    pdgate_scheduler::config::check(yaml, "sample").unwrap();
    // llm-d v1's alpha endpoint gate is not built: named, at its line.
    let e = Scheduler::from_yaml(
        &format!("{HEAD}featureGates: [flowControl]\nflowControl:\n  endpointGatePluginRef: g\n"),
        "sample",
    )
    .err()
    .unwrap();
    assert!(e.to_string().contains("endpointGatePluginRef"), "{e}");
    assert_eq!(e.line, Some(12), "{e}");
    let e = Scheduler::from_yaml(
        &format!("{HEAD}featureGates: [flowControl]\nflowControl:\n  defaultRequestTTL: 5d\n"),
        "sample",
    )
    .err()
    .unwrap();
    assert!(e.to_string().contains("unknown unit `d`"), "{e}");
    assert_eq!(e.line, Some(12), "{e}");
}

#[test]
fn errors_name_the_line_of_the_value() {
    // Regressions (adversarial try): a bad duration was reported at the section's first key,
    // a duplicate band at the first copy, and `check-config` did not say what has no effect.
    let at = |body: &str| {
        let e = Scheduler::from_yaml(&format!("{HEAD}featureGates: [flowControl]\n{body}"), "s")
            .err()
            .unwrap();
        (e.line, e.message)
    };
    let (line, msg) = at("flowControl:\n  maxRequests: 5\n  defaultRequestTTL: banana\n");
    assert_eq!(line, Some(13), "{msg}");
    assert!(msg.contains("duration `banana`"), "{msg}");
    let (line, msg) = at(
        "flowControl:\n  priorityBands:\n  - priority: 1\n    maxRequests: 2\n  - priority: 1\n",
    );
    assert_eq!(line, Some(15), "{msg}");
    assert!(msg.contains("duplicate priority level 1"), "{msg}");
    let checked = pdgate_scheduler::config::check(
        &format!(
            "{HEAD}featureGates: [\"flowControl=false\"]\nflowControl:\n  maxBytes: \"1024\"\n"
        ),
        "s",
    )
    .unwrap();
    assert!(
        checked.contains("# warning: the flowControl config section is set but the flowControl feature gate is disabled"),
        "{checked}"
    );
}

/// llm-d's own docs: the flow-control example of `docs/architecture/core/router/epp/
/// configuration.md`, and the same under `apiVersion: llm-d.ai/v1` with the v1 fields
/// (`docs/api-reference` EndpointPickerConfig: a band's `defaultRequestTTL`,
/// `bandSelectionPolicyPluginRef`, `enableEviction`).
#[test]
fn llm_d_docs_sample_and_v1_fields() {
    let body = "kind: EndpointPickerConfig

featureGates:
- flowControl

plugins:
- type: round-robin-fairness-policy
- type: fcfs-ordering-policy
- type: global-strict-fairness-policy
- type: utilization-detector
- type: max-score-picker

flowControl:
  maxBytes: 0 # Default: unlimited
  maxRequests: 0 # Default: unlimited
  defaultRequestTTL: \"0s\" # Default: uses client context deadline
  enableEviction: false # Default: in-flight eviction disabled

  saturationDetector:
    pluginRef: utilization-detector # Default

  defaultPriorityBand:
    maxBytes: \"1Gi\" # Default
    maxRequests: 0 # Default: unlimited
    orderingPolicyRef: fcfs-ordering-policy # Default
    fairnessPolicyRef: global-strict-fairness-policy # Default

  priorityBands: # Only showing overrides; fields not specified inherit from defaults
  - priority: 100
    maxBytes: \"5Gi\"
    maxRequests: 500
    fairnessPolicyRef: round-robin-fairness-policy

  - priority: 50
    maxBytes: \"2Gi\"
    maxRequests: 200
";
    let s = load(&format!("apiVersion: llm-d.ai/v1alpha1\n{body}"));
    let c = &s.flow().control;
    assert!(s.flow().gate && !c.enable_eviction);
    assert_eq!(c.default_ttl, Duration::ZERO);
    assert_eq!(c.band(100).max_bytes, 5 << 30);
    assert_eq!(c.band(100).fairness, Fairness::RoundRobin);
    assert_eq!(c.band(50).max_requests, 200);
    assert_eq!(c.band(7).max_bytes, 1 << 30);

    let v1 = format!(
        "apiVersion: llm-d.ai/v1\n{}",
        body.replace("enableEviction: false", "enableEviction: true")
            .replace("- type: max-score-picker", "- type: max-score-picker\n- type: strict-band-selection-policy")
            .replace(
                "  saturationDetector:",
                "  bandSelectionPolicyPluginRef: strict-band-selection-policy\n  saturationDetector:"
            )
            .replace("    maxRequests: 200", "    maxRequests: 200\n    defaultRequestTTL: 250ms")
    );
    let s = load(&v1);
    let c = &s.flow().control;
    assert!(c.enable_eviction);
    assert_eq!(c.ttl(&c.band(50), false), Duration::from_millis(250));
    assert_eq!(c.ttl(&c.band(100), false), Duration::ZERO);
    // The effective config writes the v1 fields out.
    let eff = s.effective_config_yaml();
    for needle in [
        "enableEviction: true",
        "bandSelectionPolicyPluginRef: strict-band-selection-policy",
        "defaultRequestTTL: 250ms",
    ] {
        assert!(eff.contains(needle), "{needle} missing from\n{eff}");
    }
}
