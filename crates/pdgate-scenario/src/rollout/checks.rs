//! The acceptance checks of a rollout (pure: no I/O).
//!
//! Attribution rule: a step request belongs to the step it was sent in (step traffic is sent
//! only after both routers hold the step's list, and finishes before the next step is
//! published). A trickle request belongs to the step during whose window — from the
//! publication of that step (its file written, or its first pod update sent) to that of the
//! next — its answer arrived. Below, "file" stands for either.
//!
//! A non-2xx is allowed only
//! - for a step request of an uncovered step (no covered revision: every request fails closed);
//! - for a trickle request in flight at some time during an uncovered window, which runs from
//!   the write of the uncovered step's file until both routers hold the next file (requests
//!   straddling a change into or out of the uncovered step);
//! - for a trickle request in flight while the two routers held different files across a
//!   change of the covered set (the routers poll the file, or watch the pods, independently:
//!   the decode router may already draw a newly covered revision that the prefill router
//!   does not cover yet, or still draw one the prefill router no longer covers), and only as
//!   the strict-revision 503 (`strict revision … is not covered`). That interval runs from
//!   the first moment either router held something new (a step of several pod updates
//!   passes through intermediate lists) until both hold the step's list. These are counted
//!   apart ("skew").
//!
//! Every non-2xx must be a 503 whose message names its reason (`… covered …`).

use super::plan::{max_role_shares, Counts, REVISIONS};
use super::report::{
    error_message, pct, Check, Observed, Outcome, Probes, RolloutReport, StepRow, StepTiming,
};
use std::collections::{BTreeMap, BTreeSet};

/// Slack around the measured router apply moments (the registries are polled every ms).
const SLACK_MS: f64 = 5.0;

/// Interval during which the two routers may hold different lists after `t`'s publication,
/// ms since the start, with slack: from the first change either router saw to the moment
/// both held the step's list.
fn skew_window(t: &StepTiming, end_ms: f64) -> (f64, f64) {
    let first = t
        .changed
        .iter()
        .chain(&t.applied)
        .flatten()
        .fold(end_ms, |a, b| a.min(*b));
    let last = match t.applied {
        [Some(p), Some(d)] => p.max(d),
        _ => end_ms,
    };
    (first.min(last) - SLACK_MS, last + SLACK_MS)
}

fn covered_set(c: &Counts) -> BTreeSet<String> {
    max_role_shares(&c.per_revision())
        .into_iter()
        .map(|(r, _)| r)
        .collect()
}

