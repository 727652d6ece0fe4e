//! The vllm backend against a stand-in engine speaking vLLM 0.32's render JSON: the exact
//! request bodies, both answer shapes, and the fallbacks (404, 403, timeout, connection
//! refused, a body without token ids) counted.

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use axum::Router;
use pdgate_api::{ApiKind, InferenceRequest};
use pdgate_tokens::{Backend, Fallback, Outcome, RenderError, TokenProducer, VllmRenderer};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Bodies received, by path.
type Seen = Arc<Mutex<Vec<(String, String)>>>;

async fn completions(State(seen): State<Seen>, body: String) -> (StatusCode, String) {
    seen.lock().unwrap().push(("completions".into(), body));
    // A list: one GenerateRequest per prompt (fields beyond token_ids as vLLM sends them).
    let answer = r#"[{"request_id":"r1","token_ids":[11,12,13],"features":null,"sampling_params":{"max_tokens":5},"model":"tiny","stream":false,"cache_salt":null,"priority":0,"kv_transfer_params":null}]"#;
    (StatusCode::OK, answer.into())
}

async fn chat(State(seen): State<Seen>, body: String) -> (StatusCode, String) {
    seen.lock().unwrap().push(("chat".into(), body));
    let answer = r#"{"request_id":"r2","token_ids":[21,22],"features":null,"sampling_params":{},"model":"tiny"}"#;
    (StatusCode::OK, answer.into())
}

async fn slow(body: String) -> String {
    tokio::time::sleep(Duration::from_secs(5)).await;
    body
}

async fn forbidden() -> (StatusCode, &'static str) {
    let msg = r#"{"error":{"message":"Scale-out endpoints are disabled. Restart vllm serve with --enable-scale-out to enable them.","type":"PermissionDeniedError","param":null,"code":403}}"#;
    (StatusCode::FORBIDDEN, msg)
}

async fn garbage() -> &'static str {
    r#"{"request_id":"x"}"#
}

/// Serves `app` on 127.0.0.1:0; returns its base URL.
async fn serve(app: Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}")
}

fn parse(kind: ApiKind, body: &str) -> InferenceRequest {
    InferenceRequest::parse(kind, body.as_bytes()).unwrap()
}

fn producer(base: Option<String>, timeout_ms: u64) -> TokenProducer {
    let renderer = VllmRenderer::new(Duration::from_millis(timeout_ms));
    TokenProducer::new("tiny", Backend::Vllm { renderer, base })
}

#[tokio::test]
async fn render_sends_the_exact_bodies_and_reads_both_answer_shapes() {
    let seen: Seen = Arc::default();
    let app = Router::new()
        .route("/v1/completions/render", post(completions))
        .route("/v1/chat/completions/render", post(chat))
        .with_state(seen.clone());
    let base = serve(app).await;
    let p = producer(Some(base), 2000);
    let t = p
        .tokenize(
            &parse(
                ApiKind::Completions,
                r#"{"model":"tiny","prompt":"hi there","max_tokens":5,"stream":true}"#,
            ),
            None,
        )
        .await;
    assert_eq!(
        (t.ids, t.outcome),
        (Some(vec![11, 12, 13]), Outcome::Tokenized)
    );
    let t = p
        .tokenize(
            &parse(
                ApiKind::ChatCompletions,
                r#"{"model":"tiny","messages":[{"role":"user","content":"hi"}],"temperature":0,"add_generation_prompt":true,"chat_template_kwargs":{"enable_thinking":false}}"#,
            ),
            Some("http://127.0.0.1:9"), // the fixed vllm.url wins over the caller's engine
        )
        .await;
    assert_eq!((t.ids, t.outcome), (Some(vec![21, 22]), Outcome::Tokenized));
    // A token-id prompt needs no call.
    let t = p
        .tokenize(
            &parse(ApiKind::Completions, r#"{"model":"tiny","prompt":[4,5]}"#),
            None,
        )
        .await;
    assert_eq!(
        (t.ids, t.outcome),
        (Some(vec![4, 5]), Outcome::AlreadyTokens)
    );
    assert_eq!(
        *seen.lock().unwrap(),
        vec![
            ("completions".to_string(), r#"{"model":"tiny","prompt":"hi there"}"#.to_string()),
            (
                "chat".to_string(),
                r#"{"model":"tiny","messages":[{"role":"user","content":"hi"}],"add_generation_prompt":true,"chat_template_kwargs":{"enable_thinking":false}}"#.to_string()
            ),
        ]
    );
    assert_eq!(p.fallbacks(), 0);
}

#[tokio::test]
async fn failures_fall_back_to_the_estimate_and_are_counted() {
    let app = Router::new()
        .route("/slow/v1/completions/render", post(slow))
        .route("/off/v1/completions/render", post(forbidden))
        .route("/bad/v1/completions/render", post(garbage))
        .route("/bad/v1/chat/completions/render", post(garbage));
    let base = serve(app).await;
    let p = producer(None, 300);
    let text = parse(ApiKind::Completions, r#"{"model":"tiny","prompt":"hi"}"#);
    let chat = parse(
        ApiKind::ChatCompletions,
        r#"{"model":"tiny","messages":[{"role":"user","content":"hi"}]}"#,
    );
    let fallback = |o: Outcome| match o {
        Outcome::Fallback(Fallback::Render(e)) => e,
        other => panic!("not a render fallback: {other:?}"),
    };
    // No route on the stand-in's root: 404.
    let t = p.tokenize(&text, Some(&base)).await;
    assert_eq!(t.ids, None);
    assert_eq!(fallback(t.outcome), RenderError::Status(404));
    let t = p.tokenize(&text, Some(&format!("{base}/off"))).await;
    assert_eq!(fallback(t.outcome), RenderError::Status(403));
    let t = p.tokenize(&text, Some(&format!("{base}/slow"))).await;
    assert_eq!(fallback(t.outcome), RenderError::Timeout);
    let t = p.tokenize(&chat, Some(&format!("{base}/bad"))).await;
    assert!(matches!(fallback(t.outcome), RenderError::BadResponse(m) if m.contains("token_ids")));
    let t = p.tokenize(&text, None).await;
    assert_eq!(fallback(t.outcome), RenderError::NoEngine);
    // A closed port: bind one, drop it, then call it.
    let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = closed.local_addr().unwrap();
    drop(closed);
    let t = p.tokenize(&text, Some(&format!("http://{addr}"))).await;
    assert!(matches!(fallback(t.outcome), RenderError::Transport(_)));
    assert_eq!(p.fallbacks(), 6);
}
