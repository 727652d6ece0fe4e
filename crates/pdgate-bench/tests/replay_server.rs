//! Replays against tiny in-test servers on 127.0.0.1:0 and checks the report's exact counts.

use axum::body::Body;
use axum::extract::State;
use axum::http::{Response, StatusCode};
use axum::routing::{get, post};
use axum::{Json, Router};
use pdgate_api::headers;
use pdgate_bench::client::first_model;
use pdgate_bench::{replay, ReplayConfig, WorkItem, WorkPrompt};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

#[derive(Default)]
struct Seen {
    calls: AtomicUsize,
    bodies: Mutex<Vec<Value>>,
}

fn body_of(frames: Vec<String>) -> Body {
    Body::from_stream(futures_util::stream::iter(
        frames.into_iter().map(Ok::<_, std::convert::Infallible>),
    ))
}

fn content_frames() -> Vec<String> {
    ["a", "b", "c"]
        .iter()
        .map(|t| {
            format!(
                "data: {}\n\n",
                json!({"choices": [{"index": 0, "text": t}]})
            )
        })
        .collect()
}

/// Behaviour by arrival order: 0 → split p0/d0 rev v1, 1 → split p1/d1 rev v2,
/// 2 → aggregated a0 rev v1, 3 → 503 with an OpenAI error body.
async fn completions(State(seen): State<Arc<Seen>>, Json(body): Json<Value>) -> Response<Body> {
    seen.bodies.lock().unwrap().push(body);
    let n = seen.calls.fetch_add(1, Ordering::SeqCst) % 4;
    if n == 3 {
        return Response::builder()
            .status(StatusCode::SERVICE_UNAVAILABLE)
            .header("content-type", "application/json")
            .body(Body::from(
                r#"{"error":{"message":"no endpoints","type":"unavailable","code":503}}"#,
            ))
            .unwrap();
    }
    let (prefill, decode, rev, mode, cached) = [
        ("p0", "d0", "v1", "split", 4),
        ("p1", "d1", "v2", "split", 2),
        ("a0", "a0", "v1", "aggregated", 0),
    ][n];
    let mut frames = content_frames();
    let usage = json!({"choices": [], "usage": {"prompt_tokens": 8, "completion_tokens": 3,
        "total_tokens": 11, "prompt_tokens_details": {"cached_tokens": cached}}});
    frames.push(format!("data: {usage}\n\n"));
    frames.push("data: [DONE]\n\n".into());
    Response::builder()
        .header("content-type", "text/event-stream")
        .header(headers::SERVED_PREFILL_ENDPOINT, prefill)
        .header(headers::SERVED_DECODE_ENDPOINT, decode)
        .header(headers::SERVED_DECODE_REVISION, rev)
        .header(headers::SERVED_MODE, mode)
        .body(body_of(frames))
        .unwrap()
}

/// One content chunk, then an SSE error event, then the end of the stream (no usage).
async fn failing_stream() -> Response<Body> {
    let mut frames = content_frames();
    frames.truncate(1);
    frames.push(
        "data: {\"error\":{\"message\":\"decode lost\",\"type\":\"x\",\"code\":502}}\n\n".into(),
    );
    Response::builder()
        .header("content-type", "text/event-stream")
        .body(body_of(frames))
        .unwrap()
}

async fn serve(app: Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}")
}

fn items(n: usize) -> Vec<WorkItem> {
    (0..n)
        .map(|i| WorkItem {
            at_ms: i as u64,
            prompt: WorkPrompt::Tokens(vec![1, 2, 3, 4, 5, 6, 7, 8]),
            max_tokens: 100,
            conversation: None,
        })
        .collect()
}

