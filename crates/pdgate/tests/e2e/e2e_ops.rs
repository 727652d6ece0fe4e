//! Operability through the real router (issue 9, item 6): per-endpoint engine gauges on
//! `/metrics`, a slow engine `/metrics` still read, readiness vs liveness, and `/v1/models`
//! keeping the engines' own fields.

use crate::support;

use pdgate_scheduler::DEFAULT_CONFIG_YAML;
use serde_json::{json, Value};
use std::time::Duration;
use support::vllm::*;
use support::{health, health_becomes};

const LIMIT: Duration = Duration::from_secs(15);

/// A vLLM-style exposition with these gauges and a start time.
fn exposition(running: u32, waiting: u32, kv: f64) -> String {
    let l = r#"{engine="0",model_name="pdgate-sim"}"#;
    format!(
        "process_start_time_seconds 1.7959416738e+09\n\
         vllm:num_requests_running{l} {running}.0\n\
         vllm:num_requests_waiting{l} {waiting}.0\n\
         vllm:kv_cache_usage_perc{l} {kv}\n"
    )
}

async fn router(
    endpoints: Vec<pdgate_scheduler::Endpoint>,
    scrape_timeout: Option<Duration>,
) -> pdgate_server::ServerHandle {
    pdgate_scenario::fleet::router_with(endpoints, DEFAULT_CONFIG_YAML, |o| {
        o.scrape_interval = Duration::from_millis(50);
        if let Some(t) = scrape_timeout {
            o.scrape_timeout = t;
        }
    })
    .await
    .unwrap()
}

