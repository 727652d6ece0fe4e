//! `--record-responses N`: the exact bytes of the last N engine API bodies, by
//! `x-request-id`, at `GET /debug/responses/{request_id}`.

mod common;

use common::apis::*;
use common::*;
use serde_json::json;

async fn recorded(url: &str, id: &str) -> Raw {
    let r = reqwest::get(format!("{url}/debug/responses/{id}"))
        .await
        .unwrap();
    Raw {
        status: r.status().as_u16(),
        headers: r.headers().clone(),
        text: r.text().await.unwrap(),
    }
}

#[tokio::test]
async fn the_recorder_returns_exactly_the_bytes_the_client_received() {
    let w = recording_worker("rec-0", "both", 3).await;
    let cases = [
        (
            "/v1/messages",
            json!({"model": "pdgate-sim", "max_tokens": 4, "stream": true,
                                "messages": [{"role": "user", "content": "record me"}]}),
            "a",
        ),
        (
            "/v1/responses",
            json!({"input": "record me", "max_output_tokens": 3}),
            "b",
        ),
        (
            "/inference/v1/generate",
            json!({"token_ids": [1, 2, 3], "sampling_params": {"max_tokens": 2},
                                          "stream": true}),
            "c",
        ),
        ("/v1/embeddings", json!({"input": "record me"}), "d"),
    ];
    for (path, body, id) in &cases {
        let sent = post_raw(&w.url(), path, body, Some(id)).await;
        assert_eq!(sent.status, 200, "{}", sent.text);
        let got = recorded(&w.url(), id).await;
        assert_eq!(got.status, 200, "{path}");
        assert_eq!(got.text, sent.text, "{path}: byte for byte");
        assert_eq!(got.headers["content-type"], sent.headers["content-type"]);
        assert_eq!(got.headers["x-sim-recorded-status"], "200");
    }
    // Only the last 3 are kept; errors are recorded too; unknown ids are 404.
    assert_eq!(recorded(&w.url(), "a").await.status, 404);
    let bad = post_raw(&w.url(), "/v1/responses", &json!({}), Some("e")).await;
    assert_eq!(bad.status, 400);
    let got = recorded(&w.url(), "e").await;
    assert_eq!(
        (
            got.text,
            got.headers["x-sim-recorded-status"].to_str().unwrap()
        ),
        (bad.text, "400")
    );
    assert_eq!(recorded(&w.url(), "nobody").await.status, 404);
}

#[tokio::test]
async fn recording_is_off_by_default() {
    let w = worker_rev("w-0", "both", "r").await;
    let body = json!({"input": "x y", "max_output_tokens": 2});
    assert_eq!(
        post_raw(&w.url(), "/v1/responses", &body, Some("z"))
            .await
            .status,
        200
    );
    let r = recorded(&w.url(), "z").await;
    assert_eq!(r.status, 404);
    assert!(
        r.text.contains("no recorded response for request id `z`"),
        "{}",
        r.text
    );
}
