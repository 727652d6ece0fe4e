//! Data-parallel endpoints (issue 5 item 3): a pod with N ranks is N endpoints
//! `<pod>-rank-<i>`; the chosen rank reaches the engine as `X-data-parallel-rank` and is
//! reported back (`x-pdgate-decode-dp-rank`).

use axum::extract::State;
use axum::routing::post;
use http::HeaderMap;
use pdgate_scenario::fleet;
use pdgate_scheduler::DEFAULT_CONFIG_YAML;
use pdgate_server::discovery::parse_endpoints_yaml;
use serde_json::json;
use std::sync::{Arc, Mutex};

type Seen = Arc<Mutex<Vec<Option<String>>>>;

/// A fake engine recording the `x-data-parallel-rank` of each request.
async fn engine() -> (String, Seen) {
    let seen: Seen = Arc::default();
    let app = axum::Router::new()
        .route(
            "/v1/completions",
            post(|State(seen): State<Seen>, h: HeaderMap| async move {
                let rank = h
                    .get("x-data-parallel-rank")
                    .map(|v| v.to_str().unwrap().to_string());
                seen.lock().unwrap().push(rank);
                axum::Json(json!({"choices": [{"text": "ok"}]}))
            }),
        )
        .with_state(seen.clone());
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap().to_string();
    tokio::spawn(async move { axum::serve(l, app).await.unwrap() });
    (addr, seen)
}

#[tokio::test]
async fn the_chosen_rank_reaches_the_engine_and_is_reported() {
    let (addr, seen) = engine().await;
    let eps = parse_endpoints_yaml(
        &format!(
            "endpoints:\n- name: pod\n  address: {addr}\n  labels: {{llm-d.ai/role: decode}}\n  dp_size: 2\n"
        ),
        "eps.yaml",
    )
    .unwrap();
    let names: Vec<_> = eps.iter().map(|e| (e.name.clone(), e.dp_rank)).collect();
    assert_eq!(
        names,
        [
            ("pod-rank-0".to_string(), Some(0)),
            ("pod-rank-1".to_string(), Some(1))
        ]
    );
    let r = fleet::router_with(eps, DEFAULT_CONFIG_YAML, |_| {})
        .await
        .unwrap();
    let client = reqwest::Client::new();
    let body = json!({"model": "m", "prompt": "hi", "max_tokens": 1});
    // Pinned: pod + rank 1.
    let resp = client
        .post(format!("http://{}/v1/completions", r.addr))
        .header("x-worker-instance-id", "pod")
        .header("x-dp-rank", "1")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["x-pdgate-decode-endpoint"], "pod-rank-1");
    assert_eq!(resp.headers()["x-pdgate-decode-dp-rank"], "1");
    assert_eq!(seen.lock().unwrap().last().unwrap().as_deref(), Some("1"));
    // Unpinned: whatever rank is picked is the one the engine gets and the client sees.
    for _ in 0..6 {
        let resp = client
            .post(format!("http://{}/v1/completions", r.addr))
            .json(&body)
            .send()
            .await
            .unwrap();
        let rank = resp.headers()["x-pdgate-decode-dp-rank"]
            .to_str()
            .unwrap()
            .to_string();
        assert_eq!(
            resp.headers()["x-pdgate-decode-endpoint"].to_str().unwrap(),
            format!("pod-rank-{rank}")
        );
        assert_eq!(
            seen.lock().unwrap().last().unwrap().as_deref(),
            Some(rank.as_str())
        );
    }
    // A rank the pod does not have: 400 naming the header.
    let resp = client
        .post(format!("http://{}/v1/completions", r.addr))
        .header("x-worker-instance-id", "pod")
        .header("x-dp-rank", "5")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
    let v: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(
        v["error"]["message"],
        "header `x-dp-rank`: endpoint `pod` has no DP rank 5 (known ranks: 0, 1)"
    );
}
