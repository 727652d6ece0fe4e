//! The coordinator's pre-steps through the real router, before any leg: `render` (the engine's
//! token ids sent on every leg, a render service's limit refused with a 400) and
//! `replace-media-urls` (remote images inlined, private and loopback targets refused, and no
//! API able to hand an engine a remote media URL the step did not check).

use crate::e2e_apis::post;
use crate::support;

use axum::response::IntoResponse;
use pdgate_scheduler::{Endpoint, DEFAULT_CONFIG_YAML};
use serde_json::{json, Value};
use support::{fake_engine, labels};

#[tokio::test]
async fn the_render_step_sends_engine_token_ids_on_every_leg() {
    // A simulator is the render service (vLLM's /v1/*/render); a fake engine records legs.
    let sim = support::sim_worker(spec_both("render-0"), support::sim_config(100.0)).await;
    let engine = fake_engine("/v1/completions", |_| {
        axum::Json(json!({"id": "c", "choices": []})).into_response()
    })
    .await;
    let render = pdgate_server::RenderArgs {
        render_address: Some(format!("http://{}", sim.addr())),
        render_timeout_ms: 5_000,
        render_max_idle_per_host: 4,
        render_idle_timeout_ms: 1_000,
        render_max_total_tokens: 5,
        render_max_total_placeholder_tokens: 0,
    };
    let steps = pdgate_server::pre_steps::PreSteps {
        media: None,
        render: render.step().unwrap(),
        tokens_in_prefill: false,
    };
    let r = pdgate_scenario::fleet::router_with(
        vec![Endpoint::new(
            "e0",
            engine.addr.clone(),
            labels("decode", None),
        )],
        DEFAULT_CONFIG_YAML,
        |o| o.pre_steps = steps,
    )
    .await
    .unwrap();
    // What the engine's own tokenizer makes of the text.
    let tok: Value = reqwest::Client::new()
        .post(format!("{}/tokenize", sim.url()))
        .json(&json!({"prompt": "alpha beta gamma"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let body = json!({"model": "pdgate-sim", "prompt": "alpha beta gamma", "max_tokens": 2});
    let (status, _, _, text) = post(&r, "/v1/completions", &body).await;
    assert_eq!(status, 200, "{text}");
    let got = engine.requests();
    assert_eq!(got.len(), 1, "one leg");
    assert_eq!(
        got[0].json()["prompt"],
        tok["tokens"],
        "the leg carries the rendered ids"
    );

    // Over the limit: 400 naming it, no leg sent.
    let long = json!({"model": "pdgate-sim", "prompt": "a b c d e f", "max_tokens": 2});
    let (status, _, _, text) = post(&r, "/v1/completions", &long).await;
    assert_eq!(status, 400, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["error"]["message"], "too many total tokens: got 6, max 5");
    assert_eq!(engine.requests().len(), 1);
    let m = support::metrics(&support::url(&r)).await;
    assert_eq!(
        support::metric(
            &m,
            "pdgate_pre_steps_total{outcome=\"changed\",step=\"render\"}"
        ),
        1
    );
    assert_eq!(
        support::metric(
            &m,
            "pdgate_pre_steps_total{outcome=\"failed\",step=\"render\"}"
        ),
        1
    );
}

fn spec_both(name: &str) -> pdgate_sim::WorkerSpec {
    support::spec(name, "both", None)
}

#[tokio::test]
async fn replace_media_urls_inlines_images_before_any_leg_and_refuses_loopback() {
    // An image server on loopback (reachable only through the tests' seam).
    let png: &'static [u8] = b"\x89PNG\r\n\x1a\nfake-image-bytes";
    let images = fake_engine("/cat.png", move |_| {
        ([(http::header::CONTENT_TYPE, "image/png")], png).into_response()
    })
    .await;
    let engine = fake_engine("/v1/chat/completions", |_| {
        axum::Json(json!({"id": "c", "choices": []})).into_response()
    })
    .await;
    let router = |seam: bool| {
        let eps = vec![Endpoint::new(
            "e0",
            engine.addr.clone(),
            labels("decode", None),
        )];
        let media = pdgate_server::MediaUrlSettings {
            allow_loopback_for_tests: seam,
            ..Default::default()
        };
        pdgate_scenario::fleet::router_with(eps, DEFAULT_CONFIG_YAML, move |o| {
            o.pre_steps = pdgate_server::pre_steps::PreSteps {
                media: Some(media),
                ..Default::default()
            }
        })
    };
    let url = format!("http://{}/cat.png", images.addr);
    let chat = json!({"model": "m", "messages": [{"role": "user", "content": [
        {"type": "text", "text": "what is this?"},
        {"type": "image_url", "image_url": {"url": url, "detail": "low"}}]}]});
    let r = router(true).await.unwrap();
    let (status, _, _, text) = post(&r, "/v1/chat/completions", &chat).await;
    assert_eq!(status, 200, "{text}");
    let leg = engine.requests()[0].json();
    let mut want = chat.clone();
    want["messages"][0]["content"][1]["image_url"]["url"] =
        json!("data:image/png;base64,iVBORw0KGgpmYWtlLWltYWdlLWJ5dGVz");
    assert_eq!(leg, want, "the engine got the image inline, `detail` kept");
    assert_eq!(images.requests().len(), 1);

    // Without the seam loopback is refused like any SSRF target: 400, no leg, no download.
    let r = router(false).await.unwrap();
    let (status, _, _, text) = post(&r, "/v1/chat/completions", &chat).await;
    assert_eq!(status, 400, "{text}");
    let msg = serde_json::from_str::<Value>(&text).unwrap()["error"]["message"].clone();
    assert!(
        msg.as_str()
            .unwrap()
            .starts_with("messages[0].content[1].image_url.url"),
        "{msg}"
    );
    assert_eq!((engine.requests().len(), images.requests().len()), (1, 1));
    let m = support::metrics(&support::url(&r)).await;
    assert_eq!(
        support::metric(
            &m,
            "pdgate_pre_steps_total{outcome=\"failed\",step=\"replace-media-urls\"}"
        ),
        1
    );
}

#[tokio::test]
async fn with_replace_media_urls_on_no_api_can_hand_an_engine_an_unchecked_url() {
    let engine = fake_engine("/v1/messages", |_| {
        axum::Json(json!({"id": "m"})).into_response()
    })
    .await;
    let eps = vec![Endpoint::new(
        "e0",
        engine.addr.clone(),
        labels("decode", None),
    )];
    let r = pdgate_scenario::fleet::router_with(eps, DEFAULT_CONFIG_YAML, |o| {
        o.pre_steps = pdgate_server::pre_steps::PreSteps {
            media: Some(Default::default()),
            ..Default::default()
        }
    })
    .await
    .unwrap();
    let metadata = "http://169.254.169.254/latest/meta-data/";
    let cases = [
        (
            "/v1/messages",
            json!({"model": "m", "max_tokens": 3, "messages": [{"role": "user", "content": [
                {"type": "image", "source": {"type": "url", "url": metadata}}]}]}),
            "messages[0].content[0].source.url",
        ),
        (
            "/v1/responses",
            json!({"model": "m", "input": [{"role": "user", "content": [
                {"type": "input_image", "image_url": metadata}]}]}),
            "input[0].content[0].image_url",
        ),
        (
            "/v1/chat/completions",
            json!({"model": "m", "messages": [{"role": "user", "content": [
                {"type": "video_url", "video_url": {"url": metadata}}]}]}),
            "messages[0].content[0].video_url.url",
        ),
        (
            "/v1/chat/completions",
            json!({"model": "m", "messages": [{"role": "user", "content": [
                {"type": "image_url", "image_url": metadata}]}]}),
            "messages[0].content[0].image_url",
        ),
    ];
    // Regression: nested past serde_json's 128 levels, `messages` could not be read as a tree
    // and the check passed over it, video URL and all.
    let mut deep = json!(1);
    for _ in 0..130 {
        deep = Value::Array(vec![deep]);
    }
    let deep_chat = json!({"model": "m", "messages": [{"role": "user", "content": [
        {"type": "video_url", "video_url": {"url": metadata}},
        {"type": "text", "text": "x", "extra": deep}]}]});
    // Regression (second adversarial try): vLLM reads a chat part by its media key with or
    // without `type`, and Anthropic / Responses media can sit nested (tool results, system,
    // top-level input items, function call outputs).
    let chat =
        |part: Value| json!({"model": "m", "messages": [{"role": "user", "content": [part]}]});
    let nested = [
        (
            "/v1/chat/completions",
            chat(json!({"image_url": metadata})),
            "messages[0].content[0].image_url",
        ),
        (
            "/v1/chat/completions",
            chat(json!({"video_url": {"url": metadata}})),
            "messages[0].content[0].video_url.url",
        ),
        (
            "/v1/chat/completions",
            chat(json!({"uuid": "u1", "image_url": {"url": metadata}})),
            "messages[0].content[0].image_url.url",
        ),
        (
            "/v1/embeddings",
            chat(json!({"audio_url": metadata})),
            "messages[0].content[0].audio_url",
        ),
        (
            "/v1/messages",
            json!({"model": "m", "max_tokens": 3, "messages": [{"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "t", "content": [
                    {"type": "image", "source": {"type": "url", "url": metadata}}]}]}]}),
            "messages[0].content[0].content[0].source.url",
        ),
        (
            "/v1/messages",
            json!({"model": "m", "max_tokens": 3,
                "system": [{"type": "image", "source": {"type": "url", "url": metadata}}],
                "messages": [{"role": "user", "content": "hi"}]}),
            "system[0].source.url",
        ),
        (
            "/v1/responses",
            json!({"model": "m", "input": [{"type": "input_image", "image_url": metadata}]}),
            "input[0].image_url",
        ),
        (
            "/v1/responses",
            json!({"model": "m", "input": [{"type": "function_call_output", "call_id": "c",
                "output": [{"type": "input_image", "image_url": metadata}]}]}),
            "input[0].output[0].image_url",
        ),
        (
            "/v1/responses",
            json!({"model": "m", "input": [{"role": "user", "content": [
                {"type": "image_url", "image_url": {"url": metadata}}]}]}),
            "input[0].content[0].image_url.url",
        ),
    ];
    let cases = cases.into_iter().chain(nested).chain([(
        "/v1/chat/completions",
        deep_chat,
        "field `messages` cannot be read: recursion limit exceeded; with replace-media-urls on",
    )]);
    for (path, body, at) in cases {
        let (status, _, _, text) = post(&r, path, &body).await;
        assert_eq!(status, 400, "{path}: {text}");
        let v: Value = serde_json::from_str(&text).unwrap();
        let msg = v["error"]["message"].clone();
        assert!(msg.as_str().unwrap().starts_with(at), "{path}: {msg}");
    }
    assert!(engine.requests().is_empty(), "no leg was sent");
}
