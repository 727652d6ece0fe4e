//! Both fronts over one core (issue 26): the hostile cases that `serve` held and `pdgate
//! epp` did not, run against the EPP through the stand-in Envoy (real ext_proc types) with
//! simulator workers on loopback, and the same request fed through both fronts.

use crate::support;

use axum::response::IntoResponse;
use pdgate_scheduler::DEFAULT_CONFIG_YAML;
use serde_json::{json, Value};
use std::sync::atomic::Ordering;
use support::envoy::{self, completion};
use support::{metric, send, trap, url};

/// A completion of 64 token ids from `first` carrying the client's own
/// `kv_transfer_params`: a remote prefill to pull from `port`, and a lease to keep.
fn hostile(first: u32, port: u16) -> Value {
    let mut b = completion(first, 64, false);
    b["kv_transfer_params"] = json!({
        "do_remote_prefill": true, "do_remote_decode": true,
        "remote_engine_id": "evil", "remote_block_ids": [1, 2, 3],
        "remote_host": "127.0.0.1", "remote_port": port,
    });
    b
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_the_epp_a_clients_kv_transfer_params_reach_no_engine() {
    let (port, hits) = trap().await;
    let (workers, epp) = envoy::aggregated(2).await;
    // 17 requests: the 17th hung before (16 leaked leases filled the engine's KV cache).
    for i in 0..17 {
        let body = serde_json::to_vec(&hostile(i * 1_000, port)).unwrap();
        let mut s = epp.stream().await;
        let routing = s
            .request(
                "/v1/completions",
                &[("content-type", "application/json")],
                &body,
                4096,
                None,
            )
            .await;
        assert_eq!(routing.immediate, None, "{routing:?}");
        // What Envoy forwards is the cleaned body.
        let forwarded: Value = serde_json::from_slice(&routing.body()).unwrap();
        assert!(forwarded.get("kv_transfer_params").is_none(), "{forwarded}");
        let mut expected = hostile(i * 1_000, port);
        expected
            .as_object_mut()
            .unwrap()
            .remove("kv_transfer_params");
        assert_eq!(forwarded, expected);
        let up = tokio::time::timeout(
            std::time::Duration::from_secs(10),
            s.call_destination(&routing, "/v1/completions", &[], None),
        )
        .await
        .expect("request answered within 10 s");
        assert_eq!(up.status, 200, "{}", String::from_utf8_lossy(&up.body));
    }
    assert_eq!(
        hits.load(Ordering::SeqCst),
        0,
        "an engine connected to the trap"
    );
    support::wait_until(std::time::Duration::from_secs(5), "leases released", || {
        workers.iter().all(|w| w.stats().leases == 0)
    })
    .await;
    let prefill_legs: u64 = workers.iter().map(|w| w.stats().prefill_legs).sum();
    assert_eq!(
        prefill_legs, 0,
        "no leg ran as a prefill for a remote decode"
    );
    let remote_decode: u64 = workers.iter().map(|w| w.stats().remote_decode_legs).sum();
    assert_eq!(
        remote_decode, 0,
        "no leg pulled KV from a client-chosen address"
    );
    let m = String::from_utf8(epp.epp.metrics.render()).unwrap();
    assert_eq!(
        metric(
            &m,
            "pdgate_client_fields_dropped_total{field=\"kv_transfer_params\"}"
        ),
        17,
        "{m}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_request_through_both_fronts_gets_the_same_cleaned_body_and_pick() {
    // One recording engine behind each front.
    let reply = |_: &support::Recorded| {
        axum::Json(json!({"id": "c", "choices": [{"text": "ok"}]})).into_response()
    };
    let engine = support::fake_engine("/v1/completions", reply).await;
    let role = std::collections::BTreeMap::from([(
        pdgate_api::labels::ROLE.to_string(),
        "decode".to_string(),
    )]);
    // serve as a front door: nobody is trusted (the EPP has no trusted callers either).
    let serve = pdgate_scenario::fleet::router_with(
        vec![pdgate_scheduler::Endpoint::new(
            "d0",
            &engine.addr,
            role.clone(),
        )],
        DEFAULT_CONFIG_YAML,
        |_| {},
    )
    .await
    .unwrap();
    let epp = envoy::epp(
        vec![pdgate_scheduler::Endpoint::new("d0", &engine.addr, role)],
        DEFAULT_CONFIG_YAML,
    )
    .await;
    support::wait_until(std::time::Duration::from_secs(5), "epp ready", || {
        epp.epp.ready()
    })
    .await;
    let mut body = json!({"model": "m", "prompt": "hello", "max_tokens": 2, "user": "u1"});
    body["kv_transfer_params"] = json!({"do_remote_prefill": true, "remote_host": "127.0.0.1"});
    body["ec_transfer_params"] = json!([{"remote_host": "127.0.0.1"}]);
    // Router-owned and forwarded headers a client must not choose, and a session.
    let headers = [
        ("content-type", "application/json"),
        ("x-llm-d-disagg-revision", "v-evil"),
        ("x-llm-d-epp-profile", "prefill"),
        ("x-session-id", "s-1"),
        ("x-llm-d-inference-objective", "chat"),
        ("x-llm-d-inference-fairness-id", "flooder"),
    ];
    let bytes = serde_json::to_vec(&body).unwrap();
    let r = send(&url(&serve), &headers[1..], &body).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let mut s = epp.stream().await;
    let routing = s
        .request("/v1/completions", &headers, &bytes, 65_536, None)
        .await;
    assert_eq!(routing.immediate, None, "{routing:?}");
    // serve's leg as the engine got it, and the body the EPP hands Envoy: the same cleaned
    // JSON (the client's router-owned fields gone from both).
    let seen = engine.requests();
    assert_eq!(seen.len(), 1);
    let through_serve: Value = serde_json::from_slice(&seen[0].body).unwrap();
    let through_epp: Value = serde_json::from_slice(&routing.body()).unwrap();
    let mut expected = body.clone();
    expected
        .as_object_mut()
        .unwrap()
        .remove("kv_transfer_params");
    expected
        .as_object_mut()
        .unwrap()
        .remove("ec_transfer_params");
    assert_eq!(through_epp, expected);
    assert_eq!(through_serve, expected);
    // The same pick; the profile header from an untrusted caller was ignored by both (a
    // "prefill" profile would have been a prefill-only leg).
    assert_eq!(routing.destination(), engine.addr);
    // Both counted the same dropped fields and ignored headers.
    let serve_m = support::metrics(&url(&serve)).await;
    let epp_m = String::from_utf8(epp.epp.metrics.render()).unwrap();
    for series in [
        "pdgate_client_fields_dropped_total{field=\"kv_transfer_params\"}",
        "pdgate_client_fields_dropped_total{field=\"ec_transfer_params\"}",
        // Coordinator headers and flow identity from an untrusted caller: ignored and
        // counted by both.
        "pdgate_untrusted_headers_dropped_total{header=\"x-llm-d-epp-profile\"}",
        "pdgate_untrusted_headers_dropped_total{header=\"x-llm-d-disagg-revision\"}",
        "pdgate_untrusted_headers_dropped_total{header=\"x-llm-d-inference-objective\"}",
        "pdgate_untrusted_headers_dropped_total{header=\"x-llm-d-inference-fairness-id\"}",
    ] {
        assert_eq!(metric(&serve_m, series), 1, "serve {series}");
        assert_eq!(metric(&epp_m, series), 1, "epp {series}");
    }
    // Both bound the session to the one endpoint.
    let now = tokio::time::Instant::now();
    assert_eq!(
        serve
            .state
            .sessions
            .lookup("s-1", now)
            .and_then(|b| b.decode),
        Some("d0".to_string())
    );
    assert_eq!(
        epp.epp.sessions.lookup("s-1", now).and_then(|b| b.decode),
        Some("d0".to_string())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_path_the_epp_does_not_parse_cannot_carry_kv_transfer_params() {
    // Found by the adversarial try: uvicorn percent-decodes `/v1/%63ompletions` into
    // `/v1/completions`, a path the EPP does not parse, so its body was passed on uncleaned.
    let (port, hits) = trap().await;
    let (_workers, epp) = envoy::aggregated(1).await;
    let body = serde_json::to_vec(&hostile(0, port)).unwrap();
    for path in [
        "/v1/%63ompletions",
        "//v1/completions",
        "/v1/completions;a=b",
    ] {
        let mut s = epp.stream().await;
        let routing = s.request(path, &[], &body, 4096, None).await;
        assert_eq!(routing.immediate, Some(404), "{path}: {routing:?}");
    }
    // A body without one still goes to a random endpoint, unchanged.
    let plain = serde_json::to_vec(&completion(0, 8, false)).unwrap();
    let mut s = epp.stream().await;
    let routing = s
        .request("/v1/%63ompletions", &[], &plain, 4096, None)
        .await;
    assert_eq!(routing.immediate, None);
    assert_eq!(routing.body(), plain);
    assert_eq!(hits.load(Ordering::SeqCst), 0);
    let m = String::from_utf8(epp.epp.metrics.render()).unwrap();
    assert_eq!(
        metric(
            &m,
            "pdgate_client_fields_dropped_total{field=\"kv_transfer_params\"}"
        ),
        3,
        "{m}"
    );
}
