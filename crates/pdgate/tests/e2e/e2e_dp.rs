//! Data-parallel endpoints (issue 5 item 3): a pod with N ranks is N endpoints
//! `<pod>-rank-<i>`; the chosen rank reaches the engine as `X-data-parallel-rank` and is
//! reported back (`x-pdgate-decode-dp-rank`).

use crate::support;

use pdgate_fleet::endpoints_file::parse_endpoints_yaml;
use pdgate_scheduler::DEFAULT_CONFIG_YAML;
use serde_json::json;
use support::{fake_engine, router, send, url};

#[tokio::test]
async fn the_chosen_rank_reaches_the_engine_and_is_reported() {
    // A fake engine: the `x-data-parallel-rank` of each request is read from its record.
    let engine = fake_engine("/v1/completions", |_| {
        axum::response::IntoResponse::into_response(axum::Json(
            json!({"choices": [{"text": "ok"}]}),
        ))
    })
    .await;
    let addr = &engine.addr;
    let last_rank = || {
        engine
            .requests()
            .last()
            .unwrap()
            .header("x-data-parallel-rank")
    };
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
    let r = router(eps, DEFAULT_CONFIG_YAML).await;
    let url = url(&r);
    let body = json!({"model": "m", "prompt": "hi", "max_tokens": 1});
    // Pinned: pod + rank 1.
    let pin = |rank| [("x-worker-instance-id", "pod"), ("x-dp-rank", rank)];
    let resp = send(&url, &pin("1"), &body).await;
    assert_eq!(resp.status, 200);
    assert_eq!(resp.headers["x-pdgate-decode-endpoint"], "pod-rank-1");
    assert_eq!(resp.headers["x-pdgate-decode-dp-rank"], "1");
    assert_eq!(last_rank().as_deref(), Some("1"));
    // Unpinned: whatever rank is picked is the one the engine gets and the client sees.
    for _ in 0..6 {
        let resp = send(&url, &[], &body).await;
        let rank = resp.headers["x-pdgate-decode-dp-rank"]
            .to_str()
            .unwrap()
            .to_string();
        assert_eq!(
            resp.headers["x-pdgate-decode-endpoint"].to_str().unwrap(),
            format!("pod-rank-{rank}")
        );
        assert_eq!(last_rank().as_deref(), Some(rank.as_str()));
    }
    // A rank the pod does not have: 400 naming the header.
    let resp = send(&url, &pin("5"), &body).await;
    assert_eq!(resp.status, 400);
    assert_eq!(
        resp.body["error"]["message"],
        "header `x-dp-rank`: endpoint `pod` has no DP rank 5 (known ranks: 0, 1)"
    );
}
