//! llm-d's multimodal and data-parallel plugins end to end (issue 13 item 2):
//! `data-parallel-profile-handler` behind a gateway (`pdgate epp`: the pod's primary port plus
//! `x-data-parallel-host-port`) and as the router (`pdgate serve`: straight to the rank),
//! `always-disagg-multimodal-decider` as the encode decider of E/PD and E/P/D fleets, and
//! `mm-embeddings-cache-producer` / `-scorer` keeping an image on the endpoint that saw it.
//! The llm-d sample configs using these plugins load.

use crate::support;

use pdgate_api::labels::ROLE;
use pdgate_scenario::fleet::{self, FleetSpec, LocalFleet};
use pdgate_scheduler::{Endpoint, Scheduler};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use support::envoy::{self, JSON};
use support::{fake_engine, router, url, FakeEngine, Reply};

/// An llm-d sample config from `pdgate-scheduler/tests/data/llm-d-router/`.
fn sample(name: &str) -> String {
    let path = format!(
        "{}/../pdgate-scheduler/tests/data/llm-d-router/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Loads an llm-d sample, panicking with the loader's message.
fn loads(name: &str) {
    if let Err(e) = Scheduler::from_yaml(&sample(name), name) {
        panic!("{name} does not load: {e}");
    }
}

#[test]
fn the_dp_sample_loads() {
    loads("dp-epp-config.yaml");
}

#[test]
fn the_e_pd_and_e_p_d_samples_load() {
    loads("sim-e-pd-epp-config.yaml");
    loads("sim-e-p-d-epp-config.yaml");
}

/// Also uses `token-producer` (`vllm.url`), the data-layer plugins and the precise producer.
#[test]
fn the_mm_embeddings_cache_sample_loads() {
    loads("epp-mm-embeddings-cache-config.yaml");
}

// ---------------------------------------------------------------------------------------
// data-parallel-profile-handler

fn decode_labels() -> BTreeMap<String, String> {
    BTreeMap::from([(ROLE.to_string(), "decode".to_string())])
}

/// A fake engine answering completions.
async fn completions_engine() -> FakeEngine {
    fake_engine("/v1/completions", |_| {
        axum::response::IntoResponse::into_response(axum::Json(
            json!({"choices": [{"text": "ok"}]}),
        ))
    })
    .await
}

/// Pod `pod` with two DP ranks, each on its own port (as pdgate-fleet builds them from a pool
/// with two target ports), plus the pod's primary port; the dp sample config routing through
/// that port.
struct DpPod {
    ranks: [FakeEngine; 2],
    primary: FakeEngine,
    endpoints: Vec<Endpoint>,
    config: String,
}

async fn dp_pod() -> DpPod {
    let ranks = [completions_engine().await, completions_engine().await];
    let primary = completions_engine().await;
    let endpoints = ranks
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let mut e = Endpoint::new(format!("pod-rank-{i}"), r.addr.clone(), decode_labels());
            e.dp_rank = Some(i as u32);
            e
        })
        .collect();
    let port = primary.addr.rsplit_once(':').unwrap().1;
    let config =
        sample("dp-epp-config.yaml").replace("primaryPort: 8000", &format!("primaryPort: {port}"));
    assert!(config.contains(&format!("primaryPort: {port}")));
    DpPod {
        ranks,
        primary,
        endpoints,
        config,
    }
}

