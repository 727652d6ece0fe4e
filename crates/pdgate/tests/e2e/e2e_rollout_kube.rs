//! The revision rollout of `e2e_rollout` on Kubernetes discovery: both per-role routers
//! watch the set's `InferencePool` and its pods in the stand-in API server
//! (`pdgate_sim::kube_api`, the real list/watch protocol) through the real kube-rs watcher,
//! and each step becomes pod updates — `Ready` condition flips, `deletionTimestamp` set,
//! deletes. The 16 simulators are the pods: each on its own loopback address (127.0.0.2 …
//! 127.0.0.17, its `status.podIP`) and all on one port, the pool's target port. The same
//! steps and checks as the file variant (`support::rollout`).

use crate::support;

use pdgate_scenario::rollout::Discovery;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollout_on_kubernetes_discovery_passes_every_check() {
    let report = support::rollout::run_and_assert(Discovery::Kubernetes).await;
    assert_eq!(report.discovery, Discovery::Kubernetes);
    let names: Vec<&str> = report.checks.iter().map(|c| c.name.as_str()).collect();
    assert!(
        names.contains(&"both routers apply every step's pod updates within 1 s"),
        "{names:?}"
    );
}