/// Builds the table and checks `obs` (`tolerance`: share tolerance as a fraction;
/// `min_requests`: fewest requests in total).
pub fn evaluate(mut obs: Observed, tolerance: f64, min_requests: usize) -> RolloutReport {
    let n = obs.steps.len();
    let discovery = obs.discovery;
    let writes: Vec<f64> = obs.timings.iter().map(|t| t.write_ms).collect();
    for o in obs.outcomes.iter_mut().filter(|o| o.trickle) {
        o.step = writes
            .iter()
            .rposition(|w| *w <= o.answered_ms)
            .unwrap_or(0);
    }
    // Uncovered windows: the uncovered step's write → both routers hold the next file.
    let mut uncovered = Vec::new();
    for (k, c) in obs.steps.iter().enumerate() {
        if c.expected_b_share().is_none() {
            let end = obs.timings.get(k + 1).map_or(obs.end_ms, |t| {
                t.apply_ms().map_or(obs.end_ms, |a| t.write_ms + a)
            });
            uncovered.push((writes[k], end + SLACK_MS));
        }
    }
    // Skew windows: changes of the covered set while the routers disagree.
    let skews: Vec<(f64, f64)> = (1..n)
        .filter(|&k| covered_set(&obs.steps[k - 1]) != covered_set(&obs.steps[k]))
        .map(|k| skew_window(&obs.timings[k], obs.end_ms))
        .collect();
    let overlaps = |o: &Outcome, w: &(f64, f64)| o.sent_ms <= w.1 && o.answered_ms >= w.0;

    let mut rows: Vec<StepRow> = obs
        .steps
        .iter()
        .zip(&obs.timings)
        .map(|(c, t)| StepRow {
            counts: *c,
            expected_b: c.expected_b_share(),
            apply_ms: t.apply_ms(),
            skew_ms: match t.applied {
                [Some(p), Some(d)] => Some((p - d).abs()),
                _ => None,
            },
            ..StepRow::default()
        })
        .collect();
    for (row, p) in rows.iter_mut().zip(&obs.probes) {
        row.probes = *p;
    }
    let mut errors = BTreeMap::new();
    let (mut bad_status, mut unexpected) = (Vec::new(), Vec::new());
    // Strict-revision 503s while the routers disagreed: all, and those outside the uncovered
    // window.
    let (mut strict_skew, mut skew_only) = (0usize, 0usize);
    let (mut split, mut aggregated, mut header_faults) = (0usize, 0usize, Vec::new());
    let mut b_ok = vec![(0usize, 0usize); n];
    for o in &obs.outcomes {
        let row = &mut rows[o.step];
        if o.trickle {
            row.trickle += 1;
        } else {
            row.requests += 1;
        }
        if o.ok {
            match o.pd_mode.as_deref() {
                Some("split") => split += 1,
                Some("aggregated") => aggregated += 1,
                _ => {}
            }
            let fine = o.decode_revision.is_some() && o.prefill_revision == o.decode_revision;
            if !fine {
                header_faults.push(format!(
                    "mode {:?}: prefill revision {:?}, decode revision {:?}",
                    o.pd_mode, o.prefill_revision, o.decode_revision
                ));
            }
            if !o.trickle {
                let s = &mut b_ok[o.step];
                s.1 += 1;
                s.0 += usize::from(o.decode_revision.as_deref() == Some(REVISIONS[1]));
            }
            continue;
        }
        *row.non_2xx.entry(o.status.clone()).or_default() += 1;
        let msg = error_message(o.error.as_deref().unwrap_or_default());
        *errors.entry(format!("{} {msg}", o.status)).or_default() += 1;
        if o.status != "503" || !msg.contains("covered") {
            bad_status.push(format!("{} {msg}", o.status));
        }
        let strict = msg.starts_with("strict revision");
        let in_skew = skews.iter().any(|w| overlaps(o, w));
        strict_skew += usize::from(strict && in_skew);
        let allowed = if o.trickle {
            if uncovered.iter().any(|w| overlaps(o, w)) {
                true
            } else {
                skew_only += usize::from(strict && in_skew);
                strict && in_skew
            }
        } else {
            obs.steps[o.step].expected_b_share().is_none()
        };
        if !allowed {
            unexpected.push(format!(
                "step {}{}: {} {msg} (sent {:.0} ms, answered {:.0} ms)",
                o.step + 1,
                if o.trickle { " (trickle)" } else { "" },
                o.status,
                o.sent_ms,
                o.answered_ms
            ));
        }
    }
    for (row, (b, ok)) in rows.iter_mut().zip(&b_ok) {
        row.measured_b = (*ok > 0).then(|| *b as f64 / *ok as f64);
    }
    for (k, row) in rows.iter_mut().enumerate().skip(1) {
        let w = writes[k];
        row.across = obs
            .outcomes
            .iter()
            .filter(|o| o.trickle && o.sent_ms < w && o.answered_ms > w)
            .count();
    }

    let step_requests = obs.outcomes.iter().filter(|o| !o.trickle).count();
    let trickle_requests = obs.outcomes.len() - step_requests;
    let total = obs.outcomes.len();
    let mut checks = Vec::new();
    let mut check = |name: String, passed: bool, detail: String| {
        checks.push(Check {
            name,
            passed,
            detail,
        })
    };
    check(
        format!("at least {min_requests} requests"),
        total >= min_requests,
        format!("{total} ({step_requests} step + {trickle_requests} trickle)"),
    );
    let mismatch = obs
        .handoff_rejections
        .get("revision_mismatch")
        .copied()
        .unwrap_or(0);
    check(
        "no KV handoff across revisions (simulators)".into(),
        mismatch == 0,
        format!(
            "handoff_rejections[revision_mismatch] summed over all workers = {mismatch}; all refusals: {:?}",
            obs.handoff_rejections
        ),
    );
    check(
        "prefill revision == decode revision on every 2xx (headers)".into(),
        header_faults.is_empty(),
        if header_faults.is_empty() {
            format!("{split} split and {aggregated} aggregated (served probe) responses")
        } else {
            format!(
                "{} faulty, e.g. {}",
                header_faults.len(),
                header_faults[..header_faults.len().min(3)].join("; ")
            )
        },
    );
    check(
        "every non-2xx is a 503 naming its reason".into(),
        bad_status.is_empty(),
        if bad_status.is_empty() {
            format!(
                "{} non-2xx, all 503 `… covered …`",
                errors.values().sum::<usize>()
            )
        } else {
            format!("{} others, e.g. {}", bad_status.len(), bad_status[0])
        },
    );
    check(
        "non-2xx only in the uncovered window".into(),
        unexpected.is_empty(),
        if unexpected.is_empty() {
            format!(
                "{strict_skew} of them strict-revision 503s while the routers held different \
                 {} ({skew_only} of those outside the uncovered window)",
                discovery.lists()
            )
        } else {
            format!(
                "{} outside it, e.g. {}",
                unexpected.len(),
                unexpected[..unexpected.len().min(3)].join("; ")
            )
        },
    );
    for (k, row) in rows.iter().enumerate() {
        if row.expected_b.is_none() {
            let step: Vec<&Outcome> = obs
                .outcomes
                .iter()
                .filter(|o| !o.trickle && o.step == k)
                .collect();
            let closed = step
                .iter()
                .filter(|o| {
                    o.status == "503"
                        && error_message(o.error.as_deref().unwrap_or_default())
                            .starts_with("no covered revision")
                })
                .count();
            check(
                format!("step {} (no covered revision) fails closed", k + 1),
                closed == step.len() && closed > 0,
                format!(
                    "{closed} of its {} step requests answered 503 \"no covered revision …\"",
                    step.len()
                ),
            );
        }
    }
    let pts = tolerance * 100.0;
    let mut share_faults = Vec::new();
    for (k, row) in rows.iter().enumerate() {
        if let Some(e) = row.expected_b {
            match row.measured_b {
                Some(m) if (m - e).abs() <= tolerance => {}
                m => share_faults.push(format!(
                    "step {}: expected {}, measured {}",
                    k + 1,
                    pct(e),
                    m.map_or("-".into(), pct)
                )),
            }
        }
    }
    check(
        format!("measured B share within ±{pts:.0} points of max-role in every covered step"),
        share_faults.is_empty(),
        if share_faults.is_empty() {
            let worst = rows
                .iter()
                .filter_map(|r| Some((r.measured_b? - r.expected_b?).abs()))
                .fold(0.0, f64::max);
            format!("largest gap {:.1} points", worst * 100.0)
        } else {
            share_faults.join("; ")
        },
    );
    let slow: Vec<String> = rows
        .iter()
        .enumerate()
        .filter(|(_, r)| r.apply_ms.is_none())
        .map(|(k, _)| format!("step {}", k + 1))
        .collect();
    let worst_apply = rows.iter().filter_map(|r| r.apply_ms).fold(0.0, f64::max);
    check(
        format!(
            "both routers apply every {} within 1 s",
            discovery.step_change()
        ),
        slow.is_empty(),
        if slow.is_empty() {
            format!("slowest {worst_apply:.0} ms")
        } else {
            format!("not applied in time: {}", slow.join(", "))
        },
    );
    let across: usize = rows.iter().map(|r| r.across).sum();
    check(
        format!("trickle requests in flight across {}", discovery.changes()),
        across > 0,
        format!("{across} trickle requests spanned a change; failures among them are judged above"),
    );
    let probes = rows.iter().fold(Probes::default(), |a, r| Probes {
        served: a.served + r.probes.served,
        deferred: a.deferred + r.probes.deferred,
        error: a.error + r.probes.error,
    });
    check(
        "conditional decode both served and deferred".into(),
        probes.served > 0 && probes.deferred > 0,
        format!(
            "{} served, {} deferred, {} error",
            probes.served, probes.deferred, probes.error
        ),
    );
    RolloutReport {
        discovery,
        rows,
        checks,
        step_requests,
        trickle_requests,
        errors,
        handoff_rejections: obs.handoff_rejections,
        duration_s: obs.end_ms / 1_000.0,
    }
}

#[cfg(test)]
#[path = "checks_tests.rs"]
mod tests;
