//! Prefix plugins of issue 13 through the real router: `no-hit-lru-scorer` spreads cold
//! requests over the least recently used endpoints, `burst-prefix-cache-producer` (read by
//! `prefix-cache-scorer`) keeps the requests of one prompt group on one replica; and the
//! llm-d samples using them load.

use crate::support;

use pdgate_scheduler::{Endpoint, Scheduler};
use serde_json::json;
use std::time::Duration;
use support::{body, fake_engine, labels, router, send, url, FakeEngine};

/// Three fake decode engines `d0`, `d1`, `d2` answering every completion with 200.
async fn engines() -> (Vec<FakeEngine>, Vec<Endpoint>) {
    let mut engines = Vec::new();
    let mut eps = Vec::new();
    for i in 0..3 {
        let e = fake_engine("/v1/completions", |_| {
            axum::response::IntoResponse::into_response(axum::Json(
                json!({"choices": [{"text": "ok"}]}),
            ))
        })
        .await;
        eps.push(Endpoint::new(
            format!("d{i}"),
            e.addr.clone(),
            labels("decode", None),
        ));
        engines.push(e);
    }
    (engines, eps)
}

/// Sends the 32-token prompt starting at `first`; asserts 200 and returns the endpoint that
/// served it (header), checked against the engine that recorded it.
async fn served(url: &str, engines: &[FakeEngine], first: u32) -> String {
    let before: Vec<usize> = engines.iter().map(|e| e.requests().len()).collect();
    let r = send(url, &[], &body(first, 32, 1)).await;
    assert_eq!(r.status, 200, "{:?}", r.body);
    let name = r.header("x-pdgate-decode-endpoint");
    let got: Vec<usize> = (engines.iter().zip(&before))
        .enumerate()
        .filter(|(_, (e, b))| e.requests().len() > **b)
        .map(|(i, _)| i)
        .collect();
    assert_eq!(got.len(), 1, "one engine got the request");
    assert_eq!(name, format!("d{}", got[0]));
    name
}

const NO_HIT_LRU: &str = "
apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: prefix-cache-scorer
- type: no-hit-lru-scorer
- type: decode-filter
- type: max-score-picker
- type: single-profile-handler
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: decode-filter
  - pluginRef: max-score-picker
  - pluginRef: prefix-cache-scorer
    weight: 2
  - pluginRef: no-hit-lru-scorer
    weight: 1
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_hit_lru_rotates_cold_requests_and_leaves_warm_ones_to_the_prefix() {
    let (engines, eps) = engines().await;
    let r = router(eps, NO_HIT_LRU).await;
    let url = url(&r);
    // Cold (no prefix held anywhere): never-used endpoints first, in order, then the least
    // recently used: d0 (scores 1, 0.5, 0), d1 (0, 1, 0.5), d2 (0.5, 0, 1), d0 (1, 0.5, 0).
    let mut seen = Vec::new();
    for first in [0, 1000, 2000, 3000] {
        seen.push(served(&url, &engines, first).await);
    }
    assert_eq!(seen, ["d0", "d1", "d2", "d0"]);
    // Warm: the first prompt again, held by d0 (the approximate producer recorded it when
    // d0 answered): no-hit-lru scores 0.5 everywhere, prefix-cache-scorer 2 on d0.
    assert_eq!(served(&url, &engines, 0).await, "d0");
    // The warm request did not touch the LRU [d1, d2, d0]: the next cold one goes to d1.
    assert_eq!(served(&url, &engines, 4000).await, "d1");
    assert_eq!(served(&url, &engines, 5000).await, "d2");
}