/// Waits until the router's `/metrics` text contains every line of `lines`; returns it.
async fn wait_for_lines(url: &str, lines: &[&str]) -> String {
    let metrics = format!("{url}/metrics");
    let mut last = String::new();
    let start = tokio::time::Instant::now();
    loop {
        let (_, text) = get_text(&metrics).await;
        if lines.iter().all(|l| text.lines().any(|t| t == *l)) {
            return text;
        }
        assert!(start.elapsed() < LIMIT, "missing {lines:?} in\n{last}");
        last = text;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn engine_gauges_per_endpoint_and_a_slow_metrics_is_still_read() {
    let fast = VllmEngine {
        metrics: exposition(3, 2, 0.25),
        ..VllmEngine::default()
    };
    let slow = VllmEngine {
        metrics: exposition(7, 1, 0.5),
        metrics_delay: Duration::from_millis(1500),
        ..VllmEngine::default()
    };
    let (fast, slow) = (fast.start().await, slow.start().await);
    let eps = || {
        vec![
            endpoint("d-fast", &fast, "decode"),
            endpoint("d-slow", &slow, "decode"),
        ]
    };
    let r = router(eps(), None).await;
    let url = format!("http://{}", r.addr);
    let text = wait_for_lines(
        &url,
        &[
            r#"pdgate_endpoint_requests_running{endpoint="d-fast"} 3"#,
            r#"pdgate_endpoint_requests_waiting{endpoint="d-fast"} 2"#,
            r#"pdgate_endpoint_kv_cache_usage_perc{endpoint="d-fast"} 0.25"#,
            r#"pdgate_endpoint_up{endpoint="d-fast"} 1"#,
            r#"pdgate_endpoint_requests_running{endpoint="d-slow"} 7"#,
            r#"pdgate_endpoint_requests_waiting{endpoint="d-slow"} 1"#,
            r#"pdgate_endpoint_kv_cache_usage_perc{endpoint="d-slow"} 0.5"#,
            r#"pdgate_endpoint_up{endpoint="d-slow"} 1"#,
        ],
    )
    .await;
    assert!(
        text.lines().any(|l| l == "pdgate_scrape_errors_total 0"),
        "{text}"
    );
    // The scorers read the same values.
    let snap = r.state.registry.snapshot();
    let slow_load = &snap.get("d-slow").unwrap().load;
    assert_eq!(
        (slow_load.running(), slow_load.waiting()),
        (Some(7.0), Some(1.0))
    );
    drop(r);

    // With a 500 ms scrape timeout the same engine is unknown, counted, and marked down.
    let r = router(eps(), Some(Duration::from_millis(500))).await;
    let url = format!("http://{}", r.addr);
    let text = wait_for_lines(&url, &[r#"pdgate_endpoint_up{endpoint="d-slow"} 0"#]).await;
    assert!(
        !text.contains(r#"pdgate_endpoint_requests_running{endpoint="d-slow"}"#),
        "{text}"
    );
    assert!(r.state.metrics.scrape_errors.get() >= 1);
    let slow_load = &r
        .state
        .registry
        .snapshot()
        .get("d-slow")
        .unwrap()
        .load
        .clone();
    assert_eq!(slow_load.running(), None);
}

#[tokio::test]
async fn health_is_readiness_and_live_is_liveness() {
    let (down_a, down_b) = (dead_address().await, dead_address().await);
    let r = router(
        vec![
            endpoint("d0", &down_a, "decode"),
            endpoint("d1", &down_b, "decode"),
        ],
        None,
    )
    .await;
    let url = format!("http://{}", r.addr);
    let body = health_becomes(&url, 503, LIMIT).await;
    assert_eq!(
        body,
        json!({"status": "not ready", "endpoints": 2, "serving": 0,
            "reason": "no endpoint can serve (none Ready, or every one failing its /metrics scrape)"})
    );
    assert_eq!(get_text(&format!("{url}/live")).await, (200, "ok".into()));

    // One engine comes up at a known address: ready again.
    let up = VllmEngine::default().start().await;
    r.state.registry.apply(vec![
        endpoint("d0", &down_a, "decode"),
        endpoint("d2", &up, "decode"),
    ]);
    let body = health_becomes(&url, 200, LIMIT).await;
    assert_eq!(
        (body["status"].as_str(), body["serving"].as_u64()),
        (Some("ready"), Some(1))
    );

    // No endpoints at all: not ready at once; not Ready in discovery: not ready.
    r.state.registry.apply(vec![]);
    assert_eq!(health(&url).await.0, 503);
    let mut unready = endpoint("d2", &up, "decode");
    unready.ready = false;
    r.state.registry.apply(vec![unready]);
    assert_eq!(health(&url).await.0, 503);
    assert_eq!(get_text(&format!("{url}/live")).await.0, 200);
}

#[tokio::test]
async fn models_keep_the_engines_openai_fields_only() {
    // What the engine sends: its `permission` list (and anything else outside the OpenAI
    // model object) is not kept (issue 26: `/v1/models` answers are stored bounded).
    let sent = json!({"id": MODEL, "object": "model", "created": 1_767_225_600u64,
        "owned_by": "vllm", "root": "/models/tiny", "parent": null, "max_model_len": 4096,
        "permission": [{"id": "modelperm-1", "object": "model_permission", "allow_sampling": true}]});
    let card = json!({"id": MODEL, "object": "model", "created": 1_767_225_600u64,
        "owned_by": "vllm", "root": "/models/tiny", "parent": null, "max_model_len": 4096});
    let lora = json!({"id": "tiny-lora", "object": "model", "created": 1_767_225_601u64,
        "owned_by": "vllm", "root": "/adapters/l", "parent": MODEL, "max_model_len": 4096});
    let a = VllmEngine {
        models: json!([sent]),
        ..VllmEngine::default()
    };
    let b = VllmEngine {
        // The same id from a second engine does not replace the first one's object.
        models: json!([{"id": MODEL, "object": "model", "created": 1, "owned_by": "other"}, lora]),
        ..VllmEngine::default()
    };
    let (a, b) = (a.start().await, b.start().await);
    let r = router(
        vec![endpoint("d0", &a, "decode"), endpoint("d1", &b, "decode")],
        None,
    )
    .await;
    let url = format!("http://{}", r.addr);
    let state = r.state.clone();
    wait_for(LIMIT, "both model lists", || {
        let n = state.fleet_models().len();
        async move { n == 2 }
    })
    .await;
    let (status, body) = get_text(&format!("{url}/v1/models")).await;
    assert_eq!(status, 200);
    let body: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(body, json!({"object": "list", "data": [card, lora]}));
}