#[tokio::test]
async fn behind_a_gateway_the_rank_is_reached_through_the_primary_port() {
    let pod = dp_pod().await;
    let e = envoy::epp(pod.endpoints.clone(), &pod.config).await;
    let body =
        serde_json::to_vec(&json!({"model": "m", "prompt": "hello", "max_tokens": 1})).unwrap();
    let path = "/v1/completions";
    // Pinned to rank 1; the client's own copy of the header does not count.
    let pin = [
        JSON,
        ("x-worker-instance-id", "pod"),
        ("x-dp-rank", "1"),
        ("x-data-parallel-host-port", "10.9.9.9:1"),
    ];
    let mut s = e.stream().await;
    let r = s.request(path, &pin, &body, 1000, None).await;
    assert_eq!(r.immediate, None, "{:?}", r.immediate_json());
    // The gateway goes to the primary port only (no fallback), the header names the rank.
    assert_eq!(r.set["x-gateway-destination-endpoint"], pod.primary.addr);
    assert_eq!(
        r.metadata_destination.as_deref(),
        Some(pod.primary.addr.as_str())
    );
    assert_eq!(r.set["x-data-parallel-host-port"], pod.ranks[1].addr);
    assert!(!r.removed.iter().any(|h| h == "x-data-parallel-host-port"));
    assert_eq!(r.body(), body);
    assert_eq!(e.in_flight(&pod.ranks[1].addr), 1, "the rank is booked");
    let up = s
        .call_destination(&r, path, &[JSON], Some(&pod.primary.addr))
        .await;
    assert_eq!(up.status, 200);
    let seen = pod.primary.requests();
    assert_eq!(seen.len(), 1);
    assert_eq!(
        seen[0].header("x-data-parallel-host-port").as_deref(),
        Some(pod.ranks[1].addr.as_str())
    );
    assert_eq!(e.in_flight(&pod.ranks[1].addr), 0, "released at the end");
    // Unpinned: always the primary port, naming whichever rank was picked.
    let ranks: Vec<&str> = pod.ranks.iter().map(|r| r.addr.as_str()).collect();
    for _ in 0..4 {
        let mut s = e.stream().await;
        let r = s.request(path, &[JSON], &body, 1000, None).await;
        assert_eq!(r.set["x-gateway-destination-endpoint"], pod.primary.addr);
        let rank = &r.set["x-data-parallel-host-port"];
        assert!(ranks.contains(&rank.as_str()), "{rank}");
        let up = s
            .call_destination(&r, path, &[JSON], Some(&pod.primary.addr))
            .await;
        assert_eq!(up.status, 200);
    }
    assert!(pod.ranks.iter().all(|r| r.requests().is_empty()));
    assert_eq!(pod.primary.requests().len(), 5);
}

#[tokio::test]
async fn as_the_router_pdgate_sends_straight_to_the_rank() {
    let pod = dp_pod().await;
    let r = router(pod.endpoints.clone(), &pod.config).await;
    let body = json!({"model": "m", "prompt": "hello", "max_tokens": 1});
    let pin = [
        ("x-worker-instance-id", "pod"),
        ("x-dp-rank", "1"),
        ("x-data-parallel-host-port", "10.9.9.9:1"),
    ];
    let reply = support::send(&url(&r), &pin, &body).await;
    assert_eq!(reply.status, 200, "{:?}", reply.body);
    assert_eq!(reply.header("x-pdgate-decode-endpoint"), "pod-rank-1");
    assert_eq!(reply.header("x-pdgate-decode-dp-rank"), "1");
    let seen = pod.ranks[1].requests();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].header("x-data-parallel-rank").as_deref(), Some("1"));
    // The router reaches the rank itself: no primary-port hop, no client copy of the header.
    assert_eq!(seen[0].header("x-data-parallel-host-port"), None);
    assert!(pod.primary.requests().is_empty() && pod.ranks[0].requests().is_empty());
}

// ---------------------------------------------------------------------------------------
// always-disagg-multimodal-decider (E/PD and E/P/D)

fn chat(images: &[&str], text: &str) -> Value {
    let mut content: Vec<Value> = images
        .iter()
        .map(|u| json!({"type": "image_url", "image_url": {"url": u}}))
        .collect();
    content.push(json!({"type": "text", "text": text}));
    json!({
        "model": "pdgate-sim",
        "messages": [{"role": "user", "content": content}],
        "max_tokens": 3
    })
}

async fn post_chat(url: &str, headers: &[(&str, &str)], body: &Value) -> Reply {
    support::send_to(url, "/v1/chat/completions", headers, body.to_string()).await
}

