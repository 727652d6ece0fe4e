//! The request context end to end (issue 9 items 2–4): a retry from A to B moves the booking,
//! the session and the prefix credit to B; phases follow profile roles, not names; a client
//! that goes away aborts the legs that were running on the engines; the prefill-unavailable
//! policy applies from the first request on.

use crate::support;

use pdgate_coordinator::PrefillFallback;
use pdgate_scenario::fleet::{self, FleetSpec};
use pdgate_scheduler::{Endpoint, DEFAULT_CONFIG_YAML};
use pdgate_server::ServerHandle;
use pdgate_sim::{SimConfig, WorkerHandle};
use serde_json::json;
use std::time::Duration;
use support::{endpoints, sim_config, sim_worker, spec, url, wait_until};

async fn worker(name: &str, role: &str, cfg: SimConfig) -> WorkerHandle {
    sim_worker(spec(name, role, None), cfg).await
}

fn fast() -> SimConfig {
    sim_config(50.0)
}

async fn router_with(eps: Vec<Endpoint>, yaml: &str, policy: PrefillFallback) -> ServerHandle {
    fleet::router_with(eps, yaml, |o| {
        o.scrape_interval = Duration::from_millis(50);
        o.resilience.prefill_fallback = policy;
    })
    .await
    .unwrap()
}

fn prompt(first: u32, len: u32) -> Vec<u32> {
    (first..first + len).collect()
}

