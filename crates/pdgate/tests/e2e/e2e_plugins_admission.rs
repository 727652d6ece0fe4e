//! Admission and flow-control plugins of issue 13, end to end: `probabilistic-admitter`
//! (sheddable requests shed under load, answered 429 naming the admitter),
//! `utilization-detector` and `concurrency-detector` as scheduling-profile filters, and
//! `program-aware-fairness` (the least-served program's queued request goes first); plus
//! llm-d's sample configs that use them loading. Fake vLLM engines with fixed gauges make
//! the admitter's saturation exact; a simulator worker gives real queueing.

use crate::support;

use pdgate_core::flow_control::Objectives;
use pdgate_scenario::fleet;
use pdgate_scheduler::flow::plugins::Fairness;
use pdgate_scheduler::flow::program_aware::Las;
use pdgate_scheduler::{Endpoint, Scheduler};
use pdgate_server::ServerHandle;
use std::time::{Duration, Instant};
use support::flow::*;
use support::vllm::{endpoint, VllmEngine, MODEL};
use support::*;

/// An llm-d sample config from the scheduler's test data.
fn sample(name: &str) -> String {
    let path = format!(
        "{}/../pdgate-scheduler/tests/data/llm-d-router/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Loads `yaml`, and its effective config again: both give the same flow settings.
fn load(yaml: &str, name: &str) -> Scheduler {
    let s = Scheduler::from_yaml(yaml, name).unwrap_or_else(|e| panic!("{e}"));
    let again = Scheduler::from_yaml(&s.effective_config_yaml(), "effective")
        .unwrap_or_else(|e| panic!("{e}\n{}", s.effective_config_yaml()));
    assert_eq!(again.flow().gate, s.flow().gate);
    assert_eq!(again.flow().control, s.flow().control);
    s
}

#[test]
fn llm_d_samples_using_these_plugins_load() {
    // The admitter's sample (the only one using utilization-detector too): no gate, the
    // detector with effectively infinite thresholds.
    let s = load(
        &sample("probabilistic-admitter-epp-config.yaml"),
        "probabilistic-admitter-epp-config.yaml",
    );
    assert!(!s.flow().gate);
    assert_eq!(s.flow().detector.type_name(), "utilization-detector");
    let eff = s.effective_config_yaml();
    for line in [
        "type: probabilistic-admitter",
        "queueDepthThreshold: 5",
        "kvCacheUtilThreshold: 0.8",
        "power: 5.0",
        "k: 300.0",
    ] {
        assert!(eff.contains(line), "{line} missing from\n{eff}");
    }
    // The program-aware sample: the gate on, the default band program-aware (defaults).
    let s = load(
        &sample("sim-program-aware-config.yaml"),
        "sim-program-aware-config.yaml",
    );
    assert!(s.flow().gate);
    assert_eq!(
        s.flow().control.default_band.fairness,
        Fairness::ProgramAware(Las::default())
    );
    assert_eq!(
        s.flow().control.band(0).fairness,
        Fairness::ProgramAware(Las::default())
    );
    // A named instance with its own parameters keeps its name in the effective config.
    let s = load(&las_config(), "las");
    let eff = s.effective_config_yaml();
    assert!(eff.contains("fairnessPolicyRef: las"), "{eff}");
    assert_eq!(
        s.flow().control.band(0).fairness,
        Fairness::ProgramAware(Las {
            half_life_ms: 0.0,
            ..Las::default()
        })
    );
    // A bad parameter names the field.
    let e = Scheduler::from_yaml(
        &las_config().replace("lasHalfLifeSeconds: 0", "strategy: wfq"),
        "bad",
    )
    .err()
    .unwrap();
    assert!(
        e.to_string()
            .contains("strategy: unknown scoring strategy \"wfq\""),
        "{e}"
    );
}

// ---------------------------------------------------------------------------------------
// probabilistic-admitter

/// A fake engine whose `/metrics` reports nothing running or waiting and KV use `kv`.
async fn engine(kv: f64) -> String {
    let m = |n: &str, v: f64| format!("{n}{{model_name=\"{MODEL}\"}} {v}\n");
    VllmEngine {
        metrics: m("vllm:num_requests_running", 0.0)
            + &m("vllm:num_requests_waiting", 0.0)
            + &m("vllm:kv_cache_usage_perc", kv),
        ..VllmEngine::default()
    }
    .start()
    .await
}

/// A router with `yaml` over `endpoints`, objectives `batch` = −1 (sheddable) and `chat`
/// = 10, once every endpoint's gauges and models are known.
async fn router_over(yaml: &str, endpoints: Vec<Endpoint>) -> ServerHandle {
    let objectives = Objectives::parse(&["batch=-1".into(), "chat=10".into()]).unwrap();
    let r = fleet::router_with(endpoints, yaml, |o| {
        o.objectives = objectives;
        // The gateway sets the flow headers (llm-d's behaviour): read them from every request.
        o.flow_headers_from = pdgate_core::flow_key::FlowHeadersFrom::Any;
    })
    .await
    .unwrap();
    wait_until(Duration::from_secs(5), "every endpoint scraped", || {
        r.state
            .registry
            .snapshot()
            .endpoints
            .iter()
            .all(|e| e.load.kv_usage().is_some() && e.load.models().is_some())
    })
    .await;
    r
}

const BATCH: (&str, &str) = ("x-llm-d-inference-objective", "batch");
const CHAT: (&str, &str) = ("x-llm-d-inference-objective", "chat");

fn message(r: &Reply) -> String {
    r.body["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probabilistic_admitter_sheds_only_sheddable_requests_under_load() {
    let yaml = sample("probabilistic-admitter-epp-config.yaml");
    let (idle, busy) = (engine(0.0).await, engine(0.9).await);

    // An idle pool: sat 0, p = 0: a sheddable request is admitted.
    let r = router_over(&yaml, vec![endpoint("idle", &idle, "decode")]).await;
    let ok = send(&url(&r), &[BATCH], &body(0, 8, 4)).await;
    assert_eq!(ok.status, 200, "{ok:?}");
    assert_eq!(ok.header("x-pdgate-decode-endpoint"), "idle");

    // A busy pool: KV 0.9 / 0.8 = 1.125; p = min(1.125^5 × 300, 1) = 1. Every sheddable
    // request is refused with 429 naming the admitter; priority 0 and 10 pass.
    let r = router_over(&yaml, vec![endpoint("busy", &busy, "decode")]).await;
    let u = url(&r);
    for i in 0..3 {
        let shed = send(&u, &[BATCH], &body(i * 10, 8, 4)).await;
        assert_eq!(shed.status, 429, "{shed:?}");
        assert_eq!(
            message(&shed),
            "request not admitted by `probabilistic-admitter`: rejected, saturation=1.125 \
             prob=1.00"
        );
    }
    for h in [&[][..], &[CHAT][..]] {
        let ok = send(&u, h, &body(100, 8, 4)).await;
        assert_eq!(ok.status, 200, "{ok:?}");
        assert_eq!(ok.header("x-pdgate-decode-endpoint"), "busy");
    }

    // Both: sat = (0 + 1.125) / 2 = 0.5625 (written 0.562: the tie rounds to even);
    // p = min(0.5625^5 × 300 ≈ 16.9, 1) = 1.
    let r = router_over(
        &yaml,
        vec![
            endpoint("idle", &idle, "decode"),
            endpoint("busy", &busy, "decode"),
        ],
    )
    .await;
    let shed = send(&url(&r), &[BATCH], &body(0, 8, 4)).await;
    assert_eq!(shed.status, 429, "{shed:?}");
    assert!(
        message(&shed).ends_with("rejected, saturation=0.562 prob=1.00"),
        "{shed:?}"
    );
}

// ---------------------------------------------------------------------------------------
// The detectors as profile filters

/// `random-picker` after the `detector` filter (its parameters `params`).
fn filter_config(detector: &str, params: &str) -> String {
    format!(
        "apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: {detector}
  parameters: {params}
- type: random-picker
schedulingProfiles:
- name: default
  plugins: [{{pluginRef: {detector}}}, {{pluginRef: random-picker}}]
"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn utilization_detector_filters_out_the_loaded_endpoint_and_fails_open() {
    // Defaults: an endpoint stays while waiting < 5 and KV < 0.8.
    let yaml = filter_config("utilization-detector", "{}");
    let (idle, busy, busier) = (engine(0.1).await, engine(0.85).await, engine(0.95).await);
    let r = router_over(
        &yaml,
        vec![
            endpoint("busy", &busy, "decode"),
            endpoint("idle", &idle, "decode"),
        ],
    )
    .await;
    for i in 0..8 {
        let ok = send(&url(&r), &[], &body(i * 10, 8, 4)).await;
        assert_eq!(ok.status, 200, "{ok:?}");
        assert_eq!(ok.header("x-pdgate-decode-endpoint"), "idle");
    }
    // Every endpoint over its thresholds: the filter keeps them all (random between them).
    let r = router_over(
        &yaml,
        vec![
            endpoint("busy", &busy, "decode"),
            endpoint("busier", &busier, "decode"),
        ],
    )
    .await;
    let mut seen = std::collections::BTreeSet::new();
    for i in 0..24 {
        let ok = send(&url(&r), &[], &body(i * 10, 8, 4)).await;
        assert_eq!(ok.status, 200, "{ok:?}");
        seen.insert(ok.header("x-pdgate-decode-endpoint"));
    }
    assert_eq!(
        seen.into_iter().collect::<Vec<_>>(),
        ["busier", "busy"],
        "both serve"
    );
    // headroom 0.2: KV limit 0.8 × 1.2 = 0.96, so 0.85 and 0.95 both pass again.
    let yaml = filter_config("utilization-detector", "{headroom: 0.2}");
    let r = router_over(
        &yaml,
        vec![
            endpoint("busy", &busy, "decode"),
            endpoint("idle", &idle, "decode"),
        ],
    )
    .await;
    let mut seen = std::collections::BTreeSet::new();
    for i in 0..24 {
        seen.insert(
            send(&url(&r), &[], &body(i * 10, 8, 4))
                .await
                .header("x-pdgate-decode-endpoint"),
        );
    }
    assert_eq!(seen.len(), 2, "{seen:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrency_detector_filter_refuses_a_full_endpoint_without_failing_open() {
    let yaml = filter_config("concurrency-detector", "{maxConcurrency: 1}");
    let (_w, r) = fleet_with(&yaml, &[]).await;
    let u = url(&r);
    // One long request books the only endpoint (1 of 1)…
    let long = hold(&r, 1, {
        let u = u.clone();
        async move { send(&u, &[], &body(0, 16, 60)).await }
    })
    .await;
    // …so the filter leaves no endpoint: 429, no fall-back to the full one.
    let full = send(&u, &[], &body(500, 16, 4)).await;
    assert_eq!(full.status, 429, "{full:?}");
    assert_eq!(
        full.header("x-llm-d-request-dropped-reason"),
        "scheduling profile `default`: filters left no endpoint"
    );
    assert_eq!(long.await.unwrap().status, 200);
    let ok = send(&u, &[], &body(900, 16, 4)).await;
    assert_eq!(
        (ok.status, ok.header("x-pdgate-decode-endpoint")),
        (200, "w0".into())
    );
}

// ---------------------------------------------------------------------------------------
// program-aware-fairness

/// Flow control with one slot (concurrency-detector, maxConcurrency 1) and a program-aware
/// default band named `las`, without decay (so attained service is exact).
fn las_config() -> String {
    "apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
featureGates: [flowControl]
plugins:
- type: concurrency-detector
  parameters: {maxConcurrency: 1}
- name: las
  type: program-aware-fairness
  parameters:
    lasHalfLifeSeconds: 0
- type: queue-scorer
- type: max-score-picker
flowControl:
  defaultRequestTTL: 30s
  saturationDetector: {pluginRef: concurrency-detector}
  defaultPriorityBand: {fairnessPolicyRef: las}
schedulingProfiles:
- name: default
  plugins: [{pluginRef: queue-scorer}, {pluginRef: max-score-picker}]
"
    .to_string()
}

const FAIRNESS: &str = "x-llm-d-inference-fairness-id";

/// `llm_d_epp_program_aware_attained_service_tokens{program_id}` in `m`.
fn service(m: &str, program: &str) -> f64 {
    gauge(
        m,
        &format!("llm_d_epp_program_aware_attained_service_tokens{{program_id=\"{program}\"}}"),
    )
}

/// Waits until the router's metrics give `program` the attained service `tokens` (the
/// answer's end is accounted as its body goes); returns the metrics text.
async fn service_becomes(u: &str, program: &str, tokens: f64) -> String {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let m = metrics(u).await;
        if service(&m, program) == tokens {
            return m;
        }
        assert!(
            Instant::now() < deadline,
            "{program}: service {} not {tokens}\n{m}",
            service(&m, program)
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn program_aware_fairness_serves_the_least_served_program_first() {
    let (_w, r) = fleet_with(&las_config(), &[]).await;
    let u = url(&r);
    // `heavy` has been served: 16 prompt + 2 × 10 completion tokens = 36.
    let first = send(&u, &[(FAIRNESS, "heavy")], &body(0, 16, 10)).await;
    assert_eq!(first.status, 200, "{first:?}");
    service_becomes(&u, "heavy", 36.0).await;
    // A long `heavy` request takes the slot; then `heavy` queues one, and `light` one after
    // it. FCFS would serve `heavy` first; least attained service serves `light`.
    let t0 = Instant::now();
    let timed = |flow: &'static str, b: serde_json::Value| {
        let u = u.clone();
        async move {
            let reply = send(&u, &[(FAIRNESS, flow)], &b).await;
            (reply.status, t0.elapsed())
        }
    };
    let long = hold(&r, 1, timed("heavy", body(100, 16, 40))).await;
    let heavy = tokio::spawn(timed("heavy", body(200, 16, 10)));
    wait_until(Duration::from_secs(5), "heavy queued", || {
        r.state.flow.queued() == 1
    })
    .await;
    let light = tokio::spawn(timed("light", body(300, 16, 10)));
    wait_until(Duration::from_secs(5), "light queued", || {
        r.state.flow.queued() == 2
    })
    .await;
    let (ls, lt) = light.await.unwrap();
    let (hs, ht) = heavy.await.unwrap();
    assert_eq!((long.await.unwrap().0, ls, hs), (200, 200, 200));
    assert!(lt < ht, "light finished at {lt:?}, heavy at {ht:?}");
    // Service: heavy 36 + (16 + 80) + 36 = 168, light 36.
    service_becomes(&u, "light", 36.0).await;
    let m = service_becomes(&u, "heavy", 168.0).await;
    assert_eq!(outcomes(&m, "Dispatched", 0), 4, "{m}");
    let wait = |p: &str| {
        gauge(
            &m,
            &format!("llm_d_epp_program_aware_avg_wait_time_milliseconds{{program_id=\"{p}\"}}"),
        )
    };
    // light waited for the long request; heavy's mean holds two immediate dispatches.
    assert!(wait("light") > 0.0, "{m}");
    let jain = gauge(&m, "llm_d_epp_program_aware_jains_fairness_index");
    assert!(jain > 0.0 && jain <= 1.0, "{m}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streamed_answers_report_usage_when_asked_for() {
    let (_w, r) = fleet_with(&las_config(), &[]).await;
    let u = url(&r);
    let mut b = body(0, 16, 5);
    b["stream_options"] = serde_json::json!({"include_usage": true});
    let (status, _, text) = stream_with(&u, &[(FAIRNESS, "s")], b).await;
    assert_eq!(status, 200, "{text}");
    // Without include_usage the cost is unknown: nothing is added.
    service_becomes(&u, "s", 16.0 + 2.0 * 5.0).await;
    let (status, _, _) = stream_with(&u, &[(FAIRNESS, "s")], body(100, 16, 5)).await;
    assert_eq!(status, 200);
    wait_until(Duration::from_secs(5), "answers ended", || {
        r.state.in_flight_total() == 0
    })
    .await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(service(&metrics(&u).await, "s"), 26.0);
}
