use super::*;
use axum::response::IntoResponse;
use clap::Parser;
use serde_json::json;
use std::sync::{Arc, Mutex};

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    render: RenderArgs,
}

/// A fake render service answering `reply(path)`; records each request's path and body.
async fn service(
    reply: impl Fn(&str) -> axum::response::Response + Send + Sync + 'static,
) -> (String, Arc<Mutex<Vec<(String, Value)>>>) {
    let seen: Arc<Mutex<Vec<(String, Value)>>> = Arc::default();
    let (record, reply) = (seen.clone(), Arc::new(reply));
    let app = axum::Router::new().fallback(move |uri: http::Uri, body: Bytes| {
        let (record, reply) = (record.clone(), reply.clone());
        async move {
            let v = serde_json::from_slice(&body).unwrap_or(Value::Null);
            record.lock().unwrap().push((uri.path().to_string(), v));
            reply(uri.path())
        }
    });
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap().to_string();
    tokio::spawn(async move { axum::serve(l, app).await.unwrap() });
    (addr, seen)
}

fn step(args: &[&str]) -> RenderStep {
    let mut argv = vec!["t"];
    argv.extend_from_slice(args);
    Cli::parse_from(argv).render.step().unwrap().unwrap()
}

fn req(kind: ApiKind, body: Value) -> InferenceRequest {
    InferenceRequest::parse(kind, body.to_string().as_bytes()).unwrap()
}

fn rid() -> HeaderValue {
    HeaderValue::from_static("r-1")
}

fn renders(path: &str) -> axum::response::Response {
    match path {
        "/v1/completions/render" => {
            axum::Json(json!([{"request_id": "x", "token_ids": [5, 6, 7], "features": null}]))
                .into_response()
        }
        "/v1/chat/completions/render" => axum::Json(json!({"token_ids": [1, 2, 3, 4],
            "features": {"mm_hashes": {"image": []}, "mm_placeholders": {"image": []}}}))
        .into_response(),
        _ => http::StatusCode::NOT_FOUND.into_response(),
    }
}

#[tokio::test]
async fn completions_get_the_rendered_ids_as_prompt_and_chat_a_tokens_field() {
    let (addr, seen) = service(renders).await;
    let s = step(&["--render-address", &format!("http://{addr}/")]);
    let r = req(
        ApiKind::Completions,
        json!({"model": "m", "prompt": "a b c", "max_tokens": 3}),
    );
    let body = s.apply(&r, &rid()).await.unwrap().unwrap();
    assert_eq!(
        std::str::from_utf8(&body).unwrap(),
        r#"{"max_tokens":3,"model":"m","prompt":[5,6,7]}"#
    );
    let chat = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
    let body = s
        .apply(&req(ApiKind::ChatCompletions, chat.clone()), &rid())
        .await
        .unwrap()
        .unwrap();
    let mut want = chat.clone();
    want["tokens"] = json!({"token_ids": [1, 2, 3, 4]});
    assert_eq!(serde_json::from_slice::<Value>(&body).unwrap(), want);
    let rendered = InferenceRequest::parse(ApiKind::ChatCompletions, &body).unwrap();
    assert_eq!(rendered.rendered_token_ids(), Some(vec![1, 2, 3, 4]));
    // The render service saw each whole body, on its path.
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[0].0, "/v1/completions/render");
    assert_eq!(seen[0].1["prompt"], "a b c");
    assert_eq!(seen[1], ("/v1/chat/completions/render".to_string(), chat));
}

#[tokio::test]
async fn token_prompts_generate_and_other_apis_make_no_call() {
    let (addr, seen) = service(renders).await;
    let s = step(&["--render-address", &addr, "--render-max-total-tokens", "3"]);
    let gen = json!({"token_ids": [1, 2, 3], "sampling_params": {}});
    assert_eq!(
        s.apply(&req(ApiKind::Generate, gen), &rid()).await,
        Ok(None)
    );
    let toks = json!({"model": "m", "prompt": [1, 2]});
    assert_eq!(
        s.apply(&req(ApiKind::Completions, toks), &rid()).await,
        Ok(None)
    );
    let msg = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
    assert_eq!(
        s.apply(&req(ApiKind::Messages, msg), &rid()).await,
        Ok(None)
    );
    assert!(seen.lock().unwrap().is_empty());
    // The limit holds without a call too.
    let long = json!({"token_ids": [1, 2, 3, 4], "sampling_params": {}});
    let e = s
        .apply(&req(ApiKind::Generate, long), &rid())
        .await
        .unwrap_err();
    assert_eq!(
        (e.status(), e.to_string().as_str()),
        (400, "too many total tokens: got 4, max 3")
    );
}

