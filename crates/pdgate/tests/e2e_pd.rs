//! The P/D contract through the real router: the prefill leg's body, the verbatim handoff to
//! the decode leg, the simulator refusing KV from another revision, and bookings released
//! when a client disconnects mid-stream.

use axum::extract::State;
use axum::routing::post;
use bytes::Bytes;
use futures_util::StreamExt;
use http::HeaderMap;
use pdgate_scenario::fleet::{self, FleetSpec};
use pdgate_scheduler::{Endpoint, DEFAULT_CONFIG_YAML};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

type Seen = Arc<Mutex<Vec<(HeaderMap, Value)>>>;

/// A fake engine that records every request and answers with `reply`.
async fn recorder(reply: fn() -> axum::response::Response) -> (String, Seen) {
    let seen: Seen = Arc::default();
    let app = axum::Router::new()
        .route(
            "/v1/completions",
            post(
                move |State(seen): State<Seen>, headers: HeaderMap, body: Bytes| async move {
                    seen.lock()
                        .unwrap()
                        .push((headers, serde_json::from_slice(&body).unwrap()));
                    reply()
                },
            ),
        )
        .with_state(seen.clone());
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap().to_string();
    tokio::spawn(async move { axum::serve(l, app).await.unwrap() });
    (addr, seen)
}

fn prefill_reply() -> axum::response::Response {
    use axum::response::IntoResponse;
    axum::Json(json!({"id":"cmpl-p","object":"text_completion","choices":[{"index":0,"text":"x","finish_reason":"length"}],
        "kv_transfer_params": {"do_remote_prefill": true, "do_remote_decode": false, "remote_engine_id": "engine-p0",
            "remote_block_ids": [7, 8, 9], "remote_host": "10.1.2.3", "remote_port": 5601,
            "remote_request_id": "lease-42", "tp_size": 2, "vendor_field": {"nested": [1, 2]}}}))
    .into_response()
}

fn decode_reply() -> axum::response::Response {
    axum::response::Response::builder()
        .header("content-type", "text/event-stream")
        .body(axum::body::Body::from(
            "data: {\"choices\":[{\"text\":\" a\"}]}\n\ndata: [DONE]\n\n",
        ))
        .unwrap()
}

fn labels(role: &str, revision: Option<&str>) -> BTreeMap<String, String> {
    let mut l = BTreeMap::from([(pdgate_api::labels::ROLE.to_string(), role.to_string())]);
    if let Some(r) = revision {
        l.insert(pdgate_api::labels::DS_REVISION.to_string(), r.to_string());
    }
    l
}

async fn router(endpoints: Vec<Endpoint>) -> pdgate_server::ServerHandle {
    fleet::router_with(endpoints, DEFAULT_CONFIG_YAML, |_| {})
        .await
        .unwrap()
}

