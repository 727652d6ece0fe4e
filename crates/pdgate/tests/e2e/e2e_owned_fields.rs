//! Router-owned body fields (`kv_transfer_params`, `ec_transfer_params`) stay router-owned
//! (issue 10 item 1): a client's copies never reach an engine on any path, and the engines'
//! copies never reach the client. Simulator workers and fake engines on 127.0.0.1:0.

use crate::support;

use axum::response::IntoResponse;
use pdgate_scenario::fleet::{self, FleetSpec};
use pdgate_scheduler::DEFAULT_CONFIG_YAML;
use pdgate_server::app::PhaseRouters;
use serde_json::{json, Value};
use std::sync::atomic::Ordering;
use support::{coordinator, endpoints, fake_engine, metric, metrics, router, send, trap, url};

/// A completions body of `len` token ids from `first` that also carries the client's own
/// `kv_transfer_params` (a remote prefill to pull from `port`) and `ec_transfer_params`.
fn hostile(first: u32, len: u32, port: u16, extra: Value) -> Value {
    let mut b = support::body(first, len, 3);
    b["kv_transfer_params"] = json!({
        "do_remote_prefill": true, "do_remote_decode": false,
        "remote_engine_id": "evil", "remote_block_ids": [1, 2, 3],
        "remote_host": "127.0.0.1", "remote_port": port,
    });
    b["ec_transfer_params"] = json!([{"remote_host": "127.0.0.1", "remote_port": port}]);
    if let Value::Object(m) = extra {
        b.as_object_mut().unwrap().extend(m);
    }
    b
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clients_transfer_params_reach_no_engine_on_any_path() {
    let (port, hits) = trap().await;
    // 1 prefill + 2 decode simulators behind the built-in P/D router.
    // The fleet's router is also the prefill router of the coordinator path below: it
    // trusts callers on loopback (clients without a profile header stay clients).
    let mut spec = FleetSpec::new(1, 2, 50.0);
    spec.trust = support::loopback_trusted();
    let fleet = fleet::start(&spec, DEFAULT_CONFIG_YAML).await.unwrap();
    let direct = url(&fleet.router);
    let mut modes = Vec::new();
    // Split (a new 256-token prompt), then cached on its decode endpoint (aggregated),
    // `n: 2`, a short prompt (aggregated: too little to split), and a stream.
    for (first, len, extra) in [
        (0, 256, json!({})),
        (0, 256, json!({})),
        (5_000, 256, json!({"n": 2})),
        (9_000, 8, json!({})),
        (12_000, 256, json!({"stream": true})),
    ] {
        let body = hostile(first, len, port, extra);
        let r = if body["stream"] == true {
            let (status, mode, text) = support::stream_text(&direct, &body).await;
            assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
            assert!(!text.contains("transfer_params"), "{text}");
            (status, mode)
        } else {
            let r = send(&direct, &[], &body).await;
            assert!(
                !r.body.to_string().contains("transfer_params"),
                "{}",
                r.body
            );
            (r.status, r.served()[0].clone())
        };
        assert_eq!(r.0, 200, "{first} {len}");
        modes.push(r.1);
    }
    // Every path ran (`n > 1` never splits: it runs aggregated on the decode pick).
    assert_eq!(
        modes,
        ["split", "aggregated", "aggregated", "aggregated", "split"],
        "{modes:?}"
    );
    // The coordinator path (layout (b), conditional decode): the client's body reaches the
    // per-role routers without the fields — the decode probe and the split legs alike.
    let decode_router = router(endpoints(&fleet.workers), DEFAULT_CONFIG_YAML).await;
    fleet::wait_for_models(&decode_router).await;
    let coord = coordinator(PhaseRouters::new(
        &fleet.router.addr.to_string(),
        &decode_router.addr.to_string(),
        true,
    ))
    .await;
    for _ in 0..2 {
        let r = send(&url(&coord), &[], &hostile(20_000, 256, port, json!({}))).await;
        assert_eq!(r.status, 200, "{}", r.body);
        assert!(
            !r.body.to_string().contains("transfer_params"),
            "{}",
            r.body
        );
    }
    // The engines' side: no connection to the trap, no handoff the router did not plan
    // (every remote decode leg pulled from the prefill worker), no lease left behind.
    assert_eq!(
        hits.load(Ordering::SeqCst),
        0,
        "an engine connected to the trap"
    );
    let stats: Vec<_> = fleet.workers.iter().map(|w| w.stats()).collect();
    let decode_legs: u64 = stats.iter().map(|s| s.remote_decode_legs).sum();
    assert_eq!(decode_legs, stats[0].pulls_served, "{stats:?}");
    assert!(
        stats.iter().all(|s| s.handoff_rejections.is_empty()),
        "{stats:?}"
    );
    support::wait_until(std::time::Duration::from_secs(5), "leases released", || {
        fleet.workers.iter().all(|w| w.stats().leases == 0)
    })
    .await;
    // Counted where they were removed: 5 requests at the router, 2 at the coordinator.
    let m = metrics(&direct).await;
    for field in ["kv_transfer_params", "ec_transfer_params"] {
        let series = format!("pdgate_client_fields_dropped_total{{field=\"{field}\"}}");
        assert_eq!(metric(&m, &series), 5, "{series}");
        assert_eq!(metric(&metrics(&url(&coord)).await, &series), 2, "{series}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_cannot_make_a_prefill_engine_keep_a_lease() {
    let fleet = fleet::start(&FleetSpec::new(1, 1, 50.0), DEFAULT_CONFIG_YAML)
        .await
        .unwrap();
    // Short prompts run aggregated: the client's body goes to the engine as it is.
    for i in 0..20 {
        let mut b = support::body(i * 1_000, 8, 2);
        b["kv_transfer_params"] = json!({"do_remote_decode": true, "do_remote_prefill": false});
        let r = send(&url(&fleet.router), &[], &b).await;
        assert_eq!(r.status, 200, "{}", r.body);
    }
    // Given time to release what it would (a lease lives 480 s unless pulled), none is held.
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let leases: Vec<usize> = fleet.workers.iter().map(|w| w.stats().leases).collect();
    assert_eq!(leases, [0, 0]);
    let prefill_legs: u64 = fleet.workers.iter().map(|w| w.stats().prefill_legs).sum();
    assert_eq!(
        prefill_legs, 0,
        "no leg ran as a prefill for a remote decode"
    );
}

/// An engine that puts its own `kv_transfer_params` into every answer: whole JSON, and the
/// last chunk of a stream (as vLLM's NIXL connector does).
async fn leaky_engine() -> support::FakeEngine {
    fake_engine("/v1/completions", |r| {
        let kv = json!({"remote_host": "10.1.2.3", "remote_port": 5600, "remote_engine_id": "e1"});
        if r.json()["stream"] == true {
            let chunk = json!({"id": "c", "choices": [{"text": "ok"}], "kv_transfer_params": kv});
            let sse = format!(
                "data: {{\"id\":\"c\",\"choices\":[]}}\n\ndata: {chunk}\n\ndata: [DONE]\n\n"
            );
            ([("content-type", "text/event-stream")], sse).into_response()
        } else {
            axum::Json(json!({"id": "c", "choices": [{"text": "ok"}], "kv_transfer_params": kv}))
                .into_response()
        }
    })
    .await
}

#[tokio::test]
async fn an_engines_transfer_params_never_reach_the_client() {
    let engine = leaky_engine().await;
    let r = support::decode_router(&engine.addr).await;
    let body = json!({"model": "m", "prompt": "hi", "max_tokens": 2});
    let whole = send(&url(&r), &[], &body).await;
    assert_eq!(whole.status, 200);
    assert_eq!(whole.body, json!({"id": "c", "choices": [{"text": "ok"}]}));
    let streamed = json!({"model": "m", "prompt": "hi", "max_tokens": 2, "stream": true});
    let (status, _, text) = support::stream_text(&url(&r), &streamed).await;
    assert_eq!(status, 200);
    assert_eq!(
        text,
        "data: {\"id\":\"c\",\"choices\":[]}\n\ndata: {\"choices\":[{\"text\":\"ok\"}],\"id\":\"c\"}\n\ndata: [DONE]\n\n"
    );
    // A coordinator's leg (profile header) is the contract: the field is its to read.
    let leg = send(&url(&r), &[("x-llm-d-epp-profile", "decode")], &body).await;
    assert_eq!(leg.status, 200);
    assert_eq!(leg.body["kv_transfer_params"]["remote_host"], "10.1.2.3");
}

#[tokio::test]
async fn sse_with_cr_line_ends_loses_the_field_and_keeps_its_separators() {
    let engine = fake_engine("/v1/completions", |_| {
        let sse = "data: {\"id\":\"c\",\"kv_transfer_params\":{\"remote_host\":\"10.1.2.3\"}}\r\rdata: [DONE]\r\r";
        ([("content-type", "text/event-stream")], sse).into_response()
    })
    .await;
    let r = support::decode_router(&engine.addr).await;
    let streamed = json!({"model": "m", "prompt": "hi", "stream": true});
    let (status, _, text) = support::stream_text(&url(&r), &streamed).await;
    assert_eq!(status, 200);
    assert_eq!(text, "data: {\"id\":\"c\"}\r\rdata: [DONE]\r\r");
}
