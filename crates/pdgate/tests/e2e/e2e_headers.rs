//! The phase-to-phase header contract in layout (b) (design.md §5.1, §5.3): the coordinator
//! captures `x-llm-d-disagg-revision` from every phase response — including the 412 of a
//! conditional-decode miss — and sends it on every later leg; and with real per-role routers
//! running the rollout screener, no request ever mixes revisions.

use crate::support;

use axum::response::IntoResponse;
use pdgate_scheduler::Endpoint;
use pdgate_server::app::PhaseRouters;
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use support::{
    endpoints, fake_engine, router, screened_config, send, sim_config, sim_workers, url,
    FakeEngine, Recorded,
};

fn prefill_reply(_: &Recorded) -> axum::response::Response {
    axum::Json(json!({"kv_transfer_params": {"remote_engine_id": "p", "remote_block_ids": [1]}}))
        .into_response()
}

/// The decode router: 412 on the probe, stamped `revision-b`; 200 otherwise.
fn decode_reply_with_revision(r: &Recorded) -> axum::response::Response {
    if r.headers.contains_key("prefer") {
        return (
            http::StatusCode::PRECONDITION_FAILED,
            [("x-llm-d-disagg-revision", "revision-b")],
            "{}",
        )
            .into_response();
    }
    axum::Json(json!({"choices": []})).into_response()
}

/// The same without stamping the 412.
fn decode_reply_without_revision(r: &Recorded) -> axum::response::Response {
    if r.headers.contains_key("prefer") {
        return (http::StatusCode::PRECONDITION_FAILED, "{}").into_response();
    }
    axum::Json(json!({"choices": []})).into_response()
}

/// A fake per-role router on `/v1/completions`, answering with `reply`.
async fn fake_router(
    reply: impl Fn(&Recorded) -> axum::response::Response + Send + Sync + 'static,
) -> FakeEngine {
    fake_engine("/v1/completions", reply).await
}

/// A coordinator with conditional decode in front of `prefill` and `decode` routers.
async fn coordinator(prefill: &str, decode: &str) -> pdgate_server::ServerHandle {
    support::coordinator(PhaseRouters::new(prefill, decode, true)).await
}

/// `(x-llm-d-epp-profile, prefer present, x-llm-d-disagg-revision)` of each recorded leg.
fn legs(router: &FakeEngine) -> Vec<(String, bool, Option<String>)> {
    router
        .requests()
        .iter()
        .map(|r| {
            (
                r.header("x-llm-d-epp-profile").unwrap_or_default(),
                r.headers.contains_key("prefer"),
                r.header("x-llm-d-disagg-revision"),
            )
        })
        .collect()
}

#[tokio::test]
async fn the_412s_revision_reaches_prefill_and_decode_and_a_bare_412_constrains_nothing() {
    let body = json!({"model": "m", "prompt": "hello", "max_tokens": 3});
    for (reply, want) in [
        (
            decode_reply_with_revision as fn(&Recorded) -> _,
            Some("revision-b".to_string()),
        ),
        (decode_reply_without_revision, None),
    ] {
        let p = fake_router(prefill_reply).await;
        let d = fake_router(reply).await;
        let c = coordinator(&p.addr, &d.addr).await;
        // A client's own copy is discarded: it must never reach a router.
        let forged = [("x-llm-d-disagg-revision", "forged")];
        let r = send(&url(&c), &forged, &body).await;
        assert_eq!(r.status, 200);
        assert_eq!(
            legs(&d),
            [
                ("decode".to_string(), true, None),
                ("decode".to_string(), false, want.clone()),
            ]
        );
        assert_eq!(legs(&p), [("prefill".to_string(), false, want)]);
        // Every leg carried the request's decision id, the same on all of them.
        let ids: Vec<_> = d
            .requests()
            .iter()
            .chain(p.requests().iter())
            .map(|r| r.headers["x-llm-d-revision-decision-id"].clone())
            .collect();
        assert_eq!(ids.len(), 3);
        assert!(ids.iter().all(|i| *i == ids[0]), "{ids:?}");
    }
}