#[tokio::test]
async fn prefill_leg_body_and_verbatim_handoff_to_decode() {
    let (p_addr, p_seen) = recorder(prefill_reply).await;
    let (d_addr, d_seen) = recorder(decode_reply).await;
    let r = router(vec![
        Endpoint::new("p0", p_addr, labels("prefill", None)),
        Endpoint::new("d0", d_addr, labels("decode", None)),
    ])
    .await;
    let prompt: Vec<u32> = (0..200).collect();
    let client_body = json!({"model":"m","prompt":prompt,"stream":true,"stream_options":{"include_usage":true},
        "max_tokens":20,"min_tokens":2,"temperature":0.3});
    let resp = reqwest::Client::new()
        .post(format!("http://{}/v1/completions", r.addr))
        .header("x-request-id", "req-1")
        .header("x-llm-d-revision-decision-id", "forged-by-client")
        .json(&client_body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let h = resp.headers().clone();
    assert_eq!(h["x-pdgate-prefill-endpoint"], "p0");
    assert_eq!(h["x-pdgate-decode-endpoint"], "d0");
    assert_eq!(h["x-pdgate-pd-mode"], "split");
    assert_eq!(h["x-request-id"], "req-1");
    assert_eq!(h["content-type"], "text/event-stream");
    assert_eq!(
        resp.text().await.unwrap(),
        "data: {\"choices\":[{\"text\":\" a\"}]}\n\ndata: [DONE]\n\n"
    );

    let p = p_seen.lock().unwrap();
    assert_eq!(p.len(), 1);
    assert_eq!(
        p[0].1,
        json!({"model":"m","prompt":prompt,"stream":false,"max_tokens":1,"temperature":0.3,
            "kv_transfer_params":{"do_remote_decode":true,"do_remote_prefill":false,"remote_engine_id":null,
                "remote_block_ids":null,"remote_host":null,"remote_port":null}})
    );
    let d = d_seen.lock().unwrap();
    assert_eq!(d.len(), 1);
    let mut expected_decode = client_body.clone();
    expected_decode["kv_transfer_params"] = prefill_reply_params();
    assert_eq!(d[0].1, expected_decode);
    for (headers, _) in [&p[0], &d[0]] {
        assert_eq!(headers["x-request-id"], "req-1");
        assert!(headers.get("x-llm-d-revision-decision-id").is_none());
    }
    assert_eq!(r.state.in_flight_total(), 0);
}

fn prefill_reply_params() -> Value {
    json!({"do_remote_prefill": true, "do_remote_decode": false, "remote_engine_id": "engine-p0",
        "remote_block_ids": [7, 8, 9], "remote_host": "10.1.2.3", "remote_port": 5601,
        "remote_request_id": "lease-42", "tp_size": 2, "vendor_field": {"nested": [1, 2]}})
}

#[tokio::test]
async fn simulator_refuses_kv_from_another_revision_and_the_client_sees_why() {
    // No rollout screener yet: a fleet mixing revisions lets the router pair rev-a prefill
    // with rev-b decode, and the simulator must make that mistake visible.
    let specs = vec![
        pdgate_sim::WorkerSpec {
            name: "prefill-a".into(),
            role: "prefill".into(),
            revision: Some("rev-a".into()),
            labels: labels("prefill", Some("rev-a")),
        },
        pdgate_sim::WorkerSpec {
            name: "decode-b".into(),
            role: "decode".into(),
            revision: Some("rev-b".into()),
            labels: labels("decode", Some("rev-b")),
        },
    ];
    let cfg = pdgate_sim::SimConfig {
        speedup: 100.0,
        ..Default::default()
    };
    let workers = pdgate_sim::spawn_fleet(specs.clone(), cfg, "127.0.0.1", 0)
        .await
        .unwrap();
    let eps = specs
        .iter()
        .zip(&workers)
        .map(|(s, w)| Endpoint::new(s.name.clone(), w.addr().to_string(), s.labels.clone()))
        .collect();
    let r = router(eps).await;
    let prompt: Vec<u32> = (1000..1300).collect();
    let resp = reqwest::Client::new()
        .post(format!("http://{}/v1/completions", r.addr))
        .json(&json!({"model":"pdgate-sim","prompt":prompt,"max_tokens":4}))
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    let body: Value = resp.json().await.unwrap();
    assert_eq!(status, 409, "{body}");
    let msg = body["error"]["message"].as_str().unwrap();
    assert!(msg.contains("rev-a") && msg.contains("rev-b"), "{msg}");
    assert_eq!(r.state.in_flight_total(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_flight_counts_return_to_zero_after_a_client_disconnects_mid_stream() {
    let f = fleet::start(&FleetSpec::new(1, 1, 1.0), DEFAULT_CONFIG_YAML)
        .await
        .unwrap();
    let prompt: Vec<u32> = (0..64).collect();
    let resp = reqwest::Client::new()
        .post(format!("{}/v1/completions", f.url()))
        .json(&json!({"model":"pdgate-sim","prompt":prompt,"max_tokens":5000,"stream":true}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let mut stream = resp.bytes_stream();
    let first = stream.next().await.unwrap().unwrap();
    assert!(first.starts_with(b"data: "), "{first:?}");
    assert_eq!(
        f.in_flight(),
        1,
        "the decode booking is held while streaming"
    );
    drop(stream);
    let mut waited = 0;
    while f.in_flight() != 0 && waited < 300 {
        tokio::time::sleep(Duration::from_millis(10)).await;
        waited += 1;
    }
    assert_eq!(f.in_flight(), 0, "booking released after disconnect");
}
