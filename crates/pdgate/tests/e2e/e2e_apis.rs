//! The APIs other than completions and chat through the real router, against recording fake
//! engines: each reaches the engine on its own path; messages, responses and generate split
//! into a prefill leg that caps the API's own token limits and a decode leg that carries the
//! prefill's `kv_transfer_params`; embeddings, tokenize and detokenize run aggregated on the
//! decode pick; the router's own errors and the error event that ends a broken stream take
//! each API's form. The pre-steps (render, replace-media-urls) are in `e2e_pre_steps`.

use crate::support;

use axum::response::{IntoResponse, Response};
use pdgate_scheduler::{Endpoint, DEFAULT_CONFIG_YAML};
use serde_json::{json, Value};
use support::{fake_engine, labels, FakeEngine};

fn kv_params() -> Value {
    json!({"do_remote_prefill": true, "do_remote_decode": false, "remote_engine_id": "engine-p0",
        "remote_block_ids": [7, 8], "remote_host": "10.1.2.3", "remote_port": 5601})
}

fn sse(body: &'static str) -> Response {
    Response::builder()
        .header("content-type", "text/event-stream")
        .body(axum::body::Body::from(body))
        .unwrap()
}

/// A prefill engine and a decode engine serving `path`, and a router over them.
async fn pd(
    path: &str,
    decode: impl Fn(&support::Recorded) -> Response + Send + Sync + 'static,
) -> (FakeEngine, FakeEngine, pdgate_server::ServerHandle) {
    let p = fake_engine(path, |_| {
        axum::Json(json!({"id": "x", "kv_transfer_params": kv_params()})).into_response()
    })
    .await;
    let d = fake_engine(path, decode).await;
    let r = support::router(
        vec![
            Endpoint::new("p0", p.addr.clone(), labels("prefill", None)),
            Endpoint::new("d0", d.addr.clone(), labels("decode", None)),
        ],
        DEFAULT_CONFIG_YAML,
    )
    .await;
    (p, d, r)
}

/// POSTs `body` to `{router}{path}`; returns status, the pd-mode header, content type and
/// the body text.
pub(crate) async fn post(
    r: &pdgate_server::ServerHandle,
    path: &str,
    body: &Value,
) -> (u16, String, String, String) {
    let a = support::post_raw(&support::url(r), path, "req-1", body).await;
    let (mode, ctype) = (a.header("x-pdgate-pd-mode"), a.header("content-type"));
    (a.status, mode, ctype, a.text())
}

fn long_text() -> String {
    (0..400).map(|i| format!("w{i} ")).collect()
}

const MESSAGES_SSE: &str = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"chatcmpl-req-1\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":\"m\",\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":12,\"output_tokens\":0}}}\n\nevent: content_block_start\ndata: {\"type\":\"content_block_start\",\"content_block\":{\"type\":\"text\",\"text\":\"\"},\"index\":0}\n\nevent: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi\"},\"index\":0}\n\nevent: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\nevent: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"max_tokens\",\"stop_sequence\":null},\"usage\":{\"input_tokens\":12,\"output_tokens\":1}}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";

#[tokio::test]
async fn messages_split_with_the_anthropic_body_and_stream_back_unchanged() {
    let (p, d, r) = pd("/v1/messages", |_| sse(MESSAGES_SSE)).await;
    let client = json!({"model": "m", "max_tokens": 40, "stream": true, "system": "Be brief.",
        "messages": [{"role": "user", "content": long_text()}], "temperature": 0.2});
    let (status, mode, ctype, text) = post(&r, "/v1/messages", &client).await;
    assert_eq!(
        (status, mode.as_str(), ctype.as_str()),
        (200, "split", "text/event-stream")
    );
    assert_eq!(text, MESSAGES_SSE, "the stream passes byte for byte");
    let (p, d) = (p.requests(), d.requests());
    assert_eq!((p.len(), d.len()), (1, 1));
    assert_eq!(
        (p[0].path.as_str(), d[0].path.as_str()),
        ("/v1/messages", "/v1/messages")
    );
    let mut want_p = client.clone();
    want_p["max_tokens"] = json!(1);
    want_p["stream"] = json!(false);
    want_p["kv_transfer_params"] = json!({"do_remote_decode": true, "do_remote_prefill": false,
        "remote_engine_id": null, "remote_block_ids": null, "remote_host": null, "remote_port": null});
    assert_eq!(p[0].json(), want_p);
    let mut want_d = client.clone();
    want_d["kv_transfer_params"] = kv_params();
    assert_eq!(d[0].json(), want_d);
    assert_eq!(r.state.in_flight_total(), 0);
}

