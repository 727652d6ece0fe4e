//! Equal-score bursts spread (issue 3 item 5): 64 simultaneous identical requests over 8
//! equally good decode endpoints, through the real router with the built-in default config
//! (kv-cost-scorer: prefix and booked tokens in one cost). llm-d piles such a burst onto one
//! endpoint: in-flight counted too late, the prefix recorded at pick time, ties shuffled
//! without regard to load.

use futures_util::future::join_all;
use pdgate_scenario::fleet::{self, FleetSpec};
use pdgate_scheduler::DEFAULT_CONFIG_YAML;
use serde_json::json;
use std::collections::BTreeMap;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixty_four_identical_requests_spread_over_eight_endpoints() {
    // Speedup 1: each request decodes 64 tokens (≥ 64 × 5.7 ms), so the whole burst is in
    // flight together.
    let f = fleet::start(&FleetSpec::new(0, 8, 1.0), DEFAULT_CONFIG_YAML)
        .await
        .unwrap();
    let client = reqwest::Client::new();
    let body = json!({
        "model": "pdgate-sim",
        "prompt": (0..2048).collect::<Vec<u32>>(),
        "max_tokens": 64,
        "min_tokens": 64,
    });
    let sends = (0..64).map(|_| async {
        let r = client
            .post(format!("{}/v1/completions", f.url()))
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        r.headers()["x-pdgate-decode-endpoint"]
            .to_str()
            .unwrap()
            .to_string()
    });
    let mut spread: BTreeMap<String, usize> = BTreeMap::new();
    for endpoint in join_all(sends).await {
        *spread.entry(endpoint).or_default() += 1;
    }
    println!("burst spread over decode endpoints: {spread:?}");
    assert_eq!(spread.values().sum::<usize>(), 64);
    assert_eq!(
        spread.len(),
        8,
        "every endpoint gets part of the burst: {spread:?}"
    );
    assert!(
        spread.values().all(|n| (4..=12).contains(n)),
        "each endpoint within 8 ± 4: {spread:?}"
    );
    assert_eq!(f.in_flight(), 0);
}