fn in_flight(h: &ServerHandle, name: &str) -> u32 {
    let snap = h.state.registry.snapshot();
    let e = snap.endpoints.iter().find(|e| e.endpoint.name == name);
    e.map(|e| e.load.in_flight()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_from_a_to_b_books_binds_and_credits_b_only() {
    let failing = SimConfig {
        error_rate: 1.0,
        error_status: 503,
        ..fast()
    };
    let a = worker("decode-a", "decode", failing).await;
    let b = worker("decode-b", "decode", fast()).await;
    let h = router_with(
        endpoints([&a, &b]),
        DEFAULT_CONFIG_YAML,
        PrefillFallback::Aggregated,
    )
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    // The session is bound to A, so A is tried first.
    let now = tokio::time::Instant::now();
    h.state
        .sessions
        .bind_names("s1", None, Some("decode-a".into()), now);
    let body = json!({"model": "pdgate-sim", "prompt": prompt(10, 64), "max_tokens": 2});
    let r = support::send(&url(&h), &[("x-session-id", "s1")], &body).await;
    assert_eq!(r.status, 200);
    let [mode, _, decode] = r.served();
    assert_eq!((decode.as_str(), mode.as_str()), ("decode-b", "aggregated"));
    // The engines saw one try each: A's injected 503, B's completion.
    assert_eq!((a.stats().injected_errors, a.stats().completions), (1, 0));
    assert_eq!((b.stats().injected_errors, b.stats().completions), (0, 1));
    assert_eq!(
        (in_flight(&h, "decode-a"), in_flight(&h, "decode-b")),
        (0, 0)
    );
    let binding = h
        .state
        .sessions
        .lookup("s1", tokio::time::Instant::now())
        .unwrap();
    assert_eq!(binding.decode.as_deref(), Some("decode-b"));
    let m = support::metrics(&url(&h)).await;
    let failures = "pdgate_upstream_failures_total{kind=\"status_5xx\",phase=\"aggregated\"}";
    assert_eq!(support::metric(&m, failures), 1, "A's 503 is counted");
    // 64 tokens = 4 blocks of 16, credited to B once, none to A.
    assert_eq!(h.state.scheduler.prefix_blocks_held("decode-b"), 4);
    assert_eq!(h.state.scheduler.prefix_blocks_held("decode-a"), 0);
}

/// The default P/D config with its profiles renamed `p`, `d`, `e`.
fn renamed_profiles() -> String {
    DEFAULT_CONFIG_YAML
        .replace(
            "    deciders:\n      prefill: prefix-based-pd-decider",
            "    profiles: {prefill: p, decode: d, encode: e}\n    deciders:\n      prefill: prefix-based-pd-decider",
        )
        .replace("- name: prefill\n", "- name: p\n")
        .replace("- name: decode\n", "- name: d\n")
        .replace("- name: encode\n", "- name: e\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn profiles_named_p_d_e_split_and_encode_like_the_defaults() {
    let yaml = renamed_profiles();
    assert!(yaml.contains("- name: p\n") && !yaml.contains("- name: prefill\n"));
    let spec = FleetSpec {
        encode: 1,
        ..FleetSpec::new(1, 1, 50.0)
    };
    let f = fleet::start(&spec, &yaml).await.unwrap();
    f.wait_for_models().await;
    let r = reqwest::Client::new()
        .post(format!("{}/v1/chat/completions", f.url()))
        .json(&json!({
            "model": "pdgate-sim",
            "messages": [{"role": "user", "content": [
                {"type": "image_url", "image_url": {"url": "https://x/cat.png"}},
                {"type": "text", "text": "describe this picture in great detail please, every object, \
                    every colour, every shape, every shadow and every person you can see in it, then \
                    compare it with the paintings of the old masters and say which one it is most like"}
            ]}],
            "max_tokens": 3
        }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["x-pdgate-pd-mode"], "split");
    let encoded: u64 = f
        .workers
        .iter()
        .filter(|w| w.role() == "encode")
        .map(|w| w.stats().ec_pulls_served)
        .sum();
    assert_eq!(encoded, 1, "the encode step ran on the encode endpoint");
    // A per-role router with these names reads the coordinator's role header.
    let r = reqwest::Client::new()
        .post(format!("{}/v1/completions", f.url()))
        .header("x-llm-d-epp-profile", "prefill")
        .json(&json!({"model": "pdgate-sim", "prompt": prompt(7, 40), "max_tokens": 1}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.headers()["x-pdgate-prefill-endpoint"]
        .to_str()
        .unwrap()
        .starts_with("prefill-"));
}

/// A slow fleet: prefill of a 2,000-token prompt takes about a second, a decode step about
/// 100 ms.
fn slow() -> SimConfig {
    SimConfig {
        speedup: 0.05,
        ..SimConfig::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_gone_mid_prefill_or_mid_stream_aborts_the_running_leg_on_the_engine() {
    let p = worker("prefill-0", "prefill", slow()).await;
    let d = worker("decode-0", "decode", slow()).await;
    let h = router_with(
        endpoints([&p, &d]),
        DEFAULT_CONFIG_YAML,
        PrefillFallback::Aggregated,
    )
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    // Mid-prefill: the client gives up after 300 ms, while the prefill leg runs.
    let body =
        json!({"model": "pdgate-sim", "prompt": prompt(1, 2000), "max_tokens": 20, "stream": true});
    let client = reqwest::Client::new();
    let url = format!("http://{}/v1/completions", h.addr);
    let gave_up = tokio::time::timeout(
        Duration::from_millis(300),
        client.post(&url).json(&body).send(),
    )
    .await;
    assert!(
        gave_up.is_err(),
        "no response head before the prefill ended"
    );
    let five = Duration::from_secs(5);
    wait_until(five, "prefill leg cancelled", || p.stats().cancelled == 1).await;
    assert_eq!((p.stats().cancelled, d.stats().cancelled), (1, 0));
    wait_until(five, "bookings released", || h.state.in_flight_total() == 0).await;
    // Mid-stream: read the first chunk of the decode stream, then go away.
    let body = json!({"model": "pdgate-sim", "prompt": prompt(5000, 2000), "max_tokens": 60, "stream": true});
    let mut r = client.post(&url).json(&body).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["x-pdgate-pd-mode"], "split");
    let first = r.chunk().await.unwrap().unwrap();
    assert!(first.starts_with(b"data: "));
    drop(r);
    wait_until(five, "decode leg cancelled", || d.stats().cancelled == 1).await;
    assert_eq!((p.stats().cancelled, d.stats().cancelled), (1, 1));
    wait_until(five, "bookings released", || h.state.in_flight_total() == 0).await;
}

/// The two reasons a prefill is unavailable: its connection refused (the first requests),
/// then its circuit open (the scheduler finds no prefill endpoint).
fn unavailable(reason: &str) -> bool {
    reason.starts_with("upstream prefill-dead unreachable: ")
        || reason == "no prefill endpoint can serve the request (1 known: none Ready, circuits open or filtered out)"
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_prefill_gets_the_same_answer_from_the_first_request_on() {
    let d = worker("decode-0", "decode", fast()).await;
    let labels = support::labels("prefill", None);
    let dead = Endpoint::new("prefill-dead", support::vllm::dead_address().await, labels);
    for policy in [PrefillFallback::Aggregated, PrefillFallback::Fail] {
        let mut eps = endpoints([&d]);
        eps.insert(0, dead.clone());
        let h = router_with(eps, DEFAULT_CONFIG_YAML, policy).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        for i in 0..30 {
            let body = json!({"model": "pdgate-sim", "prompt": prompt(100 * i + 10_000, 64), "max_tokens": 2});
            let r = support::send(&url(&h), &[], &body).await;
            let (v, [mode, _, decode]) = (&r.body, r.served());
            match policy {
                PrefillFallback::Aggregated => {
                    assert_eq!(r.status, 200, "request {i}: {v}");
                    assert_eq!((mode.as_str(), decode.as_str()), ("aggregated", "decode-0"));
                    let reason = r.header("x-pdgate-pd-fallback-reason");
                    assert!(unavailable(&reason), "request {i}: {reason}");
                }
                PrefillFallback::Fail => {
                    assert_eq!(r.status, 503, "request {i}: {v}");
                    let msg = v["error"]["message"].as_str().unwrap();
                    let reason = r.header("x-pdgate-pd-fallback-reason");
                    assert!(unavailable(&reason), "request {i}: {reason}");
                    assert_eq!(msg, format!("prefill unavailable: {reason}"), "request {i}");
                }
            }
        }
        let m = support::metrics(&url(&h)).await;
        let series = format!(
            "pdgate_prefill_fallbacks_total{{policy=\"{}\"}} 30",
            policy.as_str()
        );
        assert!(m.contains(&series), "{series} in\n{m}");
        assert_eq!(h.state.in_flight_total(), 0);
    }
    let completions = d.stats().completions;
    assert_eq!(
        completions, 30,
        "only the aggregated policy ran requests on decode"
    );
}
