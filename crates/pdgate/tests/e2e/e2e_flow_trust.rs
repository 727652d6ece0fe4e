//! Flow-control identity from a trusted source only (issue 26 item 3): a client's objective
//! (priority) and fairness-id headers change nothing unless the caller passed the trust
//! boundary (`--trusted-coordinator-networks`) or the router is told a gateway sets them
//! (`--flow-headers-from any`). The order is the engine's: with one slot
//! (`maxConcurrency: 1`), requests finish in the order flow control dispatched them.

use crate::support;

use pdgate_core::flow_control::Objectives;
use pdgate_core::flow_key::FlowHeadersFrom;
use pdgate_core::trust::{parse_networks, TrustedCallers};
use pdgate_scenario::fleet;
use pdgate_server::ServerHandle;
use pdgate_sim::WorkerHandle;
use std::time::{Duration, Instant};
use support::flow::*;
use support::*;

/// A one-slot router over one simulator worker, objectives chat=10 and batch=-1, flow
/// headers honoured from `from`, loopback trusted when `trust_loopback`.
async fn one_slot(from: FlowHeadersFrom, trust_loopback: bool) -> (WorkerHandle, ServerHandle) {
    let yaml = config(true, 1, "  defaultRequestTTL: 30s\n");
    let w = sim_worker(spec("w0", "decode", None), sim_config(1.0)).await;
    let objectives = Objectives::parse(&["chat=10".into(), "batch=-1".into()]).unwrap();
    let networks = match trust_loopback {
        true => parse_networks(&["127.0.0.0/8".into()]).unwrap(),
        false => Vec::new(),
    };
    let r = fleet::router_with(endpoints([&w]), &yaml, |o| {
        o.objectives = objectives;
        o.flow_headers_from = from;
        o.trust = TrustedCallers::new(networks, None).unwrap();
    })
    .await
    .unwrap();
    (w, r)
}

/// The flood: one request occupies the slot, three default-priority requests of a patient
/// client queue, then a flooder's request claims the `chat` objective (priority 10) and a
/// fairness id of its own. Returns the flooder's finish position among the four queued
/// requests (0 = first), and the router's metrics text.
async fn flooder_position(r: &ServerHandle) -> (usize, String) {
    let u = url(r);
    let first = hold(r, 1, {
        let u = u.clone();
        async move { send(&u, &[], &body(0, 16, 40)).await }
    })
    .await;
    let t0 = Instant::now();
    let mut patient = Vec::new();
    for i in 0..3 {
        let u = u.clone();
        patient.push(tokio::spawn(async move {
            let r = send(&u, &[], &body(1000 + i * 100, 16, 40)).await;
            (r.status, t0.elapsed())
        }));
    }
    wait_until(Duration::from_secs(5), "patient requests queued", || {
        r.state.flow.queued() == 3
    })
    .await;
    let flooder = send(
        &u,
        &[
            ("x-llm-d-inference-objective", "chat"),
            ("x-llm-d-inference-fairness-id", "flooder-7f3a"),
        ],
        &body(5000, 16, 40),
    )
    .await;
    let flooder_at = t0.elapsed();
    assert_eq!(flooder.status, 200, "{flooder:?}");
    assert_eq!(first.await.unwrap().status, 200);
    let mut before = 0;
    for p in patient {
        let (status, at) = p.await.unwrap();
        assert_eq!(status, 200);
        if at < flooder_at {
            before += 1;
        }
    }
    (before, metrics(&u).await)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_untrusted_clients_objective_and_fairness_headers_change_nothing() {
    let (w, r) = one_slot(FlowHeadersFrom::Trusted, false).await;
    let (position, m) = flooder_position(&r).await;
    // FIFO: the flooder's "chat" claim did not jump the three patient requests.
    assert_eq!(position, 3, "{m}");
    // Every request ran in the default band (priority 0), none in the chat band.
    assert_eq!(outcomes(&m, "Dispatched", 0), 5, "{m}");
    assert_eq!(outcomes(&m, "Dispatched", 10), 0, "{m}");
    // The ignored headers are counted by name.
    let dropped = |h: &str| {
        metric(
            &m,
            &format!("pdgate_untrusted_headers_dropped_total{{header=\"{h}\"}}"),
        )
    };
    assert_eq!(dropped("x-llm-d-inference-objective"), 1, "{m}");
    assert_eq!(dropped("x-llm-d-inference-fairness-id"), 1, "{m}");
    // The engine ran all five, one at a time.
    assert_eq!(w.stats().completions, 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trusted_callers_objective_goes_first() {
    let (_w, r) = one_slot(FlowHeadersFrom::Trusted, true).await;
    let (position, m) = flooder_position(&r).await;
    assert_eq!(position, 0, "{m}");
    assert_eq!(outcomes(&m, "Dispatched", 10), 1, "{m}");
    assert_eq!(outcomes(&m, "Dispatched", 0), 4, "{m}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_a_gateway_flow_headers_from_any_reads_them_from_every_request() {
    let (_w, r) = one_slot(FlowHeadersFrom::Any, false).await;
    let (position, m) = flooder_position(&r).await;
    assert_eq!(position, 0, "{m}");
    assert_eq!(outcomes(&m, "Dispatched", 10), 1, "{m}");
}
