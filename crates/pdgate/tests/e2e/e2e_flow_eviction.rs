//! In-flight eviction (`flowControl.enableEviction: true`, issue 10 item 6) against simulator
//! workers: the newest sheddable stream ends with an error event, a request without an answer
//! yet gets 429 `evicted`, a non-sheddable request is never a victim, and scraped gauges do
//! not make one blocked request evict a cascade. That the engine aborted the evicted request
//! is read from the simulator's cancelled count.

use crate::support;

use pdgate_core::flow_control::Objectives;
use pdgate_scenario::fleet;
use pdgate_server::ServerHandle;
use pdgate_sim::WorkerHandle;
use std::time::{Duration, Instant};
use support::flow::*;
use support::*;

const BATCH: (&str, &str) = ("x-llm-d-inference-objective", "batch");
const CHAT: (&str, &str) = ("x-llm-d-inference-objective", "chat");

/// `llm_d_epp_flow_control_revocations_issued_total` for priority 10 (the chat band).
fn issued_for_chat(m: &str) -> u64 {
    metric(
        m,
        "llm_d_epp_flow_control_revocations_issued_total{priority=\"10\"}",
    )
}

/// One simulator worker of 2 slots (concurrency detector) behind a router with
/// `enableEviction`, objectives chat=10 and batch=-1.
async fn eviction_fleet() -> (WorkerHandle, ServerHandle, String) {
    let flow = "  defaultRequestTTL: 30s\n  enableEviction: true\n";
    let (w, r) = fleet_with(&config(true, 2, flow), &["chat=10", "batch=-1"]).await;
    let u = url(&r);
    (w, r, u)
}

/// `enableEviction`: both engine slots held by sheddable streams, a higher-band request
/// queues; flow control evicts the newest sheddable stream (it ends with an `evicted` error
/// event, and the engine cancels it), the high request is served, the older stream finishes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eviction_ends_the_newest_sheddable_stream_for_a_higher_band() {
    let (w, r, u) = eviction_fleet().await;
    let five = Duration::from_secs(5);
    // Both streams have their response heads: an eviction now ends one with an SSE event.
    let older = hold_stream(&u, &[BATCH], body(0, 16, 150)).await;
    let newer = hold_stream(&u, &[BATCH], body(1000, 16, 4000)).await;
    assert_eq!(r.state.in_flight_total(), 2);
    let high = send(&u, &[CHAT], &body(5000, 16, 8)).await;
    assert_eq!(high.status, 200, "{high:?}");
    let (status, _, text) = newer.await.unwrap();
    assert_eq!(status, 200);
    assert!(
        text.contains("request evicted by flow control (evicted)"),
        "{text}"
    );
    assert!(text.contains("\"code\":429"), "{text}");
    assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
    let (status, _, text) = older.await.unwrap();
    assert_eq!(status, 200);
    assert!(
        !text.contains("evicted") && text.ends_with("data: [DONE]\n\n"),
        "{text}"
    );
    // The engine's side: the evicted request was cancelled there; the two others completed.
    wait_until(five, "engine cancelled the evicted one", || {
        w.stats().cancelled == 1
    })
    .await;
    assert_eq!(w.stats().completions, 2);
    let m = metrics(&u).await;
    assert_eq!(issued_for_chat(&m), 1, "{m}");
    assert_eq!(
        metric(
            &m,
            "llm_d_epp_flow_control_revocations_total{outcome=\"confirmed\"}"
        ),
        1,
        "{m}"
    );
    assert_eq!(r.state.in_flight_total(), 0);
}