/// A worker `{revision}-{role}-{i}` of the disaggregated set, labelled for the screener.
fn member(revision: &str, role: &str, i: usize) -> pdgate_sim::WorkerSpec {
    support::member(&format!("{revision}-{role}-{i}"), revision, role)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routers_with_the_rollout_screener_never_mix_revisions() {
    let specs: Vec<_> = ["a", "b"]
        .iter()
        .flat_map(|r| {
            [
                member(r, "prefill", 0),
                member(r, "decode", 0),
                member(r, "decode", 1),
            ]
        })
        .collect();
    let workers = sim_workers(specs, sim_config(50.0)).await;
    let endpoints = endpoints(&workers);
    let yaml = screened_config();
    let prefill_router = router(endpoints.clone(), &yaml).await;
    let decode_router = router(endpoints, &yaml).await;
    let c = coordinator(
        &prefill_router.addr.to_string(),
        &decode_router.addr.to_string(),
    )
    .await;
    let client = reqwest::Client::new();
    let mut by_revision: BTreeMap<String, usize> = BTreeMap::new();
    let mut modes: BTreeMap<String, usize> = BTreeMap::new();
    for i in 0..120u32 {
        // 12 prompts, each sent 10 times: misses (412 → split) and hits (served by decode).
        let prompt: Vec<u32> = (0..128).map(|t| t + 1000 * (i % 12)).collect();
        let r = client
            .post(format!("http://{}/v1/completions", c.addr))
            .json(&json!({"model": "pdgate-sim", "prompt": prompt, "max_tokens": 2}))
            .send()
            .await
            .unwrap();
        let h = |n: &str| {
            r.headers()
                .get(n)
                .map(|v| v.to_str().unwrap().to_string())
                .unwrap_or_default()
        };
        let (pre, dec, mode) = (
            h("x-pdgate-prefill-revision"),
            h("x-pdgate-decode-revision"),
            h("x-pdgate-pd-mode"),
        );
        assert_eq!(r.status(), 200, "{:?}", r.text().await);
        assert_eq!(pre, dec, "request {i} mixed revisions ({mode})");
        *by_revision.entry(dec).or_default() += 1;
        *modes.entry(mode).or_default() += 1;
    }
    println!("revisions {by_revision:?}, modes {modes:?}");
    assert_eq!(by_revision.keys().collect::<Vec<_>>(), ["a", "b"]);
    assert!(modes["split"] > 0 && modes["aggregated"] > 0, "{modes:?}");
    let mismatches: u64 = workers
        .iter()
        .map(|w| {
            let s = w.stats();
            s.handoff_rejections
                .get("revision_mismatch")
                .copied()
                .unwrap_or(0)
        })
        .sum();
    assert_eq!(mismatches, 0);
    assert_eq!(
        prefill_router.state.in_flight_total() + decode_router.state.in_flight_total(),
        0
    );
    // The screener's shares are exported: A{P1,D2} and B{P1,D2} → 0.5 each (max-role).
    let m = support::metrics(&support::url(&decode_router)).await;
    for rev in ["a", "b"] {
        assert!(
            m.contains(&format!("pdgate_revision_share{{revision=\"{rev}\"}} 0.5")),
            "{m}"
        );
    }
}

#[tokio::test]
async fn no_endpoint_snapshot_and_an_uncovered_strict_revision_are_503_with_a_reason() {
    let yaml = screened_config();
    let body = json!({"model": "m", "prompt": "hi", "max_tokens": 1});
    // No endpoints known yet (an empty list): fail closed.
    let empty = router(Vec::new(), &yaml).await;
    let r = send(&url(&empty), &[], &body).await;
    assert_eq!(r.status, 503);
    assert_eq!(r.body["error"]["message"], "no schedulable endpoints");
    // Revision a covered, b has no prefill: a strict header naming b → 503 naming it.
    let eps: Vec<Endpoint> = [("a", "prefill"), ("a", "decode"), ("b", "decode")]
        .iter()
        .enumerate()
        .map(|(i, (rev, role))| {
            let s = member(rev, role, i);
            Endpoint::new(s.name, format!("127.0.0.1:{}", 9 + i), s.labels)
        })
        .collect();
    let strict_router = router(eps, &yaml).await;
    let router = url(&strict_router);
    let strict = [
        ("x-llm-d-epp-profile", "decode"),
        ("x-llm-d-disagg-revision", "b"),
    ];
    let r = send(&router, &strict, &body).await;
    assert_eq!(r.status, 503);
    assert_eq!(
        r.body["error"]["message"],
        "strict revision `b` (header x-llm-d-disagg-revision) is not covered"
    );
    // Without a profile header the router is the client's coordinator: the client's own
    // copy is discarded, so the request is screened normally (then fails upstream: these
    // endpoints do not listen — what matters is that it was not refused as strict).
    let r = send(&router, &strict[1..], &body).await;
    assert_eq!(r.status, 502);
    assert_eq!(r.headers["x-pdgate-decode-revision"], "a");
}

/// A prefill router still on the old endpoint list: 503 once, then 200.
fn prefill_catching_up() -> impl Fn(&Recorded) -> axum::response::Response {
    let calls = AtomicUsize::new(0);
    move |r: &Recorded| {
        if calls.fetch_add(1, Ordering::SeqCst) == 0 {
            return (
                http::StatusCode::SERVICE_UNAVAILABLE,
                "{\"error\":{\"message\":\"strict revision `b` (header x-llm-d-disagg-revision) is not covered\",\"type\":\"service_unavailable\",\"code\":503}}",
            )
                .into_response();
        }
        prefill_reply(r)
    }
}

#[tokio::test]
async fn a_router_503_on_the_prefill_leg_is_sent_once_more_with_the_same_revision() {
    // Routers apply endpoint changes independently: right after a change the prefill router
    // may refuse the revision the decode router chose. The coordinator waits and resends.
    let p = fake_router(prefill_catching_up()).await;
    let d = fake_router(decode_reply_with_revision).await;
    let c = coordinator(&p.addr, &d.addr).await;
    let body = json!({"model": "m", "prompt": "hello", "max_tokens": 3});
    assert_eq!(send(&url(&c), &[], &body).await.status, 200);
    assert_eq!(
        legs(&p),
        [
            ("prefill".to_string(), false, Some("revision-b".to_string())),
            ("prefill".to_string(), false, Some("revision-b".to_string())),
        ]
    );
}
