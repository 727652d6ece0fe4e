//! The phase-to-phase header contract in layout (b) (design.md §5.1, §5.3): the coordinator
//! captures `x-llm-d-disagg-revision` from every phase response — including the 412 of a
//! conditional-decode miss — and sends it on every later leg; and with real per-role routers
//! running the rollout screener, no request ever mixes revisions.

use axum::extract::State;
use axum::response::IntoResponse;
use axum::routing::post;
use bytes::Bytes;
use http::HeaderMap;
use pdgate_scenario::fleet;
use pdgate_scheduler::{Endpoint, DEFAULT_CONFIG_YAML};
use pdgate_server::app::PhaseRouters;
use pdgate_sim::{spawn_fleet, SimConfig, WorkerSpec};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// Headers of every request a fake router received.
type Seen = Arc<Mutex<Vec<HeaderMap>>>;

/// A fake per-role router: records each request's headers and answers with `reply(headers)`.
async fn fake_router(reply: fn(&HeaderMap) -> axum::response::Response) -> (String, Seen) {
    let seen: Seen = Arc::default();
    let app = axum::Router::new()
        .route(
            "/v1/completions",
            post(
                move |State(seen): State<Seen>, h: HeaderMap, _b: Bytes| async move {
                    let r = reply(&h);
                    seen.lock().unwrap().push(h);
                    r
                },
            ),
        )
        .with_state(seen.clone());
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap().to_string();
    tokio::spawn(async move { axum::serve(l, app).await.unwrap() });
    (addr, seen)
}

fn prefill_reply(_: &HeaderMap) -> axum::response::Response {
    axum::Json(json!({"kv_transfer_params": {"remote_engine_id": "p", "remote_block_ids": [1]}}))
        .into_response()
}

