//! Fleet bounds through the router (issue 26, item 2): an endpoints file of mostly dead
//! entries and two live engines. Endpoints whose `/metrics` goes unanswered leave the
//! scheduling candidates after `UNREADY_AFTER` scrapes, so requests stop going to them
//! (before: with 10,000 dead entries, every request failed with 502).

use crate::support;

use pdgate_scheduler::{Scheduler, DEFAULT_CONFIG_YAML};
use pdgate_server::{serve_on, EndpointSource, ServeOptions};
use std::sync::Arc;
use std::time::Duration;
use support::vllm::{complete, dead_address, VllmEngine};
use support::wait_until;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_entries_of_an_endpoints_file_stop_taking_requests() {
    let (a, b) = (
        VllmEngine::default().start().await,
        VllmEngine::default().start().await,
    );
    let dead = dead_address().await;
    let mut yaml = String::from("endpoints:\n");
    for (name, address) in [("live-a", &a), ("live-b", &b)] {
        yaml +=
            &format!("- name: {name}\n  address: {address}\n  labels: {{llm-d.ai/role: decode}}\n");
    }
    for i in 0..500 {
        yaml +=
            &format!("- name: dead-{i}\n  address: {dead}\n  labels: {{llm-d.ai/role: decode}}\n");
    }
    let dir = std::env::temp_dir().join(format!("pdgate-fleet-bounds-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("endpoints.yaml");
    std::fs::write(&file, yaml).unwrap();

    let s = Scheduler::from_yaml(DEFAULT_CONFIG_YAML, "default").unwrap();
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let mut opts = ServeOptions::new(
        Arc::new(s),
        EndpointSource::File {
            path: file.clone(),
            poll: Duration::from_millis(50),
        },
    );
    opts.scrape_interval = Duration::from_millis(30);
    let router = serve_on(l, opts).await.unwrap();
    let url = support::url(&router);
    let registry = router.state.registry.clone();
    let schedulable = |r: &pdgate_fleet::EndpointRegistry| -> Vec<String> {
        (r.snapshot().endpoints.iter())
            .filter(|e| e.endpoint.schedulable())
            .map(|e| e.endpoint.name.clone())
            .collect()
    };
    assert_eq!(schedulable(&registry).len(), 502);
    wait_until(Duration::from_secs(15), "dead entries out", || {
        schedulable(&registry) == ["live-a", "live-b"]
    })
    .await;
    assert_eq!(registry.counters().unready_total(), 500);

    let before = support::metrics(&url).await;
    let failures = |m: &str| {
        support::metric(
            m,
            "pdgate_upstream_failures_total{kind=\"connect_refused\",phase=\"aggregated\"}",
        )
    };
    for i in 0..40 {
        let (status, _) = complete(&url, &format!("request {i}"), &[]).await;
        assert_eq!(status, 200, "request {i}");
    }
    let after = support::metrics(&url).await;
    assert_eq!(
        failures(&after),
        failures(&before),
        "no request tried a dead entry"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
