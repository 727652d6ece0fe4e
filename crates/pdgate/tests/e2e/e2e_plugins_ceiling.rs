//! Priority-aware usage-limit policies end to end (`priority-holdback-policy`,
//! `soft-reflective-ceiling-policy`) against one simulator worker under the
//! `concurrency-detector` at `maxConcurrency: 2` (one request in flight = saturation 0.5).
//! Bands: chat (10), default (0), batch (−1).

use crate::support;

use pdgate_server::ServerHandle;
use std::time::Duration;
use support::flow::*;
use support::*;

/// A config with the concurrency detector at 2 and the usage-limit `policy` (a `plugins:`
/// entry named `limit`).
fn config(policy: &str) -> String {
    format!(
        "apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
featureGates: [flowControl]
plugins:
- type: concurrency-detector
  parameters: {{maxConcurrency: 2}}
- name: limit
{policy}- type: queue-scorer
- type: max-score-picker
flowControl:
  saturationDetector: {{pluginRef: concurrency-detector}}
  usageLimitPolicyPluginRef: limit
  defaultRequestTTL: 30s
schedulingProfiles:
- name: default
  plugins: [{{pluginRef: queue-scorer}}, {{pluginRef: max-score-picker}}]
"
    )
}

/// Spawns a request of objective `objective` (prompt ids from `first`).
fn spawn(
    r: &ServerHandle,
    objective: &'static str,
    first: u32,
    max_tokens: u32,
) -> tokio::task::JoinHandle<Reply> {
    let u = url(r);
    tokio::spawn(async move {
        send(
            &u,
            &[("x-llm-d-inference-objective", objective)],
            &body(first, 16, max_tokens),
        )
        .await
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holdback_keeps_batch_queued_at_its_ceiling_while_chat_goes_through() {
    // Rank ceilings over 3 bands from 1.0 to 0.5: chat 1.0, default 0.75, batch 0.5.
    let yaml = config("  type: priority-holdback-policy\n  parameters: {minCeiling: 0.5}\n");
    let (_w, r) = fleet_with(&yaml, &["chat=10", "batch=-1"]).await;
    // One default request runs: saturation 0.5.
    let first = hold(&r, 1, {
        let u = url(&r);
        async move { send(&u, &[], &body(0, 16, 40)).await }
    })
    .await;
    // A batch request is held (0.5 ≥ its ceiling 0.5) though the engine has a free slot.
    let batch = spawn(&r, "batch", 1000, 4);
    wait_until(Duration::from_secs(5), "batch queued", || {
        r.state.flow.queued() == 1
    })
    .await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!((r.state.flow.queued(), r.state.in_flight_total()), (1, 1));
    // A chat request (ceiling 1.0) goes through at 0.5 and ends while batch still waits.
    let chat = spawn(&r, "chat", 5000, 4).await.unwrap();
    assert_eq!(chat.status, 200);
    assert_eq!(r.state.flow.queued(), 1, "batch still held");
    // Once the first request ends (saturation 0), batch is dispatched.
    assert_eq!(first.await.unwrap().status, 200);
    assert_eq!(batch.await.unwrap().status, 200);
    let m = metrics(&url(&r)).await;
    assert_eq!(
        (
            outcomes(&m, "Dispatched", 10),
            outcomes(&m, "Dispatched", -1)
        ),
        (1, 1),
        "{m}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn soft_reflective_ceiling_opens_lower_bands_at_half_load_and_holds_all_at_full_load() {
    let yaml = config("  type: soft-reflective-ceiling-policy\n");
    let (_w, r) = fleet_with(&yaml, &["chat=10", "batch=-1"]).await;
    let first = hold(&r, 1, {
        let u = url(&r);
        async move { send(&u, &[], &body(0, 16, 40)).await }
    })
    .await;
    // Saturation 0.5 over 3 bands: batch's reflective ceiling 1 − 0.5 = 0.5 is reached, but
    // the period round(0.5 / 0.5) = 1 keeps it open: dispatched at once.
    let batch = spawn(&r, "batch", 1000, 40);
    wait_until(Duration::from_secs(5), "batch running", || {
        r.state.in_flight_total() == 2
    })
    .await;
    assert_eq!(r.state.flow.queued(), 0);
    // Saturation 1.0: even chat waits until a slot frees.
    let chat = spawn(&r, "chat", 5000, 4);
    wait_until(Duration::from_secs(5), "chat queued", || {
        r.state.flow.queued() == 1
    })
    .await;
    assert_eq!(r.state.in_flight_total(), 2);
    assert_eq!(chat.await.unwrap().status, 200);
    assert_eq!(first.await.unwrap().status, 200);
    assert_eq!(batch.await.unwrap().status, 200);
}
