//! Echo hygiene (issue 10 item 5): what a client sends and pdgate echoes — the request id in
//! a header, on every engine leg and as the completion id; its strings in error messages —
//! is bounded. A fake engine on 127.0.0.1:0 records what it receives.

use crate::support;

use axum::response::IntoResponse;
use pdgate_scheduler::DEFAULT_CONFIG_YAML;
use serde_json::json;
use support::{endpoints, fake_engine, router, send, sim_config, sim_workers, spec, url};

#[tokio::test]
async fn request_ids_are_short_visible_tokens_and_error_echoes_are_cut() {
    let engine = fake_engine("/v1/completions", |_| {
        axum::Json(json!({"id": "c", "choices": []})).into_response()
    })
    .await;
    let r = support::decode_router(&engine.addr).await;
    let body = json!({"model": "m", "prompt": "hi", "max_tokens": 1});
    // A short visible-ASCII token is kept: echoed and sent to the engine.
    let ok = send(&url(&r), &[("x-request-id", "req-42:a/b")], &body).await;
    assert_eq!(ok.status, 200);
    assert_eq!(ok.header("x-request-id"), "req-42:a/b");
    assert_eq!(
        engine.requests()[0].header("x-request-id").as_deref(),
        Some("req-42:a/b")
    );
    // Too long, or with a space: replaced by a UUID, the same on the engine's side.
    for bad in ["x".repeat(129), "two words".to_string()] {
        let r2 = send(&url(&r), &[("x-request-id", &bad)], &body).await;
        assert_eq!(r2.status, 200);
        let id = r2.header("x-request-id");
        assert_eq!(id.len(), 36, "{id}");
        assert!(uuid_like(&id), "{id}");
        let seen = engine.requests().last().unwrap().header("x-request-id");
        assert_eq!(seen.as_deref(), Some(id.as_str()));
    }
    // A 1 MB model name, to a router whose engine's model list is known: 404, and the
    // message that echoes the name is cut to about 1 KB.
    let workers = sim_workers(vec![spec("w0", "decode", None)], sim_config(50.0)).await;
    let sims = router(endpoints(&workers), DEFAULT_CONFIG_YAML).await;
    pdgate_scenario::fleet::wait_for_models(&sims).await;
    let huge = json!({"model": "m".repeat(1 << 20), "prompt": "hi"});
    let nf = send(&url(&sims), &[], &huge).await;
    assert_eq!(nf.status, 404, "{}", nf.body);
    let message = nf.body["error"]["message"].as_str().unwrap();
    assert!(
        message.len() <= 1_024 + "… (truncated)".len(),
        "{}",
        message.len()
    );
    assert!(message.ends_with("… (truncated)"));
}

fn uuid_like(s: &str) -> bool {
    s.len() == 36
        && s.char_indices().all(|(i, c)| {
            if [8, 13, 18, 23].contains(&i) {
                c == '-'
            } else {
                c.is_ascii_hexdigit()
            }
        })
}
