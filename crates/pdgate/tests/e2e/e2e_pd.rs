//! The P/D contract through the real router: the prefill leg's body, the verbatim handoff to
//! the decode leg, the simulator refusing KV from another revision, and bookings released
//! when a client disconnects mid-stream.

use crate::support;

use futures_util::StreamExt;
use pdgate_scenario::fleet::{self, FleetSpec};
use pdgate_scheduler::{Endpoint, DEFAULT_CONFIG_YAML};
use serde_json::{json, Value};
use std::time::Duration;
use support::{endpoints, fake_engine, labels, sim_config, sim_workers, spec, wait_until};

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

async fn router(endpoints: Vec<Endpoint>) -> pdgate_server::ServerHandle {
    support::router(endpoints, DEFAULT_CONFIG_YAML).await
}

#[tokio::test]
async fn prefill_leg_body_and_verbatim_handoff_to_decode() {
    let p_engine = fake_engine("/v1/completions", |_| prefill_reply()).await;
    let d_engine = fake_engine("/v1/completions", |_| decode_reply()).await;
    let r = router(vec![
        Endpoint::new("p0", p_engine.addr.clone(), labels("prefill", None)),
        Endpoint::new("d0", d_engine.addr.clone(), labels("decode", None)),
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

    let p = p_engine.requests();
    assert_eq!(p.len(), 1);
    assert_eq!(
        p[0].json(),
        json!({"model":"m","prompt":prompt,"stream":false,"max_tokens":1,"temperature":0.3,
            "kv_transfer_params":{"do_remote_decode":true,"do_remote_prefill":false,"remote_engine_id":null,
                "remote_block_ids":null,"remote_host":null,"remote_port":null}})
    );
    let d = d_engine.requests();
    assert_eq!(d.len(), 1);
    let mut expected_decode = client_body.clone();
    expected_decode["kv_transfer_params"] = prefill_reply_params();
    assert_eq!(d[0].json(), expected_decode);
    for seen in [&p[0], &d[0]] {
        assert_eq!(seen.headers["x-request-id"], "req-1");
        assert!(seen.headers.get("x-llm-d-revision-decision-id").is_none());
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
        spec("prefill-a", "prefill", Some("rev-a")),
        spec("decode-b", "decode", Some("rev-b")),
    ];
    let workers = sim_workers(specs, sim_config(100.0)).await;
    let eps = endpoints(&workers);
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
    wait_until(Duration::from_secs(3), "bookings released", || {
        f.in_flight() == 0
    })
    .await;
    assert_eq!(f.in_flight(), 0, "booking released after disconnect");
}
