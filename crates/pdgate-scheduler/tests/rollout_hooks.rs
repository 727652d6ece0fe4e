//! `disaggregatedset-rollout-screener` hooks and surroundings: revision stamping on phase
//! responses and on a conditional-decode 412, `disabled` mode, metrics, config errors
//! (design.md §5.1).

mod rollout_fleet;

use pdgate_api::PromptInput;
use pdgate_scheduler::plugin::{MetricKind, PluginMetric};
use pdgate_scheduler::{Rejection, Scheduler};
use rollout_fleet::{config, fleet, member, prompt, request, rev, sched, snap, REV};
use std::collections::BTreeSet;

fn stamped(headers: &[(String, String)]) -> Vec<&str> {
    headers
        .iter()
        .filter(|(k, _)| k == REV)
        .map(|(_, v)| v.as_str())
        .collect()
}

#[test]
fn response_header_stamps_the_answering_endpoints_revision_on_any_status() {
    let s = sched("");
    let eps = fleet(&[("a", 1, 1), ("b", 1, 1)]);
    let snapshot = snap(&eps, 1);
    let p = prompt();
    for i in 0..20 {
        // A fresh prompt each time: the 2xx responses below teach the prefix index.
        let p = PromptInput::Tokens((i * 1000..i * 1000 + 64).collect());
        let r = s.schedule(&request(&p, &[], false), &snapshot).unwrap();
        let chosen = rev(&r.decode);
        let pre = r.prefill.as_ref().expect("64 uncached tokens are split");
        assert_eq!(stamped(&s.response_received(pre, 200)), [chosen.as_str()]);
        assert_eq!(
            stamped(&s.response_received(&r.decode, 200)),
            [chosen.as_str()]
        );
        assert_eq!(
            stamped(&s.response_received(&r.decode, 503)),
            [chosen.as_str()]
        );
    }
    // An endpoint without a revision label (scheduled in `disabled` mode) gets no stamp.
    let s = sched("revisionGating:\n  mode: disabled");
    let plain = [pdgate_scheduler::EndpointState {
        endpoint: pdgate_scheduler::Endpoint::new("d", "d:8000", Default::default()),
        load: Default::default(),
    }]
    .map(std::sync::Arc::new);
    let r = s
        .schedule(&request(&p, &[], false), &snap(&plain, 1))
        .unwrap();
    assert!(stamped(&s.response_received(&r.decode, 200)).is_empty());
}

#[test]
fn a_conditional_decode_412_carries_the_chosen_revision() {
    let s = sched("");
    let p = prompt();
    // Only `a` is covered: the choice is `a`.
    let eps = fleet(&[("a", 1, 1), ("b", 0, 3)]);
    let e = s
        .schedule(&request(&p, &[], true), &snap(&eps, 1))
        .unwrap_err();
    assert!(
        matches!(e.reason, Rejection::DecodeDeferred { .. }),
        "{e:?}"
    );
    assert_eq!(e.headers, [(REV.to_string(), "a".to_string())]);
    // Strict to `b`, then a drawn choice: the 412 names what the screener chose.
    let eps = fleet(&[("a", 1, 1), ("b", 1, 1)]);
    let snapshot = snap(&eps, 2);
    let e = s
        .schedule(&request(&p, &[(REV, "b")], true), &snapshot)
        .unwrap_err();
    assert_eq!(e.headers, [(REV.to_string(), "b".to_string())]);
    let mut seen = BTreeSet::new();
    for _ in 0..100 {
        let e = s.schedule(&request(&p, &[], true), &snapshot).unwrap_err();
        assert!(matches!(e.reason, Rejection::DecodeDeferred { .. }));
        assert_eq!(e.headers.len(), 1);
        seen.insert(e.headers[0].1.clone());
    }
    assert_eq!(seen, BTreeSet::from(["a".to_string(), "b".to_string()]));
    assert!(eps.iter().all(|e| e.load.in_flight() == 0));
}