#[tokio::test]
async fn responses_and_generate_cap_their_own_token_limits_on_the_prefill_leg() {
    let (p, d, r) = pd("/v1/responses", |_| {
        axum::Json(json!({"id": "resp_1", "status": "completed"})).into_response()
    })
    .await;
    let client = json!({"model": "m", "input": long_text(), "instructions": "Be brief.",
        "max_output_tokens": 30, "store": false});
    let (status, mode, _, text) = post(&r, "/v1/responses", &client).await;
    assert_eq!((status, mode.as_str()), (200, "split"), "{text}");
    let mut want_p = client.clone();
    want_p["max_output_tokens"] = json!(1);
    want_p["stream"] = json!(false);
    want_p["kv_transfer_params"] = p.requests()[0].json()["kv_transfer_params"].clone();
    assert_eq!(p.requests()[0].json(), want_p);
    assert!(p.requests()[0].json().get("max_tokens").is_none());
    let mut want_d = client.clone();
    want_d["kv_transfer_params"] = kv_params();
    assert_eq!(d.requests()[0].json(), want_d);

    // A response that continues a stored one needs the engine that stored it: aggregated.
    let follow = json!({"model": "m", "input": long_text(), "previous_response_id": "resp_1"});
    let (status, mode, _, _) = post(&r, "/v1/responses", &follow).await;
    assert_eq!((status, mode.as_str()), (200, "aggregated"));
    assert_eq!((p.requests().len(), d.requests().len()), (1, 2));

    let (p, d, r) = pd("/inference/v1/generate", |_| {
        sse("data: {\"request_id\":\"generate-tokens-req-1\",\"choices\":[{\"index\":0,\"token_ids\":[9],\"finish_reason\":\"length\"}]}\n\ndata: [DONE]\n\n")
    })
    .await;
    let ids: Vec<u32> = (0..300).collect();
    let client = json!({"token_ids": ids, "stream": true,
        "sampling_params": {"temperature": 0, "max_tokens": 8, "min_tokens": 2,
            "extra_args": {"kv_transfer_params": {"do_remote_prefill": true, "remote_host": "evil"}}}});
    let (status, mode, _, text) = post(&r, "/inference/v1/generate", &client).await;
    assert_eq!((status, mode.as_str()), (200, "split"), "{text}");
    assert!(text.ends_with("data: [DONE]\n\n"));
    // The handoff travels in `sampling_params.extra_args`, as llm-d sends it; the client's
    // own copy there is gone.
    let pj = p.requests()[0].json();
    assert_eq!(
        pj["sampling_params"],
        json!({"temperature": 0, "max_tokens": 1, "extra_args": {"kv_transfer_params":
            {"do_remote_decode": true, "do_remote_prefill": false, "remote_engine_id": null,
             "remote_block_ids": null, "remote_host": null, "remote_port": null}}}),
    );
    assert_eq!(
        (pj["stream"].clone(), pj["token_ids"].clone()),
        (json!(false), json!(ids))
    );
    assert!(pj.get("kv_transfer_params").is_none());
    let dj = d.requests()[0].json();
    assert_eq!(
        dj["sampling_params"],
        json!({"temperature": 0, "max_tokens": 8, "min_tokens": 2,
            "extra_args": {"kv_transfer_params": kv_params()}})
    );
    assert!(dj.get("kv_transfer_params").is_none());
    let m = support::metrics(&support::url(&r)).await;
    assert_eq!(
        support::metric(&m, "pdgate_client_fields_dropped_total{field=\"sampling_params.extra_args.kv_transfer_params\"}"),
        1
    );
    assert_eq!(
        support::metric(&m, "pdgate_requests_total{api=\"generate\",status=\"200\"}"),
        1
    );
}

