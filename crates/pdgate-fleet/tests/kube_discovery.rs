//! Kubernetes discovery against the stand-in API server (`pdgate_sim::kube_api`, the real
//! list/watch protocol) with the real kube-rs client: every change a rollout makes to pods and
//! pools reaches the endpoint list within 1 s.

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use pdgate_fleet::kube::pool::GROUP_V1;
use pdgate_fleet::kube::{KubeWatcher, Target};
use pdgate_fleet::source::EndpointWatcher;
use pdgate_scheduler::Endpoint;
use pdgate_sim::kube_api::KubeApi;
use serde_json::json;
use std::time::{Duration, Instant};

const NS: &str = "serving";

fn pod(name: &str, ip: &str, ready: bool, labels: &[(&str, &str)]) -> Pod {
    pdgate_sim::kube_api::pod(NS, name, ip, ready, labels)
}

fn pool(app: &str, ports: &[u16]) -> serde_json::Value {
    let ports: Vec<_> = ports.iter().map(|p| json!({ "number": p })).collect();
    json!({"metadata": {"name": "llm", "namespace": NS},
           "spec": {"selector": {"matchLabels": {"app": app}}, "targetPorts": ports,
                    "endpointPickerRef": {"name": "epp", "port": {"number": 9002}}}})
}

/// The next list, within 1 s of the change that caused it.
async fn next_list(w: &mut KubeWatcher) -> Vec<Endpoint> {
    let started = Instant::now();
    let next = tokio::time::timeout(Duration::from_secs(1), w.next())
        .await
        .unwrap_or_else(|_| panic!("no endpoint list within 1 s"));
    let list = next.expect("the watch goes on").expect("a usable list");
    assert!(started.elapsed() < Duration::from_secs(1));
    list
}

fn view(eps: &[Endpoint]) -> Vec<(String, String, bool, bool)> {
    eps.iter()
        .map(|e| (e.name.clone(), e.address.clone(), e.ready, e.terminating))
        .collect()
}

fn row(name: &str, address: &str, ready: bool, terminating: bool) -> (String, String, bool, bool) {
    (name.into(), address.into(), ready, terminating)
}

async fn client(api: &KubeApi) -> kube::Client {
    let config = kube::Config::new(api.url().parse().unwrap());
    kube::Client::try_from(config).unwrap()
}

#[tokio::test]
async fn a_pool_and_its_pods_follow_every_change_within_a_second() {
    let api = KubeApi::start().await.unwrap();
    api.apply_pool(GROUP_V1, "v1", pool("vllm", &[8000]));
    let prefill = [("app", "vllm"), ("llm-d.ai/role", "prefill")];
    let decode = [("app", "vllm"), ("llm-d.ai/role", "decode")];
    api.apply_pod(&pod("p-0", "10.0.0.1", true, &prefill));
    api.apply_pod(&pod("d-0", "10.0.0.2", true, &decode));
    api.apply_pod(&pod("other", "10.0.0.9", true, &[("app", "other")]));
    let target = Target::Pool {
        name: "llm".into(),
        namespace: NS.into(),
        group: GROUP_V1.into(),
    };
    let mut w = KubeWatcher::new(client(&api).await, target).unwrap();

    // The first list: the pool's pods only.
    let eps = next_list(&mut w).await;
    assert_eq!(
        view(&eps),
        [
            row("d-0", "10.0.0.2:8000", true, false),
            row("p-0", "10.0.0.1:8000", true, false)
        ]
    );
    assert_eq!(eps[0].labels["llm-d.ai/role"], "decode");

    // Added, then Ready flips.
    api.apply_pod(&pod("d-1", "10.0.0.3", false, &decode));
    assert_eq!(
        view(&next_list(&mut w).await)[1],
        row("d-1", "10.0.0.3:8000", false, false)
    );
    api.apply_pod(&pod("d-1", "10.0.0.3", true, &decode));
    assert_eq!(
        view(&next_list(&mut w).await)[1],
        row("d-1", "10.0.0.3:8000", true, false)
    );

    // deletionTimestamp: out of rotation at once, still listed as terminating; then deleted.
    let mut going = pod("p-0", "10.0.0.1", true, &prefill);
    going.metadata.deletion_timestamp = Some(Time(Default::default()));
    api.apply_pod(&going);
    assert_eq!(
        view(&next_list(&mut w).await)[2],
        row("p-0", "10.0.0.1:8000", false, true)
    );
    api.delete_pod(NS, "p-0");
    assert_eq!(view(&next_list(&mut w).await).len(), 2);

    // The pod IP changes (the pod was recreated under the same name).
    api.apply_pod(&pod("d-0", "10.0.0.7", true, &decode));
    assert_eq!(
        view(&next_list(&mut w).await)[0],
        row("d-0", "10.0.0.7:8000", true, false)
    );

    // A DELETE missed while the watch was down: the resumed watch gets 410, lists again, and
    // the pod is gone (no ghost).
    let lists = api.lists();
    api.delete_pod_while_disconnected(NS, "d-1");
    assert_eq!(
        view(&next_list(&mut w).await),
        [row("d-0", "10.0.0.7:8000", true, false)]
    );
    assert!(api.lists() > lists, "the watcher listed again after 410");

    // The pool's selector changes: its pods are the other ones now.
    api.apply_pool(GROUP_V1, "v1", pool("other", &[8000]));
    assert_eq!(
        view(&next_list(&mut w).await),
        [row("other", "10.0.0.9:8000", true, false)]
    );

    // Two target ports: two data-parallel rank endpoints per pod.
    api.apply_pool(GROUP_V1, "v1", pool("other", &[8000, 8001]));
    let eps = next_list(&mut w).await;
    assert_eq!(
        view(&eps),
        [
            row("other-rank-0", "10.0.0.9:8000", true, false),
            row("other-rank-1", "10.0.0.9:8001", true, false)
        ]
    );
    assert_eq!((eps[0].dp_rank, eps[1].dp_rank), (Some(0), Some(1)));

    // The pool is deleted: no endpoints.
    api.delete_pool(GROUP_V1, "v1", NS, "llm");
    assert!(next_list(&mut w).await.is_empty());
}

#[tokio::test]
async fn a_bad_pool_is_an_error_naming_the_field_and_a_selector_needs_no_pool() {
    let api = KubeApi::start().await.unwrap();
    api.apply_pool(GROUP_V1, "v1", pool("vllm", &[]));
    let target = Target::Pool {
        name: "llm".into(),
        namespace: NS.into(),
        group: GROUP_V1.into(),
    };
    let mut w = KubeWatcher::new(client(&api).await, target).unwrap();
    let err = tokio::time::timeout(Duration::from_secs(5), w.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap_err();
    assert_eq!(err.source_name, "serving/llm");
    assert!(err.message.starts_with("spec.targetPorts"), "{err}");

    api.apply_pod(&pod("a", "10.0.0.1", true, &[("app", "vllm")]));
    api.apply_pod(&pod("b", "10.0.0.2", true, &[("app", "other")]));
    let target = Target::Selector {
        namespace: NS.into(),
        selector: "app=vllm".into(),
        ports: vec![9000],
    };
    let mut w = KubeWatcher::new(client(&api).await, target).unwrap();
    assert_eq!(
        view(&next_list(&mut w).await),
        [row("a", "10.0.0.1:9000", true, false)]
    );
    // A pod whose labels stop matching leaves (the watch sends DELETED).
    api.apply_pod(&pod("a", "10.0.0.1", true, &[("app", "gone")]));
    assert!(next_list(&mut w).await.is_empty());
}