/// The burst sample's pipeline (without the token producer: prompts are token ids) with
/// `parameters` for the producer.
fn burst_config(parameters: &str) -> String {
    format!(
        "
apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: single-profile-handler
- type: decode-filter
- type: burst-prefix-cache-producer
  parameters: {parameters}
- type: prefix-cache-scorer
  parameters:
    prefixMatchInfoProducerName: burst-prefix-cache-producer
- type: load-aware-scorer
- type: max-score-picker
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: decode-filter
  - pluginRef: prefix-cache-scorer
    weight: 2.0
  - pluginRef: load-aware-scorer
    weight: 1.0
  - pluginRef: max-score-picker
"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn burst_groups_stay_together_and_new_groups_take_the_least_loaded_replica() {
    let (engines, eps) = engines().await;
    let r = router(
        eps,
        &burst_config("{windowDurationMs: 10000, blockSizeTokens: 16}"),
    )
    .await;
    let url = url(&r);
    // Group A (prompt 0) opens the batch on d0 (loads all 0, names break the tie); group B
    // takes d1, the singleton C d2; later members follow their group.
    let mut seen = Vec::new();
    for first in [0, 0, 500, 500, 900, 0, 500] {
        seen.push(served(&url, &engines, first).await);
    }
    assert_eq!(seen, ["d0", "d0", "d1", "d1", "d2", "d0", "d1"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn burst_max_per_replica_spills_and_the_window_resets_placement() {
    let (engines, eps) = engines().await;
    let r = router(
        eps,
        &burst_config("{windowDurationMs: 2000, maxPerReplica: 2, blockSizeTokens: 16}"),
    )
    .await;
    let url = url(&r);
    // k = 2: d0 d0, then the least-loaded replica under k (d1 by name), then d2.
    let mut seen = Vec::new();
    for _ in 0..5 {
        seen.push(served(&url, &engines, 0).await);
    }
    assert_eq!(seen, ["d0", "d0", "d1", "d1", "d2"]);
    // After the window the batch is new: loads are 0 again and group A starts over on d0,
    // and a new group B, placed in the same new batch, goes to d1.
    tokio::time::sleep(Duration::from_millis(2100)).await;
    assert_eq!(served(&url, &engines, 0).await, "d0");
    assert_eq!(served(&url, &engines, 700).await, "d1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_concurrent_burst_of_two_groups_lands_on_two_replicas() {
    let (engines, eps) = engines().await;
    let r = router(
        eps,
        &burst_config("{windowDurationMs: 10000, blockSizeTokens: 16}"),
    )
    .await;
    let url = url(&r);
    // Four samples of each of two prompts, all at once.
    let sends = (0..8).map(|i| {
        let url = url.clone();
        async move {
            let first = if i % 2 == 0 { 0 } else { 3000 };
            let r = send(&url, &[], &body(first, 32, 1)).await;
            assert_eq!(r.status, 200);
            (first, r.header("x-pdgate-decode-endpoint"))
        }
    });
    let results = futures_util::future::join_all(sends).await;
    let on = |first: u32| -> std::collections::BTreeSet<String> {
        (results.iter())
            .filter(|(f, _)| *f == first)
            .map(|(_, e)| e.clone())
            .collect()
    };
    let (a, b) = (on(0), on(3000));
    assert_eq!(
        (a.len(), b.len()),
        (1, 1),
        "each group on one replica: {results:?}"
    );
    assert_ne!(a, b, "the two groups on different replicas");
    let total: usize = engines.iter().map(|e| e.requests().len()).sum();
    assert_eq!(total, 8);
}

/// llm-d's samples using these plugins load, and their effective configs load again.
///
/// `epp-burst-prefix-cache-config.yaml` also configures `token-producer` with
/// `vllm: {url: ...}` (llm-d's field name); pdgate's `token-producer` names that field `http`
/// and refuses `url`. Until it accepts `url`, the sample's only error must be that one, and
/// the sample without the `vllm` block must load.
#[test]
fn the_llm_d_samples_using_them_load() {
    for name in [
        "sim-epp-no-hit-lru.yaml",
        "epp-burst-prefix-cache-config.yaml",
    ] {
        let path = format!(
            "{}/../pdgate-scheduler/tests/data/llm-d-router/{name}",
            env!("CARGO_MANIFEST_DIR")
        );
        let text = std::fs::read_to_string(&path).unwrap();
        let s = match Scheduler::from_yaml(&text, name) {
            Ok(s) => s,
            Err(e) if name.starts_with("epp-burst") => {
                let msg = e.to_string();
                assert!(
                    msg.contains("plugin `token-producer`") && msg.contains("unknown field `url`"),
                    "{msg}"
                );
                let without_vllm: String = (text.lines())
                    .filter(|l| !l.trim_start().starts_with("vllm:") && !l.contains("url:"))
                    .map(|l| format!("{l}\n"))
                    .collect();
                Scheduler::from_yaml(&without_vllm, name)
                    .unwrap_or_else(|e| panic!("{name} without vllm: {e}"))
            }
            Err(e) => panic!("{name}: {e}"),
        };
        let eff = s.effective_config_yaml();
        Scheduler::from_yaml(&eff, name).unwrap_or_else(|e| panic!("{name} effective: {e}"));
        if name == "sim-epp-no-hit-lru.yaml" {
            // no-hit-lru names no producer: llm-d's approximate one is injected for it.
            assert!(eff.contains("type: approx-prefix-cache-producer"), "{eff}");
            assert!(eff.contains("lruSize: 2048"), "{eff}");
        } else {
            assert!(eff.contains("type: burst-prefix-cache-producer"), "{eff}");
            assert!(eff.contains("windowDurationMs: 100"), "{eff}");
            assert!(eff.contains("balanceBy: requests"), "{eff}");
        }
    }
}
