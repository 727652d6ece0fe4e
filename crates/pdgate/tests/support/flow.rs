//! Flow-control test helpers (`e2e_flow_control`, `e2e_flow_eviction`): an
//! EndpointPickerConfig with the concurrency detector, a one-worker fleet with objectives,
//! and readers of the flow-control metrics.

use super::*;
use pdgate_core::flow_control::Objectives;
use pdgate_scenario::fleet;
use pdgate_server::ServerHandle;
use pdgate_sim::WorkerHandle;
use std::time::Duration;

/// A config with the `concurrency-detector` at `max_concurrency` (also the flow-control
/// detector), the `flowControl` section text `flow`, and the gate on when `gate`.
pub fn config(gate: bool, max_concurrency: u32, flow: &str) -> String {
    format!(
        "apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
{gates}plugins:
- type: concurrency-detector
  parameters: {{maxConcurrency: {max_concurrency}}}
- type: queue-scorer
- type: max-score-picker
flowControl:
  saturationDetector: {{pluginRef: concurrency-detector}}
{flow}schedulingProfiles:
- name: default
  plugins: [{{pluginRef: queue-scorer}}, {{pluginRef: max-score-picker}}]
",
        gates = if gate {
            "featureGates: [flowControl]\n"
        } else {
            ""
        },
    )
}

/// One simulator worker (`decode`, speedup 1) behind a router with `yaml` and
/// `--inference-objective` entries `objectives`.
pub async fn fleet_with(yaml: &str, objectives: &[&str]) -> (WorkerHandle, ServerHandle) {
    let w = sim_worker(spec("w0", "decode", None), sim_config(1.0)).await;
    let objectives =
        Objectives::parse(&objectives.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap();
    let r = fleet::router_with(endpoints([&w]), yaml, |o| {
        o.objectives = objectives;
        // The gateway sets the flow headers (llm-d's behaviour): read them from every request.
        o.flow_headers_from = pdgate_core::flow_key::FlowHeadersFrom::Any;
    })
    .await
    .unwrap();
    (w, r)
}

/// `llm_d_epp_flow_control_requests_total{outcome, priority}` in `m`.
pub fn outcomes(m: &str, outcome: &str, priority: i32) -> u64 {
    metric(
        m,
        &format!(
            "llm_d_epp_flow_control_requests_total{{outcome=\"{outcome}\",priority=\"{priority}\"}}"
        ),
    )
}

/// A streamed completion with `headers`: the status, the dropped-reason header, the text.
pub async fn stream_with(
    u: &str,
    headers: &[(&str, &str)],
    mut b: serde_json::Value,
) -> (u16, String, String) {
    b["stream"] = true.into();
    stream_read(u, headers, &b, "x-llm-d-request-dropped-reason").await
}

/// Spawns a streamed completion with `headers` (as [`stream_with`]) and returns once its
/// response head has reached the client, so that the stream is running from the client's
/// side too; the handle yields the status, the dropped-reason header and the whole text.
///
/// Waiting for the router's booking alone is not enough where the test needs the stream to
/// have begun: between the booking and the head, an eviction is a 429, not an SSE event.
pub async fn hold_stream(
    u: &str,
    headers: &[(&str, &str)],
    mut b: serde_json::Value,
) -> tokio::task::JoinHandle<(u16, String, String)> {
    b["stream"] = true.into();
    let mut req = reqwest::Client::new()
        .post(format!("{u}/v1/completions"))
        .json(&b);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let (head_tx, head_rx) = tokio::sync::oneshot::channel();
    let h = tokio::spawn(async move {
        let resp = req.send().await.unwrap();
        let _ = head_tx.send(());
        let status = resp.status().as_u16();
        let reason = resp
            .headers()
            .get("x-llm-d-request-dropped-reason")
            .map(|v| v.to_str().unwrap().to_string())
            .unwrap_or_default();
        (status, reason, resp.text().await.unwrap())
    });
    tokio::time::timeout(Duration::from_secs(5), head_rx)
        .await
        .expect("the stream's response head within 5 s")
        .expect("the stream task ended before its head");
    h
}

/// Spawns `req` and waits until the router has `n` requests booked (it is then running).
pub async fn hold<T: Send + 'static>(
    r: &ServerHandle,
    n: u32,
    req: impl std::future::Future<Output = T> + Send + 'static,
) -> tokio::task::JoinHandle<T> {
    let h = tokio::spawn(req);
    wait_until(Duration::from_secs(5), "a request booked", || {
        r.state.in_flight_total() == n
    })
    .await;
    h
}