/// The decode router: 412 on the probe, stamped `revision-b`; 200 otherwise.
fn decode_reply_with_revision(h: &HeaderMap) -> axum::response::Response {
    if h.contains_key("prefer") {
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
fn decode_reply_without_revision(h: &HeaderMap) -> axum::response::Response {
    if h.contains_key("prefer") {
        return (http::StatusCode::PRECONDITION_FAILED, "{}").into_response();
    }
    axum::Json(json!({"choices": []})).into_response()
}

async fn coordinator(prefill: &str, decode: &str) -> pdgate_server::ServerHandle {
    let routers = PhaseRouters::new(prefill, decode, true);
    fleet::router_with(Vec::new(), DEFAULT_CONFIG_YAML, |o| {
        o.routers = Some(routers)
    })
    .await
    .unwrap()
}

/// `(x-llm-d-epp-profile, prefer present, x-llm-d-disagg-revision)` of each recorded leg.
fn legs(seen: &Seen) -> Vec<(String, bool, Option<String>)> {
    let s = |h: &HeaderMap, n: &str| h.get(n).map(|v| v.to_str().unwrap().to_string());
    seen.lock()
        .unwrap()
        .iter()
        .map(|h| {
            (
                s(h, "x-llm-d-epp-profile").unwrap_or_default(),
                h.contains_key("prefer"),
                s(h, "x-llm-d-disagg-revision"),
            )
        })
        .collect()
}

#[tokio::test]
async fn the_412s_revision_reaches_prefill_and_decode_and_a_bare_412_constrains_nothing() {
    let body = json!({"model": "m", "prompt": "hello", "max_tokens": 3});
    for (reply, want) in [
        (
            decode_reply_with_revision as fn(&HeaderMap) -> _,
            Some("revision-b".to_string()),
        ),
        (decode_reply_without_revision, None),
    ] {
        let (p_addr, p_seen) = fake_router(prefill_reply).await;
        let (d_addr, d_seen) = fake_router(reply).await;
        let c = coordinator(&p_addr, &d_addr).await;
        let r = reqwest::Client::new()
            .post(format!("http://{}/v1/completions", c.addr))
            // A client's own copy is discarded: it must never reach a router.
            .header("x-llm-d-disagg-revision", "forged")
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        assert_eq!(
            legs(&d_seen),
            [
                ("decode".to_string(), true, None),
                ("decode".to_string(), false, want.clone()),
            ]
        );
        assert_eq!(legs(&p_seen), [("prefill".to_string(), false, want)]);
        // Every leg carried the request's decision id, the same on all of them.
        let ids: Vec<_> = d_seen
            .lock()
            .unwrap()
            .iter()
            .chain(p_seen.lock().unwrap().iter())
            .map(|h| h["x-llm-d-revision-decision-id"].clone())
            .collect();
        assert_eq!(ids.len(), 3);
        assert!(ids.iter().all(|i| *i == ids[0]), "{ids:?}");
    }
}

const SCREENER: &str = "- type: disaggregatedset-rollout-screener\n";

/// A worker of `revision` in role `role`, labelled for the rollout screener.
fn member(revision: &str, role: &str, i: usize) -> WorkerSpec {
    let labels = BTreeMap::from([
        ("llm-d.ai/role".to_string(), role.to_string()),
        (
            "disaggregatedset.x-k8s.io/role".to_string(),
            role.to_string(),
        ),
        (
            "disaggregatedset.x-k8s.io/revision".to_string(),
            revision.to_string(),
        ),
    ]);
    WorkerSpec {
        name: format!("{revision}-{role}-{i}"),
        role: role.to_string(),
        revision: Some(revision.to_string()),
        labels,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routers_with_the_rollout_screener_never_mix_revisions() {
    let specs: Vec<WorkerSpec> = ["a", "b"]
        .iter()
        .flat_map(|r| {
            [
                member(r, "prefill", 0),
                member(r, "decode", 0),
                member(r, "decode", 1),
            ]
        })
        .collect();
    let sim = SimConfig {
        speedup: 50.0,
        ..SimConfig::default()
    };
    let workers = spawn_fleet(specs.clone(), sim, "127.0.0.1", 0)
        .await
        .unwrap();
    let endpoints: Vec<Endpoint> = specs
        .iter()
        .zip(&workers)
        .map(|(s, w)| Endpoint::new(s.name.clone(), w.addr().to_string(), s.labels.clone()))
        .collect();
    let yaml = DEFAULT_CONFIG_YAML.replacen("\nplugins:\n", &format!("\nplugins:\n{SCREENER}"), 1);
    let prefill_router = fleet::router_with(endpoints.clone(), &yaml, |_| {})
        .await
        .unwrap();
    let decode_router = fleet::router_with(endpoints, &yaml, |_| {}).await.unwrap();
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
    let m = reqwest::get(format!("http://{}/metrics", decode_router.addr))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for rev in ["a", "b"] {
        assert!(
            m.contains(&format!("pdgate_revision_share{{revision=\"{rev}\"}} 0.5")),
            "{m}"
        );
    }
}

#[tokio::test]
async fn no_endpoint_snapshot_and_an_uncovered_strict_revision_are_503_with_a_reason() {
    let yaml = DEFAULT_CONFIG_YAML.replacen("\nplugins:\n", &format!("\nplugins:\n{SCREENER}"), 1);
    let client = reqwest::Client::new();
    let body = json!({"model": "m", "prompt": "hi", "max_tokens": 1});
    // No endpoints known yet (an empty list): fail closed.
    let empty = fleet::router_with(Vec::new(), &yaml, |_| {}).await.unwrap();
    let r = client
        .post(format!("http://{}/v1/completions", empty.addr))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 503);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["message"], "no schedulable endpoints");
    // Revision a covered, b has no prefill: a strict header naming b → 503 naming it.
    let eps: Vec<Endpoint> = [("a", "prefill"), ("a", "decode"), ("b", "decode")]
        .iter()
        .enumerate()
        .map(|(i, (rev, role))| {
            let s = member(rev, role, i);
            Endpoint::new(s.name, format!("127.0.0.1:{}", 9 + i), s.labels)
        })
        .collect();
    let router = fleet::router_with(eps, &yaml, |_| {}).await.unwrap();
    let r = client
        .post(format!("http://{}/v1/completions", router.addr))
        .header("x-llm-d-epp-profile", "decode")
        .header("x-llm-d-disagg-revision", "b")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 503);
    let v: Value = r.json().await.unwrap();
    assert_eq!(
        v["error"]["message"],
        "strict revision `b` (header x-llm-d-disagg-revision) is not covered"
    );
    // Without a profile header the router is the client's coordinator: the client's own
    // copy is discarded, so the request is screened normally (then fails upstream: these
    // endpoints do not listen — what matters is that it was not refused as strict).
    let r = client
        .post(format!("http://{}/v1/completions", router.addr))
        .header("x-llm-d-disagg-revision", "b")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 502);
    assert_eq!(r.headers()["x-pdgate-decode-revision"], "a");
}

static PREFILL_CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// A prefill router still on the old endpoint list: 503 once, then 200.
fn prefill_catching_up(h: &HeaderMap) -> axum::response::Response {
    if PREFILL_CALLS.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0 {
        return (
            http::StatusCode::SERVICE_UNAVAILABLE,
            "{\"error\":{\"message\":\"strict revision `b` (header x-llm-d-disagg-revision) is not covered\",\"type\":\"service_unavailable\",\"code\":503}}",
        )
            .into_response();
    }
    prefill_reply(h)
}

#[tokio::test]
async fn a_router_503_on_the_prefill_leg_is_sent_once_more_with_the_same_revision() {
    // Routers apply endpoint changes independently: right after a change the prefill router
    // may refuse the revision the decode router chose. The coordinator waits and resends.
    let (p_addr, p_seen) = fake_router(prefill_catching_up).await;
    let (d_addr, _) = fake_router(decode_reply_with_revision).await;
    let c = coordinator(&p_addr, &d_addr).await;
    let r = reqwest::Client::new()
        .post(format!("http://{}/v1/completions", c.addr))
        .json(&json!({"model": "m", "prompt": "hello", "max_tokens": 3}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(
        legs(&p_seen),
        [
            ("prefill".to_string(), false, Some("revision-b".to_string())),
            ("prefill".to_string(), false, Some("revision-b".to_string())),
        ]
    );
}