/// Evicted before its answer began (a non-streamed request waits for the whole answer):
/// 429 `evicted`, as llm-d's ImmediateResponse; a non-sheddable request is never a victim.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_evicted_request_without_an_answer_yet_gets_429_evicted() {
    let (w, r, u) = eviction_fleet().await;
    let five = Duration::from_secs(5);
    // A default-band (priority 0) request and a sheddable one hold the two slots.
    let normal = hold(&r, 1, {
        let u = u.clone();
        async move { send(&u, &[], &body(0, 16, 150)).await }
    })
    .await;
    let shed = hold(&r, 2, {
        let u = u.clone();
        async move { send(&u, &[BATCH], &body(1000, 16, 4000)).await }
    })
    .await;
    let high = send(&u, &[CHAT], &body(5000, 16, 8)).await;
    assert_eq!(high.status, 200, "{high:?}");
    let shed = shed.await.unwrap();
    assert_eq!(shed.status, 429, "{shed:?}");
    assert_eq!(shed.header("x-llm-d-request-dropped-reason"), "evicted");
    assert_eq!(
        shed.body["error"]["message"], "request evicted by flow control (evicted)",
        "{shed:?}"
    );
    assert_eq!(normal.await.unwrap().status, 200);
    wait_until(five, "engine cancelled the evicted one", || {
        w.stats().cancelled == 1
    })
    .await;
    assert_eq!(w.stats().completions, 2);
    // Without a sheddable request in flight nothing is evicted: the high one waits its turn.
    let a = tokio::spawn({
        let u = u.clone();
        async move { send(&u, &[], &body(0, 16, 100)).await }
    });
    let b = hold(&r, 2, {
        let u = u.clone();
        async move { send(&u, &[], &body(2000, 16, 100)).await }
    })
    .await;
    assert_eq!(send(&u, &[CHAT], &body(6000, 16, 8)).await.status, 200);
    assert_eq!(
        (a.await.unwrap().status, b.await.unwrap().status),
        (200, 200)
    );
    assert_eq!(w.stats().cancelled, 1);
    let m = metrics(&u).await;
    assert_eq!(issued_for_chat(&m), 1, "{m}");
}

/// Regression (adversarial try): with the utilization detector (scraped gauges) one blocked
/// high request evicted 5 of 6 sheddable ones — the engine kept its evicted waiting
/// requests queued, and decisions read scrapes from before the abort. One eviction frees
/// enough here (4 waiting at threshold 4 → 3), so exactly one is evicted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scraped_gauges_lead_to_one_eviction_not_a_cascade() {
    let yaml = "apiVersion: llm-d.ai/v1
kind: EndpointPickerConfig
featureGates: [flowControl]
plugins:
- type: utilization-detector
  parameters: {queueDepthThreshold: 4}
- type: queue-scorer
- type: max-score-picker
flowControl:
  enableEviction: true
  saturationDetector: {pluginRef: utilization-detector}
  priorityBands: [{priority: 10, defaultRequestTTL: 8s}]
schedulingProfiles:
- name: default
  plugins: [{pluginRef: queue-scorer}, {pluginRef: max-score-picker}]
";
    let cfg = pdgate_sim::SimConfig {
        max_num_seqs: 2,
        ..sim_config(1.0)
    };
    let w = sim_worker(spec("w0", "decode", None), cfg).await;
    let objectives = Objectives::parse(&["hi=10".into(), "lo=-1".into()]).unwrap();
    let r = fleet::router_with(endpoints([&w]), yaml, |o| {
        o.objectives = objectives;
        // The gateway sets the flow headers (llm-d's behaviour): read them from every request.
        o.flow_headers_from = pdgate_core::flow_key::FlowHeadersFrom::Any;
    })
    .await
    .unwrap();
    let u = url(&r);
    let mut lows = Vec::new();
    for i in 0..6u32 {
        let u = u.clone();
        lows.push(tokio::spawn(async move {
            stream_with(
                &u,
                &[("x-llm-d-inference-objective", "lo")],
                body(i * 100, 16, 1200),
            )
            .await
        }));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    wait_until(
        Duration::from_secs(5),
        "6 booked, 4 waiting on the engine",
        || r.state.in_flight_total() == 6 && w.stats().waiting == 4,
    )
    .await;
    // Let the scraper see the 4 waiting.
    tokio::time::sleep(Duration::from_millis(600)).await;
    let high = tokio::spawn({
        let u = u.clone();
        async move {
            send(
                &u,
                &[("x-llm-d-inference-objective", "hi")],
                &body(5000, 16, 4),
            )
            .await
        }
    });
    // The high request leaves the queue soon after the one eviction (then waits its turn in
    // the engine's own queue, behind the sheddable requests already there).
    let t = Instant::now();
    while outcomes(&metrics(&u).await, "Dispatched", 10) == 0 {
        assert!(
            t.elapsed() < Duration::from_secs(2),
            "the high request stayed queued"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Long enough for a cascade to show: three more grace periods.
    tokio::time::sleep(Duration::from_millis(1600)).await;
    let m = metrics(&u).await;
    assert_eq!(issued_for_chat(&m), 1, "{m}");
    assert_eq!(w.stats().cancelled, 1, "{:?}", w.stats());
    high.abort();
    for l in lows {
        l.abort();
    }
}
