use super::*;
use crate::flow::policy::{Fairness, FlowPolicy, Ordering};
use std::time::Duration;

fn sections(yaml: &str) -> RawSections {
    serde_yaml_ng::from_str(yaml).unwrap()
}

fn none(_: &str) -> Option<Declared> {
    None
}

#[test]
fn gates() {
    assert_eq!(gate(&["flowControl".into()]), Ok(true));
    assert_eq!(gate(&["flowControl=false".into()]), Ok(false));
    assert_eq!(gate(&[]), Ok(false));
    let e = gate(&["fooGate".into()]).unwrap_err();
    assert!(e.1.contains("`fooGate` is unknown"), "{e:?}");
    assert!(gate(&["flowControl=maybe".into()]).is_err());
}

#[test]
fn the_llm_d_docs_sample_resolves() {
    let s = resolve(
        sections(
            "featureGates: [flowControl]\nflowControl:\n  maxBytes: 10Gi\n  defaultRequestTTL: 60s\n  \
             defaultPriorityBand:\n    maxBytes: 10Gi\n    maxRequests: 5000\n  priorityBands:\n  \
             - priority: 100\n    maxBytes: 5Gi\n    maxRequests: 500\n    \
             orderingPolicyRef: fcfs-ordering-policy\n    fairnessPolicyRef: global-strict-fairness-policy\n",
        ),
        &none,
    )
    .unwrap();
    assert!(s.gate);
    let c = &s.control;
    assert_eq!(c.max_bytes, 10 << 30);
    assert_eq!(c.default_ttl, Duration::from_secs(60));
    assert_eq!(c.no_endpoint_ttl, Duration::from_secs(60));
    assert_eq!(
        c.bands
            .iter()
            .map(|b| (b.priority, b.max_requests))
            .collect::<Vec<_>>(),
        vec![(100, 500), (0, 5000)]
    );
    assert_eq!(c.bands[0].max_bytes, 5 << 30);
    assert_eq!(c.band(7).max_bytes, 10 << 30);
    assert_eq!(s.detector.type_name(), "utilization-detector");
    assert!(s.warnings.is_empty());
}

#[test]
fn references_defaults_and_errors() {
    let lookup = |n: &str| match n {
        "rr" => Some(Declared::Policy(FlowPolicy::Fairness(Fairness::RoundRobin))),
        "edf" => Some(Declared::Policy(FlowPolicy::Ordering(Ordering::Edf))),
        "qs" => Some(Declared::Other),
        _ => None,
    };
    let s = resolve(
        sections(
            "featureGates: [flowControl]\nflowControl:\n  defaultRequestTTL: 0s\n  \
             defaultNegativePriorityBand: {maxRequests: 50, fairnessPolicyRef: rr}\n  \
             priorityBands:\n  - {priority: -1, orderingPolicyRef: edf}\n  - {priority: 0, maxRequests: 0}\n",
        ),
        &lookup,
    )
    .unwrap();
    let c = &s.control;
    assert_eq!(c.default_ttl, Duration::ZERO);
    assert_eq!(c.no_endpoint_ttl, Duration::ZERO); // inherits
    let neg = c.band(-1);
    assert_eq!(
        (neg.max_requests, neg.fairness, neg.ordering),
        (50, Fairness::RoundRobin, Ordering::Edf)
    );
    assert_eq!(c.band(0).max_requests, 5000); // 0 means the default
    assert_eq!(c.band(-9).max_requests, 50);
    let err = |y: &str| resolve(sections(y), &lookup).unwrap_err();
    assert_eq!(
        err("flowControl:\n  priorityBands:\n  - {priority: 1}\n  - {priority: 1}\n"),
        (
            "flowControl.priorityBands[1].priority".into(),
            "duplicate priority level 1".into()
        )
    );
    assert!(err("flowControl:\n  priorityBands:\n  - {fairnessPolicyRef: rr, priority: 1, orderingPolicyRef: nope}\n")
        .1
        .contains("`nope` not found"));
    assert!(
        err("flowControl:\n  priorityBands:\n  - {priority: 1, fairnessPolicyRef: edf}\n")
            .1
            .contains("not a fairness policy")
    );
    assert!(err("flowControl:\n  saturationDetector: {pluginRef: qs}\n")
        .1
        .contains("not a saturation detector"));
    assert!(
        err("flowControl:\n  saturationDetector: {pluginRef: gone}\n")
            .1
            .contains("undefined plugin `gone`")
    );
    // A detector named by its type needs no plugins entry.
    let s = resolve(
        sections("flowControl:\n  saturationDetector: {pluginRef: concurrency-detector}\n"),
        &lookup,
    )
    .unwrap();
    assert_eq!(s.detector.type_name(), "concurrency-detector");
    // llm-d v1: eviction, a band's own TTL, the band-selection policy.
    let s = resolve(
        sections(
            "flowControl:\n  enableEviction: true\n  bandSelectionPolicyPluginRef: \
             strict-band-selection-policy\n  defaultRequestTTL: 30s\n  priorityBands:\n  \
             - {priority: 7, defaultRequestTTL: 2s}\n  - {priority: 3}\n",
        ),
        &none,
    )
    .unwrap();
    assert!(s.control.enable_eviction);
    assert_eq!(s.control.band(7).ttl, Some(Duration::from_secs(2)));
    assert_eq!(
        s.control.ttl(&s.control.band(7), false),
        Duration::from_secs(2)
    );
    assert_eq!(
        s.control.ttl(&s.control.band(3), false),
        Duration::from_secs(30)
    );
    assert_eq!(
        s.control.ttl(&s.control.band(7), true),
        Duration::from_secs(30)
    );
    assert!(
        err("flowControl:\n  bandSelectionPolicyPluginRef: fcfs-ordering-policy\n")
            .1
            .contains("not a band-selection policy")
    );
    assert!(
        err("flowControl:\n  bandSelectionPolicyPluginRef: lottery\n")
            .1
            .contains("`lottery` not found")
    );
    // A policy type with required parameters, named without a `plugins:` entry, says so.
    assert!(
        err("flowControl:\n  usageLimitPolicyPluginRef: priority-holdback-policy\n")
            .1
            .contains("plugin type `priority-holdback-policy` has required parameters")
    );
    // A section without the gate loads, with a warning.
    let s = resolve(sections("flowControl:\n  maxBytes: \"1024\"\n"), &lookup).unwrap();
    assert!(!s.gate && s.warnings.len() == 1);
    // Policies named by type work without a plugins entry.
    let s = resolve(
        sections("flowControl:\n  priorityBands:\n  - {priority: 3, fairnessPolicyRef: round-robin-fairness-policy}\n"),
        &none,
    )
    .unwrap();
    assert_eq!(s.control.band(3).fairness, Fairness::RoundRobin);
    // GAIE v1.3's top-level thresholds build a utilization detector.
    let s = resolve(
        sections("saturationDetector:\n  queueDepthThreshold: 2\n  kvCacheUtilThreshold: 0.5\n"),
        &none,
    )
    .unwrap();
    assert_eq!(s.detector.type_name(), "utilization-detector");
}
