//! `disaggregatedset-rollout-screener` through `Scheduler::schedule`: weighted draws over
//! covered revisions, strict revision headers, shared draws by decision id (design.md §5.1).

mod rollout_fleet;

use pdgate_scheduler::{Rejection, Scheduler, Snapshot};
use rollout_fleet::{fleet, prompt, request, rev, sched, snap, REV};

const N: usize = 20_000;

/// Share of `N` requests (no headers) whose decode pick is of revision `want`; every
/// split request's prefill pick is of the same revision as its decode pick.
fn measured_share(s: &Scheduler, snapshot: &Snapshot, want: &str) -> f64 {
    let p = prompt();
    let mut hits = 0;
    for _ in 0..N {
        let r = s.schedule(&request(&p, &[], false), snapshot).unwrap();
        let d = rev(&r.decode);
        if let Some(pre) = &r.prefill {
            assert_eq!(rev(pre), d, "prefill and decode of one request differ");
        }
        hits += usize::from(d == want);
    }
    hits as f64 / N as f64
}

fn assert_near(label: &str, got: f64, want: f64) {
    println!(
        "{label}: measured {:.2}% (expected {:.2}%)",
        got * 100.0,
        want * 100.0
    );
    assert!(
        (got - want).abs() <= 0.015,
        "{label}: {got} not within 1.5 points of {want}"
    );
}

#[test]
fn max_role_draw_sends_90_percent_to_a() {
    let eps = fleet(&[("a", 2, 9), ("b", 1, 1)]);
    let share = measured_share(&sched(""), &snap(&eps, 1), "a");
    assert_near("max-role A{P2,D9}/B{P1,D1}: a", share, 0.9);
    assert!(eps.iter().all(|e| e.load.in_flight() == 0));
}

#[test]
fn sum_draw_sends_84_6_percent_to_a() {
    let eps = fleet(&[("a", 2, 9), ("b", 1, 1)]);
    let s = sched("revisionGating:\n  mode: sum");
    let share = measured_share(&s, &snap(&eps, 1), "a");
    assert_near("sum A{P2,D9}/B{P1,D1}: a", share, 11.0 / 13.0);
}

#[test]
fn six_decodes_against_four_send_40_percent_to_b() {
    let eps = fleet(&[("a", 1, 6), ("b", 1, 4)]);
    let share = measured_share(&sched(""), &snap(&eps, 1), "b");
    assert_near("max-role A{P1,D6}/B{P1,D4}: b", share, 0.4);
}

#[test]
fn a_revision_missing_a_required_role_is_never_chosen() {
    // B has nine decodes but no prefill: not covered.
    let eps = fleet(&[("a", 1, 1), ("b", 0, 9)]);
    let snapshot = snap(&eps, 1);
    let s = sched("");
    let p = prompt();
    let b = (0..5_000)
        .filter(|_| {
            rev(&s
                .schedule(&request(&p, &[], false), &snapshot)
                .unwrap()
                .decode)
                == "b"
        })
        .count();
    assert_eq!(b, 0);
}

#[test]
fn strict_header_to_an_uncovered_revision_is_503_with_the_reason() {
    let eps = fleet(&[("a", 1, 1), ("b", 0, 9)]);
    let snapshot = snap(&eps, 1);
    let s = sched("");
    let p = prompt();
    for value in ["b", "c", " c "] {
        let e = s
            .schedule(&request(&p, &[(REV, value)], false), &snapshot)
            .unwrap_err();
        let name = value.trim();
        assert_eq!(
            e.reason,
            Rejection::Screened {
                reason: format!(
                    "strict revision `{name}` (header x-llm-d-disagg-revision) is not covered"
                )
            }
        );
        assert!(
            e.headers.is_empty(),
            "a screened rejection carries no hook headers"
        );
    }
    assert!(eps.iter().all(|e| e.load.in_flight() == 0));
}

#[test]
fn strict_header_to_a_covered_revision_always_gets_it() {
    // B is the 10% revision; the header overrides the draw, names compared case-insensitively
    // and the value trimmed.
    let eps = fleet(&[("a", 2, 9), ("b", 1, 1)]);
    let snapshot = snap(&eps, 1);
    let s = sched("");
    let p = prompt();
    for h in [[(REV, "b")], [("X-LLM-D-Disagg-Revision", " b ")]] {
        for _ in 0..1_000 {
            let r = s.schedule(&request(&p, &h, false), &snapshot).unwrap();
            assert_eq!(rev(&r.decode), "b");
            assert_eq!(r.prefill.as_ref().map(rev).as_deref(), Some("b"));
        }
    }
}

#[test]
fn no_covered_revision_is_503() {
    let eps = fleet(&[("a", 0, 3), ("b", 0, 2)]);
    let e = sched("")
        .schedule(&request(&prompt(), &[], false), &snap(&eps, 1))
        .unwrap_err();
    assert_eq!(
        e.reason,
        Rejection::Screened {
            reason: "no covered revision (required roles prefill, decode)".into()
        }
    );
    assert!(e.headers.is_empty());
}

#[test]
fn a_decision_id_shares_one_draw_and_different_ids_spread() {
    const ID: &str = "x-llm-d-revision-decision-id";
    let eps = fleet(&[("a", 1, 1), ("b", 1, 1)]);
    let snapshot = snap(&eps, 1);
    let s = sched("");
    let p = prompt();
    let pick = |id: &str| {
        let r = s
            .schedule(&request(&p, &[(ID, id)], false), &snapshot)
            .unwrap();
        rev(&r.decode)
    };
    let first = pick("fan-out-1");
    assert!((0..199).all(|_| pick("fan-out-1") == first));
    let a = (0..400).filter(|i| pick(&format!("id-{i}")) == "a").count();
    println!("400 distinct decision ids at 50/50: {a} to a");
    assert!((120..=280).contains(&a), "{a} of 400");
    // The remembered revision stops being covered (its prefill leaves): a new draw, then
    // remembered again.
    let other = if first == "a" { "b" } else { "a" };
    let rest: Vec<_> = eps
        .iter()
        .filter(|e| {
            !(e.endpoint.revision() == Some(first.as_str()) && e.endpoint.name.contains("prefill"))
        })
        .cloned()
        .collect();
    let snapshot = snap(&rest, 2);
    for _ in 0..20 {
        let r = s
            .schedule(&request(&p, &[(ID, "fan-out-1")], false), &snapshot)
            .unwrap();
        assert_eq!(rev(&r.decode), other);
    }
}

#[test]
fn a_chosen_revision_without_an_endpoint_for_the_model_fails_closed() {
    let eps = fleet(&[("a", 1, 1), ("b", 1, 1)]);
    for e in eps.iter().filter(|e| e.endpoint.revision() == Some("a")) {
        e.load.set_models(vec!["other-model".into()]);
    }
    let snapshot = snap(&eps, 1);
    let s = sched("");
    let p = prompt();
    let e = s
        .schedule(&request(&p, &[(REV, "a")], false), &snapshot)
        .unwrap_err();
    assert_eq!(
        e.reason,
        Rejection::Screened {
            reason: "revision `a` has no schedulable endpoint serving model `m`".into()
        }
    );
    // Drawn requests: `a` is still covered (its pods are Ready), so about half fail closed
    // rather than move to `b`.
    let failed = (0..400)
        .filter(|_| s.schedule(&request(&p, &[], false), &snapshot).is_err())
        .count();
    assert!((120..=280).contains(&failed), "{failed} of 400");
}
