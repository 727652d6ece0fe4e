//! The revision rollout (`pdgate_scenario::rollout`) run and judged for the end-to-end
//! tests: every check must pass, and the same facts are spelled out against the table.

use pdgate_scenario::rollout::{self, Discovery, RolloutConfig};
use std::time::{Duration, Instant};

/// Longest a rollout may take, start to end.
pub const LIMIT: Duration = Duration::from_secs(100);

/// Runs the default rollout with `discovery`, prints its table and asserts that every check
/// passed and that the table shows it: ≥ 2,000 requests; no revision mismatch (simulators
/// and headers); every non-2xx a 503 with a reason, only in the uncovered window; the
/// uncovered step (the 8th) fails closed; shares within ±5 points; every step applied within
/// 1 s; B serves everything in steps 9 and 10; all within [`LIMIT`].
pub async fn run_and_assert(discovery: Discovery) -> rollout::RolloutReport {
    let started = Instant::now();
    let cfg = RolloutConfig {
        discovery,
        ..RolloutConfig::default()
    };
    let report = rollout::run(&cfg).await.unwrap();
    println!("{}", report.render());
    println!(
        "rollout on {discovery:?} discovery: {:.1} s",
        started.elapsed().as_secs_f64()
    );

    let failed: Vec<String> = report
        .failed()
        .iter()
        .map(|c| format!("{}: {}", c.name, c.detail))
        .collect();
    assert!(failed.is_empty(), "failed checks:\n{}", failed.join("\n"));
    assert_eq!(report.checks.len(), 10, "every check ran");

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
    assert!(started.elapsed() < LIMIT, "took {:?}", started.elapsed());
    report
}
