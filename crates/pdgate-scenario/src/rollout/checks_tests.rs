//! Unit tests of the rollout checks.
use super::*;
use crate::rollout::plan::counts;
use crate::rollout::publish::Discovery;

fn ok(step: usize, rev: &str) -> Outcome {
    Outcome {
        step,
        ok: true,
        status: "200".into(),
        prefill_revision: Some(rev.into()),
        decode_revision: Some(rev.into()),
        pd_mode: Some("split".into()),
        ..Outcome::default()
    }
}

fn failed(step: usize, trickle: bool, at: (f64, f64), msg: &str) -> Outcome {
    Outcome {
        step,
        trickle,
        sent_ms: at.0,
        answered_ms: at.1,
        status: "503".into(),
        error: Some(format!(
            "{{\"error\":{{\"message\":\"{msg}\",\"code\":503}}}}"
        )),
        ..Outcome::default()
    }
}

/// Steps: A only; A 6/7 + B 1/7; nothing covered; B only. Writes at 0, 100, 200, 300;
/// each applied by the prefill router 10 ms and the decode router 12 ms after.
fn observed(outcomes: Vec<Outcome>) -> Observed {
    Observed {
        discovery: Discovery::File,
        steps: vec![
            counts(2, 6, 0, 0),
            counts(2, 6, 1, 1),
            counts(0, 0, 0, 6),
            counts(0, 0, 2, 6),
        ],
        timings: (0..4)
            .map(|k| {
                let w = k as f64 * 100.0;
                StepTiming {
                    write_ms: w,
                    changed: [Some(w + 10.0), Some(w + 12.0)],
                    applied: [Some(w + 10.0), Some(w + 12.0)],
                }
            })
            .collect(),
        probes: vec![Probes::default(); 4],
        outcomes,
        handoff_rejections: BTreeMap::new(),
        end_ms: 400.0,
    }
}

fn good() -> Vec<Outcome> {
    let mut v: Vec<Outcome> = (0..10).map(|_| ok(0, "a")).collect();
    v.extend((0..6).map(|_| ok(1, "a")));
    v.push(ok(1, "b"));
    v.extend((0..3).map(|_| {
        failed(
            2,
            false,
            (250.0, 260.0),
            "no covered revision (required roles prefill, decode)",
        )
    }));
    v.extend((0..5).map(|_| ok(3, "b")));
    // Trickle: in flight across the change into step 2, answered in step 3's window.
    v.push(Outcome {
        trickle: true,
        sent_ms: 150.0,
        answered_ms: 205.0,
        ..ok(0, "a")
    });
    // Straddles out of the uncovered window (answered after step 4's write, before both
    // routers held it).
    v.push(failed(
        0,
        true,
        (299.0, 305.0),
        "strict revision `b` (header x-llm-d-disagg-revision) is not covered",
    ));
    v
}

#[test]
fn a_clean_run_passes_and_attributes_trickle_by_answer_time() {
    let mut obs = observed(good());
    obs.probes[1] = Probes {
        served: 2,
        deferred: 5,
        error: 0,
    };
    let r = evaluate(obs, 0.05, 20);
    assert!(r.passed(), "{}", r.render());
    assert_eq!(r.rows[2].trickle, 1);
    assert_eq!(r.rows[2].across, 1);
    assert_eq!(r.rows[3].non_2xx["503"], 1);
    assert_eq!(r.rows[1].measured_b, Some(1.0 / 7.0));
    assert_eq!(r.rows[2].expected_b, None);
    assert_eq!(r.rows[1].apply_ms, Some(12.0));
    let table = r.render();
    assert!(
        table.contains("\n   3*    0/0    0/6   uncovered"),
        "{table}"
    );
}