#[test]
fn disabled_mode_uses_every_revision_unless_a_header_names_one() {
    let s = sched("revisionGating:\n  mode: disabled");
    let eps = fleet(&[("a", 1, 2), ("b", 1, 2), ("c", 0, 2)]);
    let snapshot = snap(&eps, 1);
    let p = prompt();
    let mut seen = BTreeSet::new();
    for _ in 0..400 {
        let r = s.schedule(&request(&p, &[], false), &snapshot).unwrap();
        seen.insert(rev(&r.decode));
    }
    // No narrowing at all: even the uncovered `c` serves.
    assert_eq!(seen.len(), 3, "{seen:?}");
    for _ in 0..200 {
        let r = s
            .schedule(&request(&p, &[(REV, "b")], false), &snapshot)
            .unwrap();
        assert_eq!(rev(&r.decode), "b");
    }
    let e = s
        .schedule(&request(&p, &[(REV, "c")], false), &snapshot)
        .unwrap_err();
    assert_eq!(
        e.reason,
        Rejection::Screened {
            reason: "strict revision `c` (header x-llm-d-disagg-revision) is not covered".into()
        }
    );
    // Disabled mode exports no share gauge.
    assert!(s
        .plugin_metrics(&snapshot)
        .iter()
        .all(|m| m.name != "pdgate_revision_share"));
}

fn metric(ms: &[PluginMetric], name: &str) -> Vec<(String, f64, MetricKind)> {
    ms.iter()
        .filter(|m| m.name == name)
        .map(|m| {
            let label = m.labels.iter().map(|(_, v)| v.clone()).collect::<String>();
            (label, m.value, m.kind)
        })
        .collect()
}

#[test]
fn metrics_follow_endpoint_changes_and_count_strict_misses() {
    let s = sched("");
    let p = prompt();
    // No endpoints yet: no share series.
    assert!(metric(&s.plugin_metrics(&snap(&[], 0)), "pdgate_revision_share").is_empty());
    let eps = fleet(&[("a", 2, 9), ("b", 1, 1)]);
    // Shares follow the snapshot even before any request (fresh-eyes finding: gauges were
    // stale until the next request).
    assert_eq!(
        metric(&s.plugin_metrics(&snap(&eps, 1)), "pdgate_revision_share").len(),
        2
    );
    for _ in 0..10 {
        s.schedule(&request(&p, &[], false), &snap(&eps, 1))
            .unwrap();
    }
    let ms = s.plugin_metrics(&snap(&eps, 1));
    assert_eq!(
        metric(&ms, "pdgate_revision_share"),
        [
            ("a".to_string(), 0.9, MetricKind::Gauge),
            ("b".to_string(), 0.1, MetricKind::Gauge)
        ]
    );
    assert_eq!(
        metric(&ms, "pdgate_revision_strict_misses_total"),
        [(String::new(), 0.0, MetricKind::Counter)]
    );
    let decisions: f64 = metric(&ms, "pdgate_revision_decisions_total")
        .iter()
        .map(|(_, v, _)| v)
        .sum();
    assert_eq!(decisions, 10.0);
    // Revision b's endpoints go away (new snapshot version): only a's series remains.
    let only_a: Vec<_> = eps
        .iter()
        .filter(|e| e.endpoint.revision() == Some("a"))
        .cloned()
        .collect();
    let snapshot = snap(&only_a, 2);
    // Gone from the gauge at once, before any request sees the new snapshot.
    assert_eq!(
        metric(&s.plugin_metrics(&snapshot), "pdgate_revision_share"),
        [("a".to_string(), 1.0, MetricKind::Gauge)]
    );
    s.schedule(&request(&p, &[], false), &snapshot).unwrap();
    for bad in ["b", "zzz"] {
        s.schedule(&request(&p, &[(REV, bad)], false), &snapshot)
            .unwrap_err();
    }
    let ms = s.plugin_metrics(&snapshot);
    assert_eq!(
        metric(&ms, "pdgate_revision_share"),
        [("a".to_string(), 1.0, MetricKind::Gauge)]
    );
    assert_eq!(
        metric(&ms, "pdgate_revision_strict_misses_total"),
        [(String::new(), 2.0, MetricKind::Counter)]
    );
    // Revision b left: its decision count is forgotten too (bounded per-revision state).
    let revisions: Vec<String> = metric(&ms, "pdgate_revision_decisions_total")
        .into_iter()
        .map(|(r, ..)| r)
        .collect();
    assert_eq!(revisions, ["a"]);
    // The same version is not recomputed: a snapshot reusing version 2 keeps the cache.
    s.schedule(&request(&p, &[], false), &snap(&only_a, 2))
        .unwrap();
    assert_eq!(
        metric(
            &s.plugin_metrics(&snap(&only_a, 2)),
            "pdgate_revision_share"
        )
        .len(),
        1
    );
}

