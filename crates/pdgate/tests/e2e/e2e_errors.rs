//! Bad input through the real router in front of simulated workers: each case gets the status
//! of design.md §5.5 and an OpenAI error body naming the problem.

use crate::support;

use pdgate_scenario::fleet::{self, FleetSpec};
use pdgate_scheduler::DEFAULT_CONFIG_YAML;
use serde_json::Value;

async fn fleet_with_body_limit(limit: usize) -> (fleet::LocalFleet, String) {
    let mut spec = FleetSpec::new(1, 1, 100.0);
    spec.max_body_bytes = limit;
    let f = fleet::start(&spec, DEFAULT_CONFIG_YAML).await.unwrap();
    let url = f.url();
    (f, url)
}

async fn post(url: &str, body: impl Into<reqwest::Body>) -> (u16, Value) {
    let (status, _, body) = post_with_headers(url, body).await;
    (status, body)
}

/// A raw body to `/v1/completions` with a client request id.
async fn post_with_headers(
    url: &str,
    body: impl Into<reqwest::Body>,
) -> (u16, http::HeaderMap, Value) {
    let r = support::send_to(
        url,
        "/v1/completions",
        &[("x-request-id", "client-rid-7")],
        body,
    )
    .await;
    (r.status, r.headers, r.body)
}

#[tokio::test]
async fn bad_input_gets_the_documented_status_and_an_openai_error_body() {
    let (_f, url) = fleet_with_body_limit(1 << 20).await;

    let (s, h, b) = post_with_headers(&url, "{\"model\": ").await;
    assert_eq!(s, 400);
    assert_eq!(
        h["x-request-id"], "client-rid-7",
        "the router's own errors echo the request id"
    );
    assert_eq!(b["error"]["type"], "invalid_request_error");
    assert_eq!(b["error"]["code"], 400);
    assert!(
        b["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("request body is not valid JSON: EOF while parsing"),
        "{b}"
    );

    let (s, b) = post(&url, r#"{"prompt":"hi"}"#).await;
    assert_eq!(
        (s, b["error"]["message"].as_str().unwrap()),
        (400, "missing required field `model`")
    );

    let (s, b) = post(&url, r#"{"model":"no-such-model","prompt":"hi"}"#).await;
    assert_eq!(s, 404);
    assert_eq!(
        b["error"]["message"],
        "model `no-such-model` does not exist"
    );
    assert_eq!(b["error"]["type"], "not_found_error");

    let big = format!(
        r#"{{"model":"pdgate-sim","prompt":"{}"}}"#,
        "a".repeat(3 << 19)
    );
    let (s, h, b) = post_with_headers(&url, big).await;
    assert_eq!(s, 413);
    // The unread rest of the body makes the connection unusable: say so, so that a client
    // pool does not send its next request on it.
    assert_eq!(h["connection"], "close");
    assert_eq!(
        b["error"]["message"],
        format!("request body exceeds the limit of {} bytes", 1 << 20)
    );

    // The router is still healthy and serves a good request afterwards.
    let (s, b) = post(
        &url,
        r#"{"model":"pdgate-sim","prompt":"hello there","max_tokens":3}"#,
    )
    .await;
    assert_eq!(s, 200, "{b}");
    assert_eq!(b["usage"]["completion_tokens"], 3);
}