#[tokio::test]
async fn counts_ok_errors_endpoints_and_cache() {
    let seen = Arc::new(Seen::default());
    let app = Router::new()
        .route("/v1/completions", post(completions))
        .route(
            "/v1/models",
            get(|| async { Json(json!({"object": "list", "data": [{"id": "tiny"}]})) }),
        )
        .with_state(seen.clone());
    let url = serve(app).await;
    let model = first_model(&reqwest::Client::new(), &url).await.unwrap();
    assert_eq!(model, "tiny");
    let cfg = ReplayConfig {
        speedup: 10.0,
        concurrency: 3,
        max_output_tokens: Some(16),
        ..ReplayConfig::new(format!("{url}/"), model)
    };
    let report = replay(&cfg, items(8)).await.unwrap();

    assert_eq!((report.requests, report.ok), (8, 6));
    assert_eq!(report.errors, BTreeMap::from([("503".to_string(), 2)]));
    assert_eq!(report.error_rate, 0.25);
    let count = |pairs: &[(&str, u64)]| -> BTreeMap<String, u64> {
        pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    };
    assert_eq!(
        report.requests_by_endpoint,
        count(&[
            ("aggregated:a0", 2),
            ("decode:d0", 2),
            ("decode:d1", 2),
            ("prefill:p0", 2),
            ("prefill:p1", 2),
        ])
    );
    assert_eq!(report.pd_modes, count(&[("aggregated", 2), ("split", 4)]));
    assert_eq!(
        report.revisions,
        count(&[("decode:v1", 4), ("decode:v2", 2)])
    );
    assert_eq!((report.prompt_tokens, report.cached_tokens), (48, 12));
    assert_eq!(report.cached_token_ratio, 0.25);
    assert_eq!(report.output_tokens, 18);
    assert_eq!(
        (
            report.ttft_ms.count,
            report.e2e_ms.count,
            report.itl_ms.count
        ),
        (6, 6, 12)
    );

    let failed: Vec<_> = report.records.iter().filter(|r| !r.ok).collect();
    assert_eq!(failed.len(), 2);
    assert!(failed.iter().all(|r| r.status == "503"
        && r.error.as_deref()
            == Some(r#"{"error":{"message":"no endpoints","type":"unavailable","code":503}}"#)));
    let indices: Vec<usize> = report.records.iter().map(|r| r.index).collect();
    assert_eq!(indices, (0..8).collect::<Vec<_>>());

    let bodies = seen.bodies.lock().unwrap();
    assert_eq!(bodies.len(), 8);
    assert_eq!(
        bodies[0],
        json!({"model": "tiny", "prompt": [1, 2, 3, 4, 5, 6, 7, 8], "max_tokens": 16,
               "stream": true, "stream_options": {"include_usage": true}, "ignore_eos": true})
    );
}

#[tokio::test]
async fn stream_errors_and_transport_failures_are_labelled() {
    let url = serve(Router::new().route("/v1/completions", post(failing_stream))).await;
    let report = replay(&ReplayConfig::new(url, "m"), items(2))
        .await
        .unwrap();
    assert_eq!((report.requests, report.ok), (2, 0));
    assert_eq!(
        report.errors,
        BTreeMap::from([("stream_error".to_string(), 2)])
    );
    assert_eq!(report.records[0].error.as_deref(), Some("decode lost"));
    assert_eq!(report.records[0].output_tokens, 1);

    // A port that was bound and released: nothing listens there any more.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = closed.local_addr().unwrap();
    drop(closed);
    let cfg = ReplayConfig {
        speedup: 0.0,
        ..ReplayConfig::new(format!("http://{addr}"), "m")
    };
    let report = replay(&cfg, items(3)).await.unwrap();
    assert_eq!(
        report.errors,
        BTreeMap::from([("transport".to_string(), 3)])
    );
    assert!(report.records[0]
        .error
        .as_deref()
        .is_some_and(|e| e.starts_with("error sending request")));
}

#[tokio::test]
async fn chat_items_go_to_chat_completions() {
    let seen = Arc::new(Seen::default());
    let app = Router::new()
        .route("/v1/chat/completions", post(completions))
        .with_state(seen.clone());
    let url = serve(app).await;
    let work = pdgate_bench::chat_workload(&pdgate_bench::ChatWorkloadConfig {
        conversations: 1,
        turns: 2,
        think_time_ms: (0, 0),
        ..Default::default()
    });
    let report = replay(&ReplayConfig::new(url, "m"), work).await.unwrap();
    assert_eq!((report.requests, report.ok), (2, 2));
    let bodies = seen.bodies.lock().unwrap();
    assert_eq!(bodies[0]["messages"][0]["role"], "system");
    assert_eq!(bodies[1]["messages"].as_array().map(Vec::len), Some(4));
}

#[tokio::test]
async fn several_urls_take_the_requests_in_turn() {
    let (seen_a, seen_b) = (Arc::new(Seen::default()), Arc::new(Seen::default()));
    let app = |seen: &Arc<Seen>| {
        Router::new()
            .route("/v1/completions", post(completions))
            .with_state(seen.clone())
    };
    let (a, b) = (serve(app(&seen_a)).await, serve(app(&seen_b)).await);
    let work: Vec<WorkItem> = (0..6u32)
        .map(|i| WorkItem {
            prompt: WorkPrompt::Tokens(vec![i]),
            ..items(1).remove(0)
        })
        .collect();
    let cfg = ReplayConfig {
        urls: vec![a.clone(), format!("{b}/")],
        speedup: 0.0,
        ordered: true,
        ..ReplayConfig::new("", "m")
    };
    let report = replay(&cfg, work).await.unwrap();
    assert_eq!((report.requests, report.ok), (6, 6));
    assert_eq!(
        report.requests_by_url,
        BTreeMap::from([(a.clone(), 3), (b.clone(), 3)])
    );
    let urls: Vec<&str> = report
        .records
        .iter()
        .filter_map(|r| r.url.as_deref())
        .collect();
    assert_eq!(urls, [&a, &b, &a, &b, &a, &b]);
    let prompts = |seen: &Seen| -> Vec<Value> {
        let bodies = seen.bodies.lock().unwrap();
        bodies.iter().map(|b| b["prompt"].clone()).collect()
    };
    assert_eq!(prompts(&seen_a), [json!([0]), json!([2]), json!([4])]);
    assert_eq!(prompts(&seen_b), [json!([1]), json!([3]), json!([5])]);
}