#[test]
fn scope_keeps_other_sets_out_of_counts_and_candidates() {
    let s = sched("scope:\n  labelSelector: \"disaggregatedset.x-k8s.io/name=my-set\"");
    let mut eps = fleet(&[("a", 1, 1)]);
    // Another set's revision `a`: not counted, and never a candidate.
    eps.extend((0..8).map(|i| member("other-set", "a", "decode", i)));
    let snapshot = snap(&eps, 1);
    let p = prompt();
    for _ in 0..200 {
        let r = s.schedule(&request(&p, &[], false), &snapshot).unwrap();
        assert!(r.decode.endpoint.endpoint.name.starts_with("my-set-"));
    }
}

fn load_error(params: &str) -> pdgate_scheduler::ConfigError {
    match Scheduler::from_yaml(&config(params), "epp.yaml") {
        Ok(_) => panic!("expected an error for {params:?}"),
        Err(e) => e,
    }
}

/// 1-based line of the first line of `config(params)` containing `needle`.
fn line_of(params: &str, needle: &str) -> usize {
    config(params)
        .lines()
        .position(|l| l.contains(needle))
        .expect("needle present")
        + 1
}

#[test]
fn config_errors_name_the_field_and_line() {
    let p = "revisionGating:\n  mode: sum\n  bogus: 1";
    let e = load_error(p);
    let line = line_of(p, "bogus: 1");
    assert_eq!(e.line, Some(line));
    let text = e.to_string();
    assert!(
        text.starts_with(&format!(
            "epp.yaml: line {line}: plugin `rollout-screener` (type `disaggregatedset-rollout-screener`): \
             parameters.revisionGating: unknown field `bogus`"
        )),
        "{text}"
    );
    let p = "revisionGating:\n  mode: half";
    let e = load_error(p);
    assert_eq!(e.line, Some(line_of(p, "mode: half")));
    assert!(
        e.to_string()
            .contains("parameters.revisionGating.mode: unknown variant `half`"),
        "{e}"
    );
    let p = "scope:\n  labelSelector: \"a in (b\"";
    let e = load_error(p);
    assert_eq!(e.line, Some(line_of(p, "labelSelector")));
    assert!(
        e.to_string().ends_with(
            "parameters.scope.labelSelector: invalid label selector \"a in (b\": \
             expected `,` or `)` in `a in (…)`, found the end"
        ),
        "{e}"
    );
    let e = load_error("revisionGating:\n  requiredRoles: [prefill, gpu]");
    assert!(
        e.to_string()
            .contains("parameters.revisionGating.requiredRoles"),
        "{e}"
    );
    let e = load_error("revisionGating:\n  requiredRoles: []");
    assert!(
        e.to_string().ends_with(
            "parameters.revisionGating.requiredRoles: must name at least one role \
             (prefill, decode, encode)"
        ),
        "{e}"
    );
}

#[test]
fn effective_config_shows_defaults_and_loads_again() {
    let s = sched("revisionGating:\n  mode: sum\n  revisionHeaderName: X-Rev");
    let eff = s.effective_config_yaml();
    for want in [
        "type: disaggregatedset-rollout-screener",
        "labelSelector: ''",
        "mode: sum",
        "- prefill",
        "revisionHeaderName: x-rev",
        "revisionLabelKey: disaggregatedset.x-k8s.io/revision",
        "roleLabelKey: disaggregatedset.x-k8s.io/role",
    ] {
        assert!(eff.contains(want), "{want} missing from:\n{eff}");
    }
    let again = Scheduler::from_yaml(&eff, "effective").unwrap();
    assert_eq!(again.effective_config_yaml(), eff);
}
