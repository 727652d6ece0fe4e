//! A revision rollout end to end, in layout (b): a coordinator (conditional decode on) in
//! front of a prefill router and a decode router — both pdgate routers with the
//! `disaggregatedset-rollout-screener` (max-role), both reading one endpoints file that the
//! scenario rewrites at each step — in front of 16 simulators (revisions a and b, 2 prefill +
//! 6 decode each); all in-process on 127.0.0.1:0. The scenario lives in
//! `pdgate_scenario::rollout` (shared with `pdgate demo --rollout`); see `rollout::report` for how
//! requests are attributed to steps.

use pdgate_scenario::rollout::{self, RolloutConfig};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollout_keeps_both_phases_on_one_revision_and_follows_max_role_shares() {
    let started = std::time::Instant::now();
    let cfg = RolloutConfig::default();
    let report = rollout::run(&cfg).await.unwrap();
    println!("{}", report.render());
    println!("e2e_rollout: {:.1} s", started.elapsed().as_secs_f64());

    // Every check, named: ≥ 2,000 requests; no revision mismatch (simulators and headers);
    // every non-2xx a 503 with a reason, only in the uncovered window; the uncovered step
    // fails closed; shares within ±5 points; files applied within 1 s; in-flight requests
    // across changes; conditional decode served and deferred.
    let failed: Vec<String> = report
        .failed()
        .iter()
        .map(|c| format!("{}: {}", c.name, c.detail))
        .collect();
    assert!(failed.is_empty(), "failed checks:\n{}", failed.join("\n"));

    // The same facts, spelled out against the table.
    assert!(report.step_requests + report.trickle_requests >= 2_000);
    assert_eq!(
        report
            .handoff_rejections
            .get("revision_mismatch")
            .copied()
            .unwrap_or(0),
        0
    );
    let uncovered: Vec<usize> = report
        .rows
        .iter()
        .enumerate()
        .filter(|(_, r)| r.expected_b.is_none())
        .map(|(k, _)| k)
        .collect();
    assert_eq!(uncovered, [7], "exactly one uncovered step, the 8th");
    let step8 = &report.rows[7];
    assert!(step8.requests >= 250 && step8.measured_b.is_none());
    assert!(step8.non_2xx.get("503").copied().unwrap_or(0) >= step8.requests);
    assert_eq!(step8.non_2xx.len(), 1, "{:?}", step8.non_2xx);
    for (k, r) in report.rows.iter().enumerate() {
        if let (Some(e), Some(m)) = (r.expected_b, r.measured_b) {
            assert!(
                (m - e).abs() <= 0.05,
                "step {}: expected {e:.3}, measured {m:.3}",
                k + 1
            );
        }
        assert!(
            r.apply_ms.is_some_and(|ms| ms <= 1_000.0),
            "step {}: {:?}",
            k + 1,
            r.apply_ms
        );
    }
    // Steps 9 and 10: A is uncovered (no prefill) though one of its decode pods is Ready in
    // step 9: B serves everything.
    assert_eq!(report.rows[8].measured_b, Some(1.0));
    assert_eq!(report.rows[9].measured_b, Some(1.0));
    assert!(
        started.elapsed() < std::time::Duration::from_secs(100),
        "took {:?}",
        started.elapsed()
    );
}
