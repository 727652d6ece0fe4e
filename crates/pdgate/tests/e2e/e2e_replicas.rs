//! Two router replicas over one simulated fleet, each with its own state and no link between
//! them, behind a client that alternates between them (`pdgate bench --url A --url B`): both
//! are ready, both serve, and each counts exactly its half of the requests.
//! (The cost of the split prefix view is measured by `tools/replicas.sh`, not here.)

use crate::support;

use pdgate_bench::{load_mooncake, mooncake_work, replay, ReplayConfig};
use pdgate_scheduler::DEFAULT_CONFIG_YAML;
use std::time::Duration;
use support::{endpoints, health_becomes, metric, metrics, router, sim_config, spec, url};

const REQUESTS: usize = 20;

#[tokio::test]
async fn two_replicas_over_one_fleet_both_serve_their_half() {
    let workers = support::sim_workers(
        vec![
            spec("prefill-0", "prefill", None),
            spec("decode-0", "decode", None),
            spec("decode-1", "decode", None),
        ],
        sim_config(200.0),
    )
    .await;
    let a = router(endpoints(&workers), DEFAULT_CONFIG_YAML).await;
    let b = router(endpoints(&workers), DEFAULT_CONFIG_YAML).await;
    let (url_a, url_b) = (url(&a), url(&b));
    for u in [&url_a, &url_b] {
        let h = health_becomes(u, 200, Duration::from_secs(5)).await;
        assert_eq!(h["serving"], 3, "{u}: {h}");
    }
    pdgate_scenario::fleet::wait_for_models(&a).await;
    pdgate_scenario::fleet::wait_for_models(&b).await;

    let records = load_mooncake(&support::conversation_trace(), Some(REQUESTS)).unwrap();
    let cfg = ReplayConfig {
        urls: vec![url_a.clone(), url_b.clone()],
        speedup: 0.0,
        concurrency: 4,
        max_output_tokens: Some(8),
        ..ReplayConfig::new("", pdgate_sim::config::DEFAULT_MODEL)
    };
    let report = replay(&cfg, mooncake_work(&records, 512)).await.unwrap();
    assert_eq!(
        (report.requests, report.ok),
        (REQUESTS as u64, REQUESTS as u64),
        "errors: {:?}",
        report.errors
    );
    let half = REQUESTS as u64 / 2;
    assert_eq!(
        report.requests_by_url,
        [(url_a.clone(), half), (url_b.clone(), half)].into()
    );
    // Each replica counted its own half, and only that: nothing is shared between them.
    for u in [&url_a, &url_b] {
        let text = metrics(u).await;
        let served = metric(
            &text,
            "pdgate_requests_total{api=\"completions\",status=\"200\"}",
        );
        assert_eq!(served, half, "{u}");
    }
    // Every booking of either replica was released.
    support::wait_until(Duration::from_secs(2), "bookings released", || {
        a.state.in_flight_total() == 0 && b.state.in_flight_total() == 0
    })
    .await;
}
