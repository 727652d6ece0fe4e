//! Routing rules through the real router: requests go only to endpoints serving their model,
//! `/v1/models` follows the endpoints file, unknown routes get OpenAI error bodies, and a
//! request abandoned before its response head is counted as 499.

use crate::support;

use pdgate_scenario::fleet::{self, FleetSpec};
use pdgate_scheduler::{Endpoint, Scheduler, DEFAULT_CONFIG_YAML};
use pdgate_server::{serve_on, EndpointSource, ServeOptions};
use pdgate_sim::{SimConfig, WorkerHandle, WorkerSpec};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use support::{endpoints_yaml, router, sim_worker, wait_until};

/// A decode worker without labels serving `model`, answering after `slow_start_ms`.
async fn worker(name: &str, model: &str, slow_start_ms: u64) -> WorkerHandle {
    let spec = WorkerSpec {
        name: name.into(),
        role: "decode".into(),
        revision: None,
        labels: BTreeMap::new(),
    };
    let cfg = SimConfig {
        model: model.into(),
        speedup: 100.0,
        slow_start: Duration::from_millis(slow_start_ms),
        ..SimConfig::default()
    };
    sim_worker(spec, cfg).await
}

const WAIT: Duration = Duration::from_secs(3);

async fn models(url: &str) -> Vec<String> {
    let v: Value = reqwest::get(format!("{url}/v1/models"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    v["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_reach_only_endpoints_serving_their_model_and_models_follow_the_file() {
    let a = worker("serves-a", "model-a", 0).await;
    let b = worker("serves-b", "model-b", 0).await;
    let dir = std::env::temp_dir().join(format!("pdgate-routing-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("endpoints.yaml");
    std::fs::write(&file, endpoints_yaml([&a, &b])).unwrap();

    let s = Scheduler::from_yaml(DEFAULT_CONFIG_YAML, "default").unwrap();
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let mut opts = ServeOptions::new(
        Arc::new(s),
        EndpointSource::File {
            path: file.clone(),
            poll: Duration::from_millis(50),
        },
    );
    opts.scrape_interval = Duration::from_millis(30);
    let router = serve_on(l, opts).await.unwrap();
    let url = support::url(&router);
    let state = router.state.clone();
    wait_until(WAIT, "2 models", || state.fleet_models().len() == 2).await;
    assert_eq!(models(&url).await, ["model-a", "model-b"]);

    let client = reqwest::Client::new();
    for i in 0..20 {
        let model = if i % 2 == 0 { "model-a" } else { "model-b" };
        let r = client
            .post(format!("{url}/v1/completions"))
            .json(&json!({"model": model, "prompt": "the same prompt for both models", "max_tokens": 2}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "request {i}");
        let want = if i % 2 == 0 { "serves-a" } else { "serves-b" };
        assert_eq!(r.headers()["x-pdgate-decode-endpoint"], want, "request {i}");
    }

    // Drop serves-b from the file: its model disappears from /v1/models and becomes a 404.
    std::fs::write(&file, endpoints_yaml([&a])).unwrap();
    wait_until(WAIT, "1 model", || state.fleet_models().len() == 1).await;
    assert_eq!(models(&url).await, ["model-a"]);
    let r = client
        .post(format!("{url}/v1/completions"))
        .json(&json!({"model": "model-b", "prompt": "x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn unknown_routes_and_methods_get_error_bodies_in_their_apis_form() {
    let a = worker("w", "m", 0).await;
    let eps = vec![Endpoint::new("w", a.addr().to_string(), BTreeMap::new())];
    let router = router(eps, DEFAULT_CONFIG_YAML).await;
    let url = support::url(&router);
    let client = reqwest::Client::new();

    let r = client
        .get(format!("{url}/v2/nothing"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    let b: Value = r.json().await.unwrap();
    assert_eq!(
        b,
        json!({"error": {"message": "no route for GET /v2/nothing", "type": "not_found_error", "code": 404}})
    );

    let r = client
        .get(format!("{url}/v1/completions"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 405);
    let b: Value = r.json().await.unwrap();
    assert_eq!(
        b["error"]["message"],
        "method GET is not allowed for /v1/completions"
    );
    assert_eq!(b["error"]["code"], 405);

    // Regression (adversarial try of issue 13): on Anthropic's paths the router's own 404 and
    // 405 are in Anthropic's form, as its other errors there.
    let r = client
        .get(format!("{url}/v1/messages"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 405);
    assert_eq!(
        r.json::<Value>().await.unwrap(),
        json!({"type": "error", "error": {"type": "invalid_request_error",
            "message": "method GET is not allowed for /v1/messages"}})
    );
    let r = client
        .post(format!("{url}/v1/messages/count_tokens"))
        .json(&json!({"model": "m", "messages": []}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    assert_eq!(
        r.json::<Value>().await.unwrap(),
        json!({"type": "error", "error": {"type": "not_found_error",
            "message": "no route for POST /v1/messages/count_tokens"}})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_abandoned_before_its_response_head_is_counted_as_499() {
    // The engine waits 2 s before answering; the client gives up after 200 ms.
    let slow = worker("slow", "m", 2000).await;
    let eps = vec![Endpoint::new(
        "slow",
        slow.addr().to_string(),
        BTreeMap::new(),
    )];
    let router = router(eps, DEFAULT_CONFIG_YAML).await;
    let url = support::url(&router);
    let r = reqwest::Client::new()
        .post(format!("{url}/v1/completions"))
        .timeout(Duration::from_millis(200))
        .json(&json!({"model": "m", "prompt": "x", "max_tokens": 1}))
        .send()
        .await;
    assert!(r.unwrap_err().is_timeout());
    let state = router.state.clone();
    let abandoned = || {
        state
            .metrics
            .requests
            .with_label_values(&["completions", "499"])
            .get()
    };
    wait_until(WAIT, "one 499", || abandoned() == 1).await;
    let in_flight: u32 = state.in_flight_total();
    assert_eq!(in_flight, 0);
}

#[tokio::test]
async fn the_profile_header_selects_the_phase_profile_and_an_unknown_one_is_400() {
    // The test acts as a coordinator on loopback, which the router trusts.
    let mut spec = FleetSpec::new(1, 1, 100.0);
    spec.trust = support::loopback_trusted();
    let f = fleet::start(&spec, DEFAULT_CONFIG_YAML).await.unwrap();
    let client = reqwest::Client::new();
    let body =
        json!({"model": "pdgate-sim", "prompt": (0..64).collect::<Vec<u32>>(), "max_tokens": 1});
    // A per-role router names only the phase it served, and no P/D mode.
    let (p, d) = ("x-pdgate-prefill-endpoint", "x-pdgate-decode-endpoint");
    for (header, value, served, endpoint, absent) in [
        ("x-llm-d-epp-profile", "prefill", p, "prefill-0", d),
        ("x-llm-d-epp-profile", "decode", d, "decode-0", p),
        ("EPP-Profile", "prefill", p, "prefill-0", d),
    ] {
        let r = client
            .post(format!("{}/v1/completions", f.url()))
            .header(header, value)
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{header}: {value}");
        assert_eq!(r.headers()[served], endpoint, "{header}: {value}");
        assert!(r.headers().get(absent).is_none(), "{header}: {value}");
        assert!(r.headers().get("x-pdgate-pd-mode").is_none());
    }
    let r = client
        .post(format!("{}/v1/completions", f.url()))
        .header("x-llm-d-epp-profile", "encode-all-the-things")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let b: Value = r.json().await.unwrap();
    assert_eq!(
        b["error"]["message"],
        "header `x-llm-d-epp-profile`: unknown scheduling profile `encode-all-the-things`"
    );
    assert_eq!(f.in_flight(), 0);
}
