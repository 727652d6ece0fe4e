//! OpenAI API shapes, usage and prefix caching, errors, /v1/models, /metrics — over real HTTP.

mod common;

use common::*;
use pdgate_sim::{SimConfig, WorkerSpec};
use serde_json::json;

#[tokio::test]
async fn completions_text_and_tokens_non_stream() {
    let w = worker_rev("agg-0", "both", "rev-a").await;
    let r = post_with(
        &w.url(),
        "/v1/completions",
        json!({"model": "pdgate-sim", "prompt": "the quick brown fox", "max_tokens": 5}),
        &[("x-request-id", "req-42")],
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let b = &r.body;
    assert_eq!(b["object"], "text_completion");
    assert_eq!(b["id"], "cmpl-req-42");
    assert_eq!(b["model"], "pdgate-sim");
    assert_eq!(b["choices"][0]["finish_reason"], "length");
    assert_eq!(
        b["choices"][0]["text"]
            .as_str()
            .unwrap()
            .split_whitespace()
            .count(),
        5
    );
    assert_eq!(
        b["usage"],
        json!({"prompt_tokens": 4, "completion_tokens": 5, "total_tokens": 9, "prompt_tokens_details": {"cached_tokens": 0}})
    );
    assert!(b.get("kv_transfer_params").is_none());
    // Headers: worker identity (role canonicalized) and the echoed request id.
    assert_eq!(r.headers["x-sim-worker"], "agg-0");
    assert_eq!(r.headers["x-sim-role"], "prefill-decode");
    assert_eq!(r.headers["x-sim-revision"], "rev-a");
    assert_eq!(r.headers["x-request-id"], "req-42");

    // Token ids, max_completion_tokens wins over max_tokens, default 16 when absent.
    let r = post(
        &w.url(),
        "/v1/completions",
        json!({"model": "pdgate-sim", "prompt": tokens(1, 40), "max_tokens": 9, "max_completion_tokens": 3, "min_tokens": 1}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["usage"]["prompt_tokens"], 40);
    assert_eq!(r.body["usage"]["completion_tokens"], 3);
    let r = post(
        &w.url(),
        "/v1/completions",
        json!({"model": "pdgate-sim", "prompt": [tokens(1, 3)]}),
    )
    .await;
    assert_eq!(r.body["usage"]["completion_tokens"], 16);
    let s = w.stats();
    assert_eq!(
        (s.completions, s.chat_completions, s.prompt_tokens),
        (3, 0, 47)
    );
}

#[tokio::test]
async fn chat_non_stream_and_stream_shapes() {
    let w = worker(WorkerSpec::new("agg-0", "prefill-decode"), fast()).await;
    let body = json!({"model": "pdgate-sim", "messages": [{"role": "user", "content": "hello there"}], "max_completion_tokens": 4});
    let r = post(&w.url(), "/v1/chat/completions", body.clone()).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["object"], "chat.completion");
    assert!(r.body["id"].as_str().unwrap().starts_with("chatcmpl-"));
    assert_eq!(r.body["choices"][0]["message"]["role"], "assistant");
    let content = r.body["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(content.split_whitespace().count(), 4);
    // "user: hello there" is 3 words.
    assert_eq!(r.body["usage"]["prompt_tokens"], 3);
    assert!(r.headers.get("x-sim-revision").is_none());

    let mut sbody = body.clone();
    sbody["stream"] = json!(true);
    sbody["stream_options"] = json!({"include_usage": true});
    let (status, text) = post_stream(&w.url(), "/v1/chat/completions", sbody).await;
    assert_eq!(status, 200);
    let (events, done) = sse_events(&text);
    assert!(done);
    // role chunk, 4 token chunks, usage chunk.
    assert_eq!(events.len(), 6, "{text}");
    assert!(events
        .iter()
        .all(|e| e["object"] == "chat.completion.chunk"));
    assert_eq!(events[0]["choices"][0]["delta"]["role"], "assistant");
    let streamed: String = events[1..5]
        .iter()
        .map(|e| e["choices"][0]["delta"]["content"].as_str().unwrap())
        .collect();
    assert_eq!(
        streamed, content,
        "stream and non-stream give the same words"
    );
    assert_eq!(events[3]["choices"][0]["finish_reason"], json!(null));
    assert_eq!(events[4]["choices"][0]["finish_reason"], "length");
    assert_eq!(events[5]["choices"], json!([]));
    assert_eq!(events[5]["usage"]["completion_tokens"], 4);
    assert_eq!(w.stats().chat_completions, 2);
}

#[tokio::test]
async fn completions_stream_without_usage() {
    let w = worker(WorkerSpec::new("agg-0", "prefill-decode"), fast()).await;
    let (status, text) = post_stream(
        &w.url(),
        "/v1/completions",
        json!({"model": "pdgate-sim", "prompt": "a b c", "max_tokens": 3, "stream": true}),
    )
    .await;
    assert_eq!(status, 200);
    let (events, done) = sse_events(&text);
    assert!(done);
    assert_eq!(events.len(), 3);
    assert!(events
        .iter()
        .all(|e| e["object"] == "text_completion" && e.get("usage").is_none()));
    assert_eq!(events[2]["choices"][0]["finish_reason"], "length");
    assert!(text.ends_with("data: [DONE]\n\n"));
}

#[tokio::test]
async fn repeated_prompt_reports_cached_full_blocks() {
    let w = worker(WorkerSpec::new("agg-0", "prefill-decode"), fast()).await;
    // 100 tokens = 6 full blocks of 16 + 4; the shared prefix is 80 tokens = 5 blocks.
    let mut a = tokens(1, 80);
    a.extend(tokens(1000, 20));
    let mut b = tokens(1, 80);
    b.extend(tokens(5000, 20));
    let cached = |r: &Resp| r.body["usage"]["prompt_tokens_details"]["cached_tokens"].clone();
    let r = post(
        &w.url(),
        "/v1/completions",
        json!({"model": "pdgate-sim", "prompt": a, "max_tokens": 2}),
    )
    .await;
    assert_eq!(cached(&r), 0);
    let r = post(
        &w.url(),
        "/v1/completions",
        json!({"model": "pdgate-sim", "prompt": a, "max_tokens": 2}),
    )
    .await;
    assert_eq!(cached(&r), 96, "the same prompt hits its 6 full blocks");
    let r = post(
        &w.url(),
        "/v1/completions",
        json!({"model": "pdgate-sim", "prompt": b, "max_tokens": 2}),
    )
    .await;
    assert_eq!(cached(&r), 80, "another prompt hits the 5 shared blocks");
    let s = w.stats();
    assert_eq!((s.cached_tokens, s.prompt_tokens), (176, 300));
    assert_eq!(
        s.kv_blocks_used, 0,
        "nothing stays referenced after the requests"
    );
}

#[tokio::test]
async fn lru_evicts_the_oldest_unreferenced_blocks() {
    let cfg = SimConfig {
        block_size: 4,
        num_gpu_blocks: 8,
        ..fast()
    };
    let w = worker(WorkerSpec::new("agg-0", "prefill-decode"), cfg).await;
    let run = |prompt: Vec<u32>| {
        let url = w.url();
        async move {
            let r = post(
                &url,
                "/v1/completions",
                json!({"model": "pdgate-sim", "prompt": prompt, "max_tokens": 1}),
            )
            .await;
            assert_eq!(r.status, 200, "{}", r.body);
            r.body["usage"]["prompt_tokens_details"]["cached_tokens"]
                .as_u64()
                .unwrap()
        }
    };
    // 14 tokens = 3 full blocks (+ a partial one); each request needs 4 blocks.
    let (a, b, c) = (tokens(100, 14), tokens(200, 14), tokens(300, 14));
    assert_eq!(run(a.clone()).await, 0);
    assert_eq!(run(a.clone()).await, 12);
    assert_eq!(run(b.clone()).await, 0);
    // Cached: a's 3 blocks (older), b's 3; c takes the 2 free blocks and evicts a's two
    // last blocks (a prompt's tail goes first).
    assert_eq!(run(c.clone()).await, 0);
    assert_eq!(
        run(b.clone()).await,
        12,
        "b was used more recently: still cached"
    );
    assert_eq!(run(a.clone()).await, 4, "a kept only its first block");
    // A prompt that can never fit is refused rather than queued forever.
    let r = post(
        &w.url(),
        "/v1/completions",
        json!({"model": "pdgate-sim", "prompt": tokens(1, 40), "max_tokens": 1}),
    )
    .await;
    assert_eq!(r.status, 400);
    assert_eq!(
        r.body["error"]["message"],
        "the request needs 11 KV blocks (40 prompt + 1 output tokens); the cache holds 8"
    );
}

#[tokio::test]
async fn errors_are_openai_bodies() {
    let w = worker(WorkerSpec::new("agg-0", "prefill-decode"), fast()).await;
    let r = post(
        &w.url(),
        "/v1/completions",
        json!({"model": "other", "prompt": "x"}),
    )
    .await;
    assert_eq!(r.status, 404);
    assert_eq!(
        r.body,
        json!({"error": {"message": "The model `other` does not exist.", "type": "not_found_error", "code": 404}})
    );
    assert_eq!(r.headers["x-sim-worker"], "agg-0");
    let r = post(&w.url(), "/v1/completions", json!({"model": "pdgate-sim"})).await;
    assert_eq!(r.status, 400);
    assert_eq!(
        r.body["error"]["message"],
        "missing required field `prompt`"
    );
    assert_eq!(r.body["error"]["type"], "invalid_request_error");
    let raw = reqwest::Client::new()
        .post(format!("{}/v1/chat/completions", w.url()))
        .body("{nope")
        .send()
        .await
        .unwrap();
    assert_eq!(raw.status(), 400);
    let r = post(
        &w.url(),
        "/v1/completions",
        json!({"model": "pdgate-sim", "prompt": "x", "max_tokens": 0}),
    )
    .await;
    assert_eq!(
        (r.status, r.body["error"]["message"].as_str()),
        (400, Some("max_tokens must be at least 1"))
    );
    let r = post(
        &w.url(),
        "/v1/completions",
        json!({"model": "pdgate-sim", "prompt": "x", "kv_transfer_params": 5}),
    )
    .await;
    assert_eq!(r.status, 400);
}

#[tokio::test]
async fn models_health_and_metrics() {
    let w = worker(WorkerSpec::new("agg-0", "prefill-decode"), fast()).await;
    let get = |path: &str| reqwest::get(format!("{}{path}", w.url()));
    let models: serde_json::Value = get("/v1/models").await.unwrap().json().await.unwrap();
    assert_eq!(models["object"], "list");
    assert_eq!(models["data"][0]["id"], "pdgate-sim");
    assert_eq!(models["data"][0]["object"], "model");
    assert_eq!(models["data"][0]["owned_by"], "pdgate-sim");
    assert_eq!(models["data"][0]["max_model_len"], 131072);
    let health = get("/health").await.unwrap();
    assert_eq!(health.status(), 200);
    assert_eq!(health.headers()["x-sim-role"], "prefill-decode");

    let prompt = tokens(1, 40);
    for _ in 0..2 {
        post(
            &w.url(),
            "/v1/completions",
            json!({"model": "pdgate-sim", "prompt": prompt, "max_tokens": 3}),
        )
        .await;
    }
    let m = get("/metrics").await.unwrap().text().await.unwrap();
    let l = r#"{engine="0",model_name="pdgate-sim"}"#;
    assert_metric_lines(
        &m,
        &[
            format!("vllm:num_requests_running{l} 0"),
            format!("vllm:num_requests_waiting{l} 0"),
            format!("vllm:kv_cache_usage_perc{l} 0"),
            format!("vllm:prompt_tokens_total{l} 80"),
            format!("vllm:generation_tokens_total{l} 6"),
            format!("vllm:prefix_cache_queries_total{l} 80"),
            format!("vllm:prefix_cache_hits_total{l} 32"),
            r#"vllm:request_success_total{engine="0",finished_reason="length",model_name="pdgate-sim"} 2"#.to_string(),
            r#"vllm:cache_config_info{block_size="16",engine="0",model_name="pdgate-sim",num_gpu_blocks="16384"} 1"#.to_string(),
            format!("vllm:time_to_first_token_seconds_count{l} 2"),
            format!("vllm:e2e_request_latency_seconds_count{l} 2"),
        ],
    );
}

#[tokio::test]
async fn fleet_on_ephemeral_ports_and_shutdown() {
    let specs = vec![
        WorkerSpec::new("prefill-0", "prefill").with_revision("r1"),
        WorkerSpec::new("decode-0", "decode").with_revision("r1"),
    ];
    let mut fleet = pdgate_sim::spawn_fleet(specs, fast(), "127.0.0.1", 0)
        .await
        .unwrap();
    assert_ne!(fleet[0].addr(), fleet[1].addr());
    assert_ne!(fleet[0].engine_id(), fleet[1].engine_id());
    let info = get_json(&format!("{}/sim/info", fleet[1].url())).await;
    assert_eq!(
        (info["name"].as_str(), info["role"].as_str()),
        (Some("decode-0"), Some("decode"))
    );
    assert_eq!(info["engine_id"], fleet[1].engine_id());
    let d = fleet.pop().unwrap();
    let url = d.url();
    d.shutdown().await;
    assert!(
        reqwest::get(format!("{url}/health")).await.is_err(),
        "the listener is closed"
    );
    drop(fleet);
    let bad =
        pdgate_sim::spawn_fleet(vec![WorkerSpec::new("x", "gpu")], fast(), "127.0.0.1", 0).await;
    assert!(bad
        .err()
        .unwrap()
        .to_string()
        .contains("unknown role \"gpu\""));
}

/// `process_start_time_seconds` of a worker, as real vLLM's process collector exports it.
async fn start_time(w: &pdgate_sim::WorkerHandle) -> f64 {
    let m = metrics(w).await;
    let line = (m.lines())
        .find(|l| l.starts_with("process_start_time_seconds "))
        .unwrap_or_else(|| panic!("no process_start_time_seconds in\n{m}"));
    line["process_start_time_seconds ".len()..].parse().unwrap()
}

#[tokio::test]
async fn a_worker_restarted_in_place_reports_a_new_start_time_and_an_empty_cache() {
    let w = worker(WorkerSpec::new("decode-0", "decode"), fast()).await;
    let addr = w.addr();
    let first = start_time(&w).await;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    assert!(first <= now && now - first < 60.0, "{first} vs now {now}");
    let body = json!({"model": "pdgate-sim", "prompt": tokens(1, 64), "max_tokens": 1});
    post(&w.url(), "/v1/completions", body.clone()).await;
    let warm = post(&w.url(), "/v1/completions", body.clone()).await;
    assert_eq!(
        warm.body["usage"]["prompt_tokens_details"]["cached_tokens"],
        48
    );
    w.shutdown().await;
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    let l = tokio::net::TcpListener::bind(addr).await.unwrap();
    let again = pdgate_sim::spawn_worker(WorkerSpec::new("decode-0", "decode"), fast(), l)
        .await
        .unwrap();
    assert_eq!(again.addr(), addr);
    let second = start_time(&again).await;
    assert!(second > first, "{second} must be after {first}");
    let cold = post(&again.url(), "/v1/completions", body).await;
    assert_eq!(
        cold.body["usage"]["prompt_tokens_details"]["cached_tokens"],
        0
    );
}
