//! `pdgate serve --pool-name` on Kubernetes discovery, end to end: the real binary finds
//! the stand-in API server through a kubeconfig (kube-rs, the real list/watch protocol),
//! comes up not ready until the pool's pods are listed, routes to simulator workers that are
//! the pool's pods, and follows a Ready flip; a request in flight survives the pod changing.

use crate::support;

use pdgate_sim::kube_api::{pod, KubeApi};
use serde_json::json;
use std::time::Duration;
use support::kube::serve;
use support::{body, health, health_becomes, send, sim_config, sim_workers, spec};

const NS: &str = "serving";
const GROUP: &str = "inference.networking.k8s.io";

async fn in_flight(url: &str, endpoint: &str) -> u64 {
    let m = support::metrics(url).await;
    support::metric(&m, &format!("pdgate_in_flight{{endpoint=\"{endpoint}\"}}"))
}

#[tokio::test]
async fn serve_discovers_a_pool_waits_for_its_pods_and_follows_them() {
    let api = KubeApi::start().await.unwrap();
    // One pod with two data-parallel ranks: each rank is a simulator worker on its own port.
    let workers = sim_workers(
        vec![spec("r0", "decode", None), spec("r1", "decode", None)],
        sim_config(1.0),
    )
    .await;
    let ports: Vec<_> = workers.iter().map(|w| w.addr().port()).collect();
    let served = serve(&api, NS, &["--pool-name", "llm", "--pool-namespace", NS]);
    let url = served.url.clone();

    // No pool yet: up (live) but not ready.
    let (status, h) = health(&url).await;
    assert_eq!(status, 503, "{h}");
    assert_eq!(h["reason"], "no endpoints known");
    assert_eq!(
        reqwest::get(format!("{url}/live")).await.unwrap().status(),
        200
    );

    api.apply_pool(
        GROUP,
        "v1",
        json!({"metadata": {"name": "llm", "namespace": NS},
        "spec": {"selector": {"matchLabels": {"app": "vllm"}},
                 "targetPorts": [{"number": ports[0]}, {"number": ports[1]}],
                 "endpointPickerRef": {"name": "epp", "port": {"number": 9002}}}}),
    );
    let labels = [("app", "vllm"), ("llm-d.ai/role", "decode")];
    api.apply_pod(&pod(NS, "vllm-0", "127.0.0.1", true, &labels));
    // Ready within 5 s of the pool's pods.
    health_becomes(&url, 200, Duration::from_secs(5)).await;
    assert_eq!(health(&url).await.1["endpoints"], 2);

    // Requests reach the pod's ranks: the simulators count them.
    let mut names = std::collections::BTreeSet::new();
    for i in 0..6 {
        let r = send(&url, &[], &body(i * 1000, 64, 2)).await;
        assert_eq!(r.status, 200, "{:?}", r.body);
        names.insert(r.header("x-pdgate-decode-endpoint"));
    }
    let served_by_engines: u64 = workers.iter().map(|w| w.stats().completions).sum();
    assert_eq!(served_by_engines, 6);
    assert!(
        names
            .iter()
            .all(|n| n == "vllm-0-rank-0" || n == "vllm-0-rank-1"),
        "{names:?}"
    );

    // A long stream in flight while the pod changes (a label added: the list is applied
    // again): its booking is still counted, and released at its end.
    let stream_url = url.clone();
    let stream = tokio::spawn(async move {
        let mut b = body(90_000, 64, 300);
        b["stream"] = json!(true);
        support::stream_text(&stream_url, &b).await
    });
    let mut booked = String::new();
    let mut found = false;
    for _ in 0..50 {
        for n in ["vllm-0-rank-0", "vllm-0-rank-1"] {
            if in_flight(&url, n).await == 1 {
                booked = n.to_string();
                found = true;
            }
        }
        if found {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(found, "the stream is booked on a rank");
    let relabeled = [
        ("app", "vllm"),
        ("llm-d.ai/role", "decode"),
        ("example.com/zone", "a"),
    ];
    api.apply_pod(&pod(NS, "vllm-0", "127.0.0.1", true, &relabeled));
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        in_flight(&url, &booked).await,
        1,
        "the booking survives the change"
    );
    let (status, _, text) = stream.await.unwrap();
    assert_eq!(status, 200);
    assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
    assert_eq!(in_flight(&url, &booked).await, 0);

    // Ready flips to false: out of rotation within 1 s.
    api.apply_pod(&pod(NS, "vllm-0", "127.0.0.1", false, &relabeled));
    health_becomes(&url, 503, Duration::from_secs(1)).await;
    let r = send(&url, &[], &body(1, 16, 1)).await;
    assert_eq!(r.status, 503, "{:?}", r.body);
}
