//! Endpoint readiness changes during a run (issue 4 item 4): a watched source's new lists
//! apply whole — Ready / not Ready / terminating, added and removed endpoints, changed
//! labels — and in-flight bookings on kept endpoints survive the change.

use futures_util::future::BoxFuture;
use pdgate_fleet::discovery::{self, DiscoveryError, EndpointWatcher};
use pdgate_fleet::{EndpointRegistry, EndpointSource};
use pdgate_scheduler::{Endpoint, InFlightGuard};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// A source fed by a channel: each message is the next full list.
struct Channel(mpsc::Receiver<Vec<Endpoint>>);

impl EndpointWatcher for Channel {
    fn name(&self) -> String {
        "test-channel".into()
    }
    fn next(&mut self) -> BoxFuture<'_, Option<Result<Vec<Endpoint>, DiscoveryError>>> {
        Box::pin(async move { self.0.recv().await.map(Ok) })
    }
}

fn ep(name: &str, role: &str) -> Endpoint {
    let labels = BTreeMap::from([("llm-d.ai/role".to_string(), role.to_string())]);
    Endpoint::new(name, format!("127.0.0.1:{}", 9000 + name.len()), labels)
}

/// `(name, schedulable, role label)` of every endpoint of the registry.
fn view(r: &EndpointRegistry) -> Vec<(String, bool, String)> {
    r.snapshot()
        .endpoints
        .iter()
        .map(|e| {
            (
                e.endpoint.name.clone(),
                e.endpoint.schedulable(),
                e.endpoint.labels["llm-d.ai/role"].clone(),
            )
        })
        .collect()
}

async fn until(r: &EndpointRegistry, want: &[(&str, bool, &str)]) -> Duration {
    let started = Instant::now();
    let want: Vec<(String, bool, String)> = want
        .iter()
        .map(|(n, s, l)| (n.to_string(), *s, l.to_string()))
        .collect();
    while view(r) != want {
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "not applied within 1 s: {:?}",
            view(r)
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    started.elapsed()
}

#[tokio::test]
async fn a_custom_watcher_plugs_in_and_bookings_survive_changes() {
    let (tx, rx) = mpsc::channel(4);
    tx.send(vec![ep("d0", "decode"), ep("d1", "decode")])
        .await
        .unwrap();
    let registry = Arc::new(EndpointRegistry::default());
    let _task = discovery::start(
        EndpointSource::Watch(Box::new(Channel(rx))),
        registry.clone(),
    )
    .await
    .unwrap();
    until(&registry, &[("d0", true, "decode"), ("d1", true, "decode")]).await;
    let booked = InFlightGuard::book(&registry.snapshot().endpoints[0].load);
    // d0 stops being Ready and changes role label; d1 leaves; p0 arrives.
    let mut d0 = ep("d0", "prefill");
    d0.ready = false;
    tx.send(vec![d0, ep("p0", "prefill")]).await.unwrap();
    until(
        &registry,
        &[("d0", false, "prefill"), ("p0", true, "prefill")],
    )
    .await;
    // The request booked on d0 before the change is still counted on d0.
    assert_eq!(registry.snapshot().endpoints[0].load.in_flight(), 1);
    drop(booked);
    assert_eq!(registry.snapshot().endpoints[0].load.in_flight(), 0);
}

#[tokio::test]
async fn file_changes_apply_within_a_second() {
    let path = std::env::temp_dir().join(format!(
        "pdgate-watch-{}-{:?}.yaml",
        std::process::id(),
        Instant::now()
    ));
    let write = |text: &str| std::fs::write(&path, text).unwrap();
    write("endpoints:\n- name: a\n  address: 127.0.0.1:9001\n  labels: {llm-d.ai/role: decode}\n");
    let registry = Arc::new(EndpointRegistry::default());
    let _task = discovery::start(
        EndpointSource::File {
            path: path.clone(),
            poll: Duration::from_millis(100),
        },
        registry.clone(),
    )
    .await
    .unwrap();
    until(&registry, &[("a", true, "decode")]).await;
    // Same size, different content: still noticed (content is compared, not size/mtime).
    write("endpoints:\n- name: b\n  address: 127.0.0.1:9001\n  labels: {llm-d.ai/role: decode}\n");
    let t1 = until(&registry, &[("b", true, "decode")]).await;
    write(
        "endpoints:\n- name: b\n  address: 127.0.0.1:9001\n  labels: {llm-d.ai/role: decode}\n  terminating: true\n\
         - name: c\n  address: 127.0.0.1:9002\n  labels: {llm-d.ai/role: prefill}\n  ready: false\n",
    );
    let t2 = until(
        &registry,
        &[("b", false, "decode"), ("c", false, "prefill")],
    )
    .await;
    // A broken file keeps the previous endpoints.
    write("endpoints: [oops\n");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(view(&registry).len(), 2);
    println!("applied after {t1:?} and {t2:?}");
    let _ = std::fs::remove_file(&path);
}

#[test]
fn label_values_are_checked_and_a_revision_must_not_be_empty() {
    use pdgate_fleet::endpoints_file::parse_endpoints_yaml;
    let file = |rev: &str| {
        format!(
            "endpoints:\n- name: d0\n  address: 127.0.0.1:9000\n  labels: {{llm-d.ai/role: decode, disaggregatedset.x-k8s.io/revision: {rev:?}}}\n"
        )
    };
    assert!(parse_endpoints_yaml(&file("rev-b.2"), "eps.yaml").is_ok());
    // Fresh-eyes findings: " sp " was trimmed into another revision between hops, "" read
    // as absent, "b\nc" dropped the header.
    for bad in [" sp ", "b\nc", "-x", &"r".repeat(64)] {
        let e = parse_endpoints_yaml(&file(bad), "eps.yaml").unwrap_err();
        assert!(
            e.to_string().contains("is not a valid label value"),
            "{bad:?}: {e}"
        );
    }
    let e = parse_endpoints_yaml(&file(""), "eps.yaml").unwrap_err();
    assert_eq!(
        e.to_string(),
        "eps.yaml: endpoints[0] (d0): label disaggregatedset.x-k8s.io/revision: the revision must not be empty"
    );
}