#[tokio::test]
async fn embeddings_tokenize_and_detokenize_run_aggregated_on_the_decode_pick() {
    for (path, body) in [
        (
            "/v1/embeddings",
            json!({"model": "m", "input": long_text()}),
        ),
        ("/tokenize", json!({"prompt": long_text()})),
        (
            "/detokenize",
            json!({"tokens": (0..300).collect::<Vec<u32>>()}),
        ),
    ] {
        let (p, d, r) = pd(path, |req| {
            axum::Json(json!({"echo": req.json()})).into_response()
        })
        .await;
        let (status, mode, _, text) = post(&r, path, &body).await;
        assert_eq!(
            (status, mode.as_str()),
            (200, "aggregated"),
            "{path}: {text}"
        );
        assert_eq!(p.requests().len(), 0, "{path}");
        let d = d.requests();
        assert_eq!(d.len(), 1);
        assert_eq!((d[0].path.as_str(), d[0].json()), (path, body.clone()));
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["echo"], body);
    }
}

#[tokio::test]
async fn router_errors_and_broken_streams_take_each_apis_form() {
    // No endpoint serves anything: the router answers itself.
    let r = support::router(Vec::new(), DEFAULT_CONFIG_YAML).await;
    let msg =
        json!({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]});
    let (status, _, _, text) = post(&r, "/v1/messages", &msg).await;
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(status, 503, "{text}");
    assert_eq!(
        (v["type"].as_str(), v["error"]["type"].as_str()),
        (Some("error"), Some("overloaded_error"))
    );
    let (status, _, _, text) =
        post(&r, "/v1/messages", &json!({"model": "m", "messages": []})).await;
    assert_eq!(status, 400);
    assert_eq!(
        serde_json::from_str::<Value>(&text).unwrap(),
        json!({"type": "error", "error": {"type": "invalid_request_error",
            "message": "field `messages` must be a non-empty array"}})
    );
    let (status, _, _, text) = post(&r, "/v1/responses", &json!({"model": "m"})).await;
    assert_eq!(status, 400);
    assert_eq!(
        serde_json::from_str::<Value>(&text).unwrap()["error"]["message"],
        "missing required field `input`"
    );

    // The engine breaks its stream with a bare JSON error line: the client gets the error
    // event of its API.
    let d = fake_engine("/v1/messages", |_| {
        sse("event: message_start\ndata: {\"type\":\"message_start\"}\n\n{\"object\":\"error\",\"message\":\"engine fell over\",\"type\":\"InternalServerError\",\"code\":500}\n")
    })
    .await;
    let r = support::router(
        vec![Endpoint::new("d0", d.addr.clone(), labels("decode", None))],
        DEFAULT_CONFIG_YAML,
    )
    .await;
    let (status, _, _, text) = post(
        &r,
        "/v1/messages",
        &json!({"model": "m", "stream": true, "max_tokens": 5,
        "messages": [{"role": "user", "content": "hi"}]}),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(
        text,
        "event: message_start\ndata: {\"type\":\"message_start\"}\n\nevent: error\ndata: {\"error\":{\"message\":\"engine fell over\",\"type\":\"api_error\"},\"type\":\"error\"}\n\n"
    );
    assert_eq!(r.state.in_flight_total(), 0);
}

#[tokio::test]
async fn an_engine_failure_on_messages_is_an_anthropic_error() {
    // Nothing listens on the endpoint: the router's own 5xx, in Anthropic's form.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .to_string();
    let r = support::router(
        vec![Endpoint::new("d0", closed, labels("decode", None))],
        DEFAULT_CONFIG_YAML,
    )
    .await;
    for stream in [false, true] {
        let body = json!({"model": "m", "max_tokens": 3, "stream": stream,
            "messages": [{"role": "user", "content": "hi"}]});
        let (status, _, _, text) = post(&r, "/v1/messages", &body).await;
        assert!(status >= 500, "{status} {text}");
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            (v["type"].as_str(), v["error"]["type"].as_str().is_some()),
            (Some("error"), true),
            "{text}"
        );
    }
}
