//! The data-layer plugins through the real router: a `dataLayer` section whose
//! `metrics-data-source` moves the scrape to `/engine/metrics` and whose
//! `core-metrics-extractor` reads each endpoint's metric names by its `llm-d.ai/engine-type`
//! label. Two fake engines serve their metrics only on that path, one with SGLang's names:
//! the router reads both (its `/metrics` shows the gauges), never asks for `/metrics`, and
//! `queue-scorer` sends every request to the engine with the shorter queue.

use crate::support;

use axum::routing::{any, get};
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use support::vllm::{endpoint, get_text, MODEL};

const LIMIT: Duration = Duration::from_secs(15);

const CONFIG: &str = "\
apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: decode-filter
- type: queue-scorer
- type: max-score-picker
- name: engine-scrape
  type: metrics-data-source
  parameters:
    path: /engine/metrics
- type: core-metrics-extractor
  parameters:
    engineConfigs:
    - name: sglang
      queuedRequestsSpec: sglang:num_queue_reqs{priority=\"normal\"}
      runningRequestsSpec: sglang:num_running_reqs
      kvUsageSpec: sglang:token_usage
dataLayer:
  sources:
  - pluginRef: engine-scrape
    extractors:
    - pluginRef: core-metrics-extractor
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: decode-filter
  - pluginRef: queue-scorer
  - pluginRef: max-score-picker
";

/// A fake engine: `metrics` on `/engine/metrics` only, the model list, completions; every
/// path asked for is recorded.
async fn engine(metrics: &'static str) -> (String, Arc<Mutex<Vec<String>>>) {
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let record = seen.clone();
    let models = json!({"object": "list", "data": [{"id": MODEL, "object": "model"}]});
    let completion = json!({"id": "cmpl-1", "object": "text_completion", "model": MODEL,
        "choices": [{"index": 0, "text": "x", "finish_reason": "length"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}});
    let app = axum::Router::new()
        .route("/engine/metrics", get(move || async move { metrics }))
        .route("/v1/models", get(move || async move { axum::Json(models) }))
        .route(
            "/v1/completions",
            any(move || async move { axum::Json(completion) }),
        )
        .layer(axum::middleware::from_fn(
            move |req: axum::extract::Request, next: axum::middleware::Next| {
                let record = record.clone();
                async move {
                    record.lock().unwrap().push(req.uri().path().to_string());
                    next.run(req).await
                }
            },
        ));
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap().to_string();
    tokio::spawn(async move { axum::serve(l, app).await.unwrap() });
    (addr, seen)
}

/// SGLang's names: 6 queued at normal priority (the spec's series), 3 at low priority (not
/// read), 2 running, usage 0.5.
const SGLANG: &str = "sglang:num_queue_reqs{priority=\"normal\"} 6\n\
    sglang:num_queue_reqs{priority=\"low\"} 3\n\
    sglang:num_running_reqs 2\n\
    sglang:token_usage 0.5\n\
    vllm:num_requests_waiting 0\n";

/// vLLM's names (the default engine): 1 waiting, 0 running, usage 0.25.
const VLLM: &str = "vllm:num_requests_waiting{engine=\"0\"} 1\n\
    vllm:num_requests_running{engine=\"0\"} 0\n\
    vllm:kv_cache_usage_perc{engine=\"0\"} 0.25\n";

#[tokio::test]
async fn the_data_layer_sets_the_metrics_path_and_names_and_routing_follows_the_gauges() {
    let (sglang_addr, sglang_seen) = engine(SGLANG).await;
    let (vllm_addr, vllm_seen) = engine(VLLM).await;
    let mut sglang = endpoint("sglang-0", &sglang_addr, "decode");
    sglang
        .labels
        .insert("llm-d.ai/engine-type".into(), "sglang".into());
    let vllm = endpoint("vllm-0", &vllm_addr, "decode");
    let r = pdgate_scenario::fleet::router_with(vec![sglang, vllm], CONFIG, |o| {
        o.scrape_interval = Duration::from_millis(50);
    })
    .await
    .unwrap();
    let url = format!("http://{}", r.addr);

    // The gauges, read from /engine/metrics with each engine's names: SGLang depth 6 + 2.
    let want = [
        r#"pdgate_endpoint_requests_waiting{endpoint="sglang-0"} 6"#,
        r#"pdgate_endpoint_requests_running{endpoint="sglang-0"} 2"#,
        r#"pdgate_endpoint_kv_cache_usage_perc{endpoint="sglang-0"} 0.5"#,
        r#"pdgate_endpoint_up{endpoint="sglang-0"} 1"#,
        r#"pdgate_endpoint_requests_waiting{endpoint="vllm-0"} 1"#,
        r#"pdgate_endpoint_requests_running{endpoint="vllm-0"} 0"#,
        r#"pdgate_endpoint_kv_cache_usage_perc{endpoint="vllm-0"} 0.25"#,
        r#"pdgate_endpoint_up{endpoint="vllm-0"} 1"#,
    ];
    let start = tokio::time::Instant::now();
    let text = loop {
        let (_, text) = get_text(&format!("{url}/metrics")).await;
        if want.iter().all(|w| text.lines().any(|l| l == *w)) {
            break text;
        }
        assert!(start.elapsed() < LIMIT, "missing {want:?} in\n{text}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(
        text.lines().any(|l| l == "pdgate_scrape_errors_total 0"),
        "{text}"
    );
    // Until the model lists are in, a request could find no endpoint serving its model.
    support::wait_until(LIMIT, "model lists read", || {
        let snap = r.state.registry.snapshot();
        snap.endpoints.iter().all(|e| e.load.models().is_some())
    })
    .await;

    // queue-scorer: depth 1 (vllm-0) beats 8 (sglang-0), every time.
    let body: Value = json!({"model": MODEL, "prompt": "hello", "max_tokens": 1});
    for _ in 0..4 {
        let reply = support::send(&url, &[], &body).await;
        assert_eq!(reply.status, 200, "{reply:?}");
        assert_eq!(reply.served()[2], "vllm-0", "{reply:?}");
    }
    let paths = |seen: &Arc<Mutex<Vec<String>>>| seen.lock().unwrap().clone();
    let count = |p: &[String], path: &str| p.iter().filter(|x| *x == path).count();
    let (s, v) = (paths(&sglang_seen), paths(&vllm_seen));
    assert_eq!(
        (count(&s, "/v1/completions"), count(&v, "/v1/completions")),
        (0, 4)
    );
    // Only the configured path was scraped.
    assert!(count(&s, "/engine/metrics") >= 1 && count(&v, "/engine/metrics") >= 1);
    assert_eq!((count(&s, "/metrics"), count(&v, "/metrics")), (0, 0));
}
