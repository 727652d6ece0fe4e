//! The encode phase end to end (issue 4 item 5): chat requests with image or audio parts get
//! one encode leg per item before prefill, on encode endpoints, and the prefill leg carries
//! the encoders' `ec_transfer_params`; text-only requests skip it. Layout (a) (one router,
//! in-process encode picks) and layout (b) (an encode router), and with two revisions the
//! parallel encodes of a request share its revision.

use crate::support;

use pdgate_scenario::fleet::{self, FleetSpec, LocalFleet};
use pdgate_scheduler::DEFAULT_CONFIG_YAML;
use pdgate_server::app::PhaseRouters;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use support::{coordinator, endpoints, router, screened_config, sim_config, sim_workers};

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

/// A chat completions request with the extra `headers`.
async fn chat_reply(url: &str, headers: &[(&str, &str)], body: &Value) -> support::Reply {
    support::send_to(url, "/v1/chat/completions", headers, body.to_string()).await
}

/// Status and body of a chat completions request.
async fn post(url: &str, body: &Value) -> (u16, Value) {
    let r = chat_reply(url, &[], body).await;
    (r.status, r.body)
}

/// Σ of a stat over the workers of `role`.
fn sum(f: &LocalFleet, role: &str, stat: impl Fn(&pdgate_sim::WorkerStats) -> u64) -> u64 {
    f.workers
        .iter()
        .filter(|w| w.role() == role)
        .map(|w| stat(&w.stats()))
        .sum()
}

/// 1 prefill, 1 decode, 2 encode; the router trusts callers on loopback (it is also the
/// prefill router of a coordinator below).
fn spec() -> FleetSpec {
    FleetSpec {
        encode: 2,
        trust: support::loopback_trusted(),
        ..FleetSpec::new(1, 1, 50.0)
    }
}

/// (pulls the encoders served, items the prefilling worker — prefill, or decode when the
/// request ran aggregated — received from encoders, items encoded locally).
fn encode_counts(f: &LocalFleet) -> (u64, u64, u64) {
    (
        sum(f, "encode", |s| s.ec_pulls_served),
        sum(f, "prefill", |s| s.remote_encoded_items)
            + sum(f, "decode", |s| s.remote_encoded_items),
        sum(f, "prefill", |s| s.local_encoded_items) + sum(f, "decode", |s| s.local_encoded_items),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_router_runs_an_encode_leg_per_item_and_prefill_carries_their_output() {
    let f = fleet::start(&spec(), DEFAULT_CONFIG_YAML).await.unwrap();
    let (status, v) = post(
        &f.url(),
        &chat(&["https://x/cat.png", "https://x/dog.png"], "compare them"),
    )
    .await;
    assert_eq!(status, 200, "{v}");
    // 2 items → 2 encode legs, both pulled by the worker that prefilled (a short prompt runs
    // aggregated on decode); nobody encoded locally.
    assert_eq!(encode_counts(&f), (2, 2, 0));
    assert_eq!(sum(&f, "encode", |s| s.encode_items), 2);
    // Text only: no encode leg.
    let (status, _) = post(&f.url(), &chat(&[], "just text")).await;
    assert_eq!(status, 200);
    assert_eq!(encode_counts(&f), (2, 2, 0));
    assert_eq!(f.in_flight(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_coordinator_sends_encode_legs_to_the_encode_router() {
    let f = fleet::start(&spec(), DEFAULT_CONFIG_YAML).await.unwrap();
    let endpoints = endpoints(&f.workers);
    let encode_router = router(endpoints.clone(), DEFAULT_CONFIG_YAML).await;
    let decode_router = router(endpoints, DEFAULT_CONFIG_YAML).await;
    let routers = PhaseRouters::new(
        &f.router.addr.to_string(),
        &decode_router.addr.to_string(),
        false,
    )
    .with_encode(&encode_router.addr.to_string());
    let c = coordinator(routers).await;
    let url = support::url(&c);
    let (status, v) = post(
        &url,
        &chat(
            &["https://x/1.png", "https://x/2.png", "https://x/3.png"],
            "three",
        ),
    )
    .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(encode_counts(&f), (3, 3, 0));
    // Exactly one encode per item: the per-role routers forward their legs, they do not run
    // an encode step of their own (fresh-eyes finding: 4 encodes per image).
    assert_eq!(sum(&f, "encode", |s| s.encode_items), 3);
    let (status, _) = post(&url, &chat(&[], "text only")).await;
    assert_eq!(status, 200);
    assert_eq!(encode_counts(&f), (3, 3, 0));
    assert_eq!(encode_router.state.in_flight_total(), 0);
}

/// A worker `{revision}-{role}` of the disaggregated set, labelled for the screener.
fn member(revision: &str, role: &str) -> pdgate_sim::WorkerSpec {
    support::member(&format!("{revision}-{role}"), revision, role)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parallel_encodes_share_the_requests_revision() {
    // Two revisions, each with an encoder, a prefill and a decode. A simulator refuses encoder
    // output from another revision (409), so any mixed request would fail.
    let specs: Vec<_> = ["a", "b"]
        .iter()
        .flat_map(|r| {
            [
                member(r, "encode"),
                member(r, "prefill"),
                member(r, "decode"),
            ]
        })
        .collect();
    let workers = sim_workers(specs, sim_config(50.0)).await;
    let router = router(endpoints(&workers), &screened_config()).await;
    let url = support::url(&router);
    let mut revisions = BTreeMap::<String, usize>::new();
    for i in 0..40 {
        let images: Vec<String> = (0..4).map(|k| format!("https://x/{i}-{k}.png")).collect();
        let images: Vec<&str> = images.iter().map(String::as_str).collect();
        let r = chat_reply(&url, &[], &chat(&images, "four images")).await;
        assert_eq!(r.status, 200, "request {i}");
        let rev = r.headers["x-pdgate-decode-revision"]
            .to_str()
            .unwrap()
            .to_string();
        *revisions.entry(rev).or_default() += 1;
    }
    println!("revisions {revisions:?}");
    assert_eq!(revisions.len(), 2, "both revisions used: {revisions:?}");
    let stat = |f: fn(&pdgate_sim::WorkerStats) -> u64| -> u64 {
        workers.iter().map(|w| f(&w.stats())).sum()
    };
    assert_eq!(stat(|s| s.ec_pulls_served), 160);
    assert_eq!(stat(|s| s.ec_pull_rejections.values().sum()), 0);
    assert_eq!(stat(|s| s.ec_handoff_rejections.values().sum()), 0);
    assert_eq!(router.state.in_flight_total(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_per_role_router_forwards_its_leg_without_an_encode_step() {
    let f = fleet::start(&spec(), DEFAULT_CONFIG_YAML).await.unwrap();
    let profile = [("x-llm-d-epp-profile", "decode")];
    let r = chat_reply(&f.url(), &profile, &chat(&["https://x/a.png"], "look")).await;
    assert_eq!(r.status, 200);
    // The decode endpoint encoded the image itself; no encode leg was sent.
    assert_eq!(sum(&f, "encode", |s| s.encode_items), 0);
    assert_eq!(sum(&f, "decode", |s| s.local_encoded_items), 1);
}