/// Σ of a stat over the workers of `role`.
fn sum(f: &LocalFleet, role: &str, stat: impl Fn(&pdgate_sim::WorkerStats) -> u64) -> u64 {
    (f.workers.iter())
        .filter(|w| w.role() == role)
        .map(|w| stat(&w.stats()))
        .sum()
}

/// (items encoded on encode workers, items the prefilling worker pulled from them, items
/// encoded locally by the prefilling worker).
fn encode_counts(f: &LocalFleet) -> (u64, u64, u64) {
    let both = |stat: fn(&pdgate_sim::WorkerStats) -> u64| {
        sum(f, "prefill", stat) + sum(f, "decode", stat)
    };
    (
        sum(f, "encode", |s| s.encode_items),
        both(|s| s.remote_encoded_items),
        both(|s| s.local_encoded_items),
    )
}

fn name_of(f: &LocalFleet, role: &str) -> String {
    let w = f.workers.iter().find(|w| w.role() == role).unwrap();
    w.name().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e_pd_encodes_multimodal_requests_only() {
    let spec = FleetSpec {
        encode: 1,
        ..FleetSpec::new(0, 1, 50.0)
    };
    let f = fleet::start(&spec, &sample("sim-e-pd-epp-config.yaml"))
        .await
        .unwrap();
    let decode = name_of(&f, "decode");
    let r = post_chat(
        &f.url(),
        &[],
        &chat(&["https://x/a.png", "https://x/b.png"], "compare"),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        r.served(),
        ["aggregated".into(), decode.clone(), decode.clone()]
    );
    // Two items → two encode legs on the encode worker, both pulled by decode.
    assert_eq!(encode_counts(&f), (2, 2, 0));
    let r = post_chat(&f.url(), &[], &chat(&[], "only words")).await;
    assert_eq!(r.status, 200);
    assert_eq!(encode_counts(&f), (2, 2, 0), "text only: no encode leg");
    assert_eq!(f.in_flight(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_encode_decider_that_keeps_skips_the_encode_stage() {
    // The E/PD sample with an encode decider that never splits (a prefix decider with
    // `nonCachedTokens: 0`): the decode worker encodes its images itself.
    let config = sample("sim-e-pd-epp-config.yaml")
        .replace(
            "encode: always-disagg-multimodal-decider",
            "encode: never-encode",
        )
        .replacen(
            "plugins:\n",
            "plugins:\n- type: prefix-based-pd-decider\n  name: never-encode\n  \
             parameters: {nonCachedTokens: 0}\n",
            1,
        );
    let spec = FleetSpec {
        encode: 1,
        ..FleetSpec::new(0, 1, 50.0)
    };
    let f = fleet::start(&spec, &config).await.unwrap();
    let r = post_chat(
        &f.url(),
        &[],
        &chat(&["https://x/a.png", "https://x/b.png"], "compare"),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(encode_counts(&f), (0, 0, 2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e_p_d_encodes_then_splits_prefill() {
    let spec = FleetSpec {
        encode: 1,
        ..FleetSpec::new(1, 1, 50.0)
    };
    let f = fleet::start(&spec, &sample("sim-e-p-d-epp-config.yaml"))
        .await
        .unwrap();
    let (prefill, decode) = (name_of(&f, "prefill"), name_of(&f, "decode"));
    // A long prompt (far over 16 uncached tokens) with one image: encode, prefill, decode.
    let long = "describe every detail of this picture, its colours and its shapes ".repeat(8);
    let r = post_chat(&f.url(), &[], &chat(&["https://x/cat.png"], &long)).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        r.served(),
        ["split".into(), prefill.clone(), decode.clone()]
    );
    assert_eq!(encode_counts(&f), (1, 1, 0));
    assert_eq!(sum(&f, "prefill", |s| s.remote_encoded_items), 1);
    // A short text prompt: no encode, no split.
    let r = post_chat(&f.url(), &[], &chat(&[], "hi")).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.served(), ["aggregated".into(), decode.clone(), decode]);
    assert_eq!(encode_counts(&f), (1, 1, 0));
    assert_eq!(f.in_flight(), 0);
}

// ---------------------------------------------------------------------------------------
// mm-embeddings-cache-producer / -scorer

/// One profile: decode filter, the encoder-cache scorer (weight 4, its producer injected
/// with defaults) and the queue scorer (weight 1).
const MM_CONFIG: &str = "\
plugins:
- type: decode-filter
- type: mm-embeddings-cache-scorer
- type: queue-scorer
- type: max-score-picker
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: decode-filter
  - pluginRef: mm-embeddings-cache-scorer
    weight: 4
  - pluginRef: queue-scorer
  - pluginRef: max-score-picker
";

async fn chat_engine() -> FakeEngine {
    fake_engine("/v1/chat/completions", |_| {
        axum::response::IntoResponse::into_response(axum::Json(
            json!({"choices": [{"message": {"role": "assistant", "content": "ok"}}]}),
        ))
    })
    .await
}

async fn two_chat_engines() -> ([FakeEngine; 2], Vec<Endpoint>) {
    let engines = [chat_engine().await, chat_engine().await];
    let eps = (engines.iter().enumerate())
        .map(|(i, e)| Endpoint::new(format!("w{i}"), e.addr.clone(), decode_labels()))
        .collect();
    (engines, eps)
}

#[tokio::test]
async fn an_image_goes_back_to_the_endpoint_that_encoded_it() {
    let (engines, eps) = two_chat_engines().await;
    let r = router(eps, MM_CONFIG).await;
    let url = url(&r);
    let (x, y) = (
        chat(&["https://x/x.png"], "what"),
        chat(&["https://x/y.png"], "what"),
    );
    // First sight of each image, pinned: x on w1, y on w0.
    for (body, pin) in [(&x, "w1"), (&y, "w0")] {
        let reply = post_chat(&url, &[("x-worker-instance-id", pin)], body).await;
        assert_eq!(reply.status, 200, "{}", reply.body);
        assert_eq!(reply.header("x-pdgate-decode-endpoint"), pin);
    }
    // From then on, free to choose, each image follows its first endpoint: 4 + 1 against
    // 0 + 1 (equal, idle queues).
    for _ in 0..4 {
        for (body, want) in [(&x, "w1"), (&y, "w0")] {
            let reply = post_chat(&url, &[], body).await;
            assert_eq!(reply.status, 200);
            assert_eq!(reply.header("x-pdgate-decode-endpoint"), want);
        }
    }
    assert_eq!(
        (engines[0].requests().len(), engines[1].requests().len()),
        (5, 5)
    );
    // The same image in another request (other text, another URL field form) hashes the
    // same.
    let same = json!({"model": "pdgate-sim", "messages": [{"role": "user", "content": [
        {"type": "text", "text": "again"},
        {"type": "image_url", "image_url": "https://x/x.png"}]}]});
    let reply = post_chat(&url, &[], &same).await;
    assert_eq!(reply.header("x-pdgate-decode-endpoint"), "w1");
}

#[tokio::test]
async fn behind_a_gateway_an_image_goes_back_too() {
    let (engines, eps) = two_chat_engines().await;
    let e = envoy::epp(eps, MM_CONFIG).await;
    let body = serde_json::to_vec(&chat(&["https://x/z.png"], "what")).unwrap();
    let path = "/v1/chat/completions";
    let mut s = e.stream().await;
    let pin = [JSON, ("x-worker-instance-id", "w0")];
    let r = s.request(path, &pin, &body, 1000, None).await;
    assert_eq!(r.destination(), engines[0].addr);
    let up = s.call_destination(&r, path, &[JSON], None).await;
    assert_eq!(up.status, 200);
    for _ in 0..4 {
        let mut s = e.stream().await;
        let r = s.request(path, &[JSON], &body, 1000, None).await;
        assert_eq!(r.destination(), engines[0].addr);
        let up = s.call_destination(&r, path, &[JSON], None).await;
        assert_eq!(up.status, 200);
    }
    assert_eq!(engines[0].requests().len(), 5);
}