#[tokio::test]
async fn limits_and_render_failures_map_to_statuses() {
    let (addr, _) = service(|path| match path {
        "/v1/chat/completions/render" => axum::Json(json!({"token_ids": [1, 2, 3, 4, 5],
            "features": {"mm_hashes": {"image": ["h1", "h2"]},
                         "mm_placeholders": {"image": [{"offset": 1, "length": 30}, {"offset": 40, "length": 30}]}}}))
        .into_response(),
        _ => (http::StatusCode::UNPROCESSABLE_ENTITY, "bad prompt").into_response(),
    })
    .await;
    let chat = || {
        req(
            ApiKind::ChatCompletions,
            json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]}),
        )
    };
    let s = step(&[
        "--render-address",
        &addr,
        "--render-max-total-placeholder-tokens",
        "59",
    ]);
    let e = s.apply(&chat(), &rid()).await.unwrap_err();
    assert_eq!(
        (e.status(), e.to_string().as_str()),
        (400, "too many placeholder tokens: got 60, max 59")
    );
    // Under the limit, the features travel with the ids.
    let s = step(&["--render-address", &addr]);
    let body = s.apply(&chat(), &rid()).await.unwrap().unwrap();
    let v: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(
        v["tokens"]["features"]["mm_hashes"]["image"],
        json!(["h1", "h2"])
    );
    // A 4xx from the render service keeps its status.
    let text = req(ApiKind::Completions, json!({"model": "m", "prompt": "x"}));
    let e = s.apply(&text, &rid()).await.unwrap_err();
    assert_eq!(
        (e.status(), e.to_string().as_str()),
        (422, "render rejected the request: HTTP 422: bad prompt")
    );

    let (addr, _) =
        service(|_| (http::StatusCode::INTERNAL_SERVER_ERROR, "boom").into_response()).await;
    let e = step(&["--render-address", &addr])
        .apply(&text, &rid())
        .await
        .unwrap_err();
    assert_eq!(
        (e.status(), e.to_string().as_str()),
        (502, "render failed: HTTP 500")
    );
    let (addr, _) = service(|_| axum::Json(json!([])).into_response()).await;
    let e = step(&["--render-address", &addr])
        .apply(&text, &rid())
        .await
        .unwrap_err();
    assert_eq!(
        (e.status(), e.to_string().as_str()),
        (502, "render failed: answer lists 0 prompts, expected 1")
    );
}

#[tokio::test]
async fn a_silent_render_service_is_a_504_and_a_closed_one_a_502() {
    // Accepts connections and never answers.
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((c, _)) = l.accept().await {
            held.push(c);
        }
    });
    let text = req(ApiKind::Completions, json!({"model": "m", "prompt": "x"}));
    let s = step(&["--render-address", &addr, "--render-timeout-ms", "200"]);
    let e = s.apply(&text, &rid()).await.unwrap_err();
    assert_eq!(
        (e.status(), e.to_string().as_str()),
        (504, "render did not answer within 200 ms")
    );
    // Nothing listens: refused.
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().to_string()
    };
    let e = step(&["--render-address", &closed])
        .apply(&text, &rid())
        .await
        .unwrap_err();
    assert_eq!(e.status(), 502, "{e}");
}

#[test]
fn bad_addresses_are_refused_naming_the_flag() {
    for a in ["https://r:1", "r:1/path", ""] {
        let e = Cli::parse_from(["t", "--render-address", a])
            .render
            .step()
            .err()
            .unwrap();
        assert!(e.starts_with(&format!("--render-address `{a}`")), "{e}");
    }
    assert!(Cli::parse_from(["t"]).render.step().unwrap().is_none());
}