#[test]
fn each_fault_fails_its_check() {
    let failing = |mutate: &dyn Fn(&mut Observed)| {
        let mut obs = observed(good());
        obs.probes[1].served = 1;
        obs.probes[1].deferred = 1;
        mutate(&mut obs);
        let r = evaluate(obs, 0.05, 20);
        r.failed()
            .iter()
            .map(|c| c.name.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        failing(&|o| {
            o.handoff_rejections.insert("revision_mismatch".into(), 1);
        }),
        ["no KV handoff across revisions (simulators)"]
    );
    assert_eq!(
        failing(&|o| o.outcomes[0].prefill_revision = Some("b".into())),
        ["prefill revision == decode revision on every 2xx (headers)"]
    );
    // A 503 in a covered step (step request), and a trickle 503 outside every window.
    assert_eq!(
        failing(&|o| o.outcomes[1] = failed(0, false, (1.0, 2.0), "no covered revision")),
        ["non-2xx only in the uncovered window"]
    );
    assert_eq!(
        failing(&|o| o.outcomes.push(failed(
            0,
            true,
            (40.0, 50.0),
            "strict revision `b` is not covered"
        ))),
        ["non-2xx only in the uncovered window"]
    );
    // During the skew of the change into step 2 (B newly covered): allowed as strict miss.
    let skew = failing(&|o| {
        o.outcomes.push(failed(
            0,
            true,
            (110.0, 111.0),
            "strict revision `b` is not covered",
        ))
    });
    assert!(skew.is_empty(), "{skew:?}");
    assert_eq!(
        failing(&|o| o.outcomes[17].status = "502".into()),
        [
            "every non-2xx is a 503 naming its reason",
            "step 3 (no covered revision) fails closed"
        ]
    );
    assert_eq!(
        failing(&|o| {
            for x in o
                .outcomes
                .iter_mut()
                .filter(|x| x.step == 0 && !x.trickle)
                .take(2)
            {
                x.decode_revision = Some("b".into());
                x.prefill_revision = Some("b".into());
            }
        }),
        ["measured B share within ±5 points of max-role in every covered step"]
    );
    assert_eq!(
        failing(&|o| o.timings[1].applied[1] = None),
        ["both routers apply every file within 1 s"]
    );
    assert_eq!(
        failing(&|o| o.outcomes.truncate(5)),
        [
            "at least 20 requests",
            "step 3 (no covered revision) fails closed",
            "measured B share within ±5 points of max-role in every covered step",
            "trickle requests in flight across file changes"
        ]
    );
}

#[test]
fn pod_updates_open_the_skew_window_at_the_first_change() {
    // Step 2 (B newly covered) arrives as several pod updates: the routers first hold an
    // intermediate list 3 and 5 ms after the first update, the step's own list 40 and 42 ms
    // after. A strict miss in between is skew; with no earlier change seen it is not.
    let strict = failed(
        0,
        true,
        (115.0, 116.0),
        "strict revision `b` is not covered",
    );
    let judge = |changed: [Option<f64>; 2]| {
        let mut obs = observed(good());
        obs.discovery = Discovery::Kubernetes;
        obs.probes[1].served = 1;
        obs.probes[1].deferred = 1;
        obs.timings[1] = StepTiming {
            write_ms: 100.0,
            changed,
            applied: [Some(140.0), Some(142.0)],
        };
        obs.outcomes.push(strict.clone());
        evaluate(obs, 0.05, 20)
    };
    let r = judge([Some(103.0), Some(105.0)]);
    assert!(r.passed(), "{}", r.render());
    assert!(r.render().contains("first pod update -> both routers hold"));
    let names: Vec<String> = r.checks.iter().map(|c| c.name.clone()).collect();
    assert!(names.contains(&"both routers apply every step's pod updates within 1 s".into()));
    assert!(names.contains(&"trickle requests in flight across pod updates".into()));
    let r = judge([Some(140.0), Some(142.0)]);
    let failed: Vec<&str> = r.failed().iter().map(|c| c.name.as_str()).collect();
    assert_eq!(failed, ["non-2xx only in the uncovered window"]);
}
