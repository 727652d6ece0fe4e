//! llm-d's topology, LoRA and endpoint-attribute plugins route end to end (issue 13 item 2):
//! the real server in-process in front of fake vLLM engines on 127.0.0.1, each with its
//! labels, `/metrics` and `/v1/models`.
//!
//! - `topology-extractor` + `topology-affinity-filter` + `topology-affinity-scorer`: the
//!   prefill pick lands near the decode pick (same host, else the tightest common level).
//! - `lora-affinity-scorer`: from `vllm:lora_requests_info` on the engines' `/metrics`.
//! - `endpoint-attribute-filter` / `-scorer`: on the scraped engine gauges.
//! - llm-d's sample `pd-topology-epp-config.yaml` loads; `sim-epp-gpu-config.yaml` is refused
//!   for its `dcgm-*` plugins only (hardware counters), not for the attribute plugins.

use crate::support;

use pdgate_scheduler::{Endpoint, Scheduler};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use support::vllm::{VllmEngine, MODEL};
use support::{send, url, Reply};

const HOST: &str = "kubernetes.io/hostname";
const RACK: &str = "topology.kubernetes.io/rack";
const ZONE: &str = "topology.kubernetes.io/zone";
const REGION: &str = "topology.kubernetes.io/region";

/// Reads one of llm-d's sample configs kept as test data.
fn sample(name: &str) -> String {
    let path = format!(
        "{}/../pdgate-scheduler/tests/data/llm-d-router/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// An endpoint `name` of `role` at `loc` = [host, rack, zone, region] ("" = no label),
/// served by a fresh fake engine answering `metrics` and `models`.
async fn engine(name: &str, role: &str, loc: [&str; 4], metrics: &str, models: Value) -> Endpoint {
    let addr = VllmEngine {
        metrics: metrics.to_string(),
        models,
        ..VllmEngine::default()
    }
    .start()
    .await;
    let mut labels = BTreeMap::from([("llm-d.ai/role".to_string(), role.to_string())]);
    for (k, v) in [HOST, RACK, ZONE, REGION].into_iter().zip(loc) {
        if !v.is_empty() {
            labels.insert(k.to_string(), v.to_string());
        }
    }
    Endpoint::new(name, addr, labels)
}

/// A topology-labelled engine of [`MODEL`] with idle gauges.
async fn at(name: &str, role: &str, loc: [&str; 4]) -> Endpoint {
    let idle =
        "vllm:num_requests_running{engine=\"0\"} 0\nvllm:num_requests_waiting{engine=\"0\"} 0\n";
    engine(
        name,
        role,
        loc,
        idle,
        json!([{"id": MODEL, "object": "model"}]),
    )
    .await
}

/// A router over `endpoints` with `config`, once every engine's model list was scraped (the
/// gauges come with the same scrape).
async fn router(endpoints: Vec<Endpoint>, config: &str) -> pdgate_server::ServerHandle {
    let r = support::router(endpoints, config).await;
    pdgate_scenario::fleet::wait_for_models(&r).await;
    r
}

/// A completion of a fresh prompt (`n` makes it unique, so no endpoint holds its prefix) for
/// `model`, with `headers`.
async fn complete(url: &str, model: &str, n: usize, headers: &[(&str, &str)]) -> Reply {
    let prompt = format!(
        "request {n}: {}",
        "tell me about topology aware routing. ".repeat(8)
    );
    send(
        url,
        headers,
        &json!({"model": model, "prompt": prompt, "max_tokens": 1}),
    )
    .await
}

#[tokio::test]
async fn llm_d_topology_sample_runs_prefill_on_the_decode_host() {
    // Two hosts, each with one decode and one prefill endpoint, and a third prefill endpoint
    // in d1's rack but on another host.
    let eps = vec![
        at("d1", "decode", ["h1", "r1", "z1", "g1"]).await,
        at("d2", "decode", ["h2", "r2", "z1", "g1"]).await,
        at("p1", "prefill", ["h1", "r1", "z1", "g1"]).await,
        at("p2", "prefill", ["h2", "r2", "z1", "g1"]).await,
        at("p3", "prefill", ["h3", "r1", "z1", "g1"]).await,
    ];
    let r = router(eps, &sample("pd-topology-epp-config.yaml")).await;
    let url = url(&r);
    let host = |e: &str| match e {
        "d1" | "p1" => "h1",
        "d2" | "p2" => "h2",
        _ => "h3",
    };
    // Decode pinned: the prefill pick is the prefill endpoint on the decode's host.
    for (i, (decode, prefill)) in [("d1", "p1"), ("d2", "p2"), ("d1", "p1"), ("d2", "p2")]
        .into_iter()
        .enumerate()
    {
        let a = complete(&url, MODEL, i, &[("x-decode-instance-id", decode)]).await;
        assert_eq!(a.status, 200, "{:?}", a.body);
        assert_eq!(a.served(), ["split", prefill, decode]);
    }
    // Unpinned: whichever decode endpoint is picked, prefill runs on its host.
    for i in 10..16 {
        let a = complete(&url, MODEL, i, &[]).await;
        assert_eq!(a.status, 200, "{:?}", a.body);
        let [mode, prefill, decode] = a.served();
        assert_eq!(mode, "split");
        assert_eq!(host(&prefill), host(&decode), "{prefill} near {decode}");
    }
}

/// Always split; the prefill profile filters by topology (`minAffinity`) and scores by it.
fn topology_config(min_affinity: &str) -> String {
    format!(
        "apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: prefill-filter
- type: decode-filter
- type: max-score-picker
- type: topology-extractor
- type: topology-affinity-filter
  parameters:
    minAffinity: {min_affinity}
- type: topology-affinity-scorer
- type: always-disagg-pd-decider
- type: disagg-profile-handler
  parameters:
    deciders:
      prefill: always-disagg-pd-decider
schedulingProfiles:
- name: prefill
  plugins:
  - pluginRef: prefill-filter
  - pluginRef: topology-affinity-filter
  - pluginRef: topology-affinity-scorer
  - pluginRef: max-score-picker
- name: decode
  plugins:
  - pluginRef: decode-filter
  - pluginRef: max-score-picker
"
    )
}

#[tokio::test]
async fn topology_scorer_prefers_the_tightest_level_and_the_filter_fails_open() {
    // d1 at (h1, r1, z1, g1), d2 at (h7, r7, z2, g1), d3 in another region with no prefill.
    // pA shares d1's rack (0.2 against d1), pB d1's zone (0.05), pC d2's zone (0.05 against
    // d2, 0.02 = region against d1); against d2, pA and pB share only the region (0.02).
    let eps = vec![
        at("d1", "decode", ["h1", "r1", "z1", "g1"]).await,
        at("d2", "decode", ["h7", "r7", "z2", "g1"]).await,
        at("d3", "decode", ["h5", "r5", "z5", "g5"]).await,
        at("pA", "prefill", ["h9", "r1", "z1", "g1"]).await,
        at("pB", "prefill", ["h8", "r8", "z1", "g1"]).await,
        at("pC", "prefill", ["h6", "r6", "z2", "g1"]).await,
    ];
    let r = router(eps, &topology_config("region")).await;
    let url = url(&r);
    let mut n = 0;
    let mut served = |decode: &'static str| {
        n += 1;
        let (url, i) = (url.clone(), n);
        async move {
            let a = complete(&url, MODEL, i, &[("x-decode-instance-id", decode)]).await;
            assert_eq!(a.status, 200, "{:?}", a.body);
            let [mode, prefill, d] = a.served();
            assert_eq!((mode.as_str(), d.as_str()), ("split", decode));
            prefill
        }
    };
    for _ in 0..3 {
        assert_eq!(
            served("d1").await,
            "pA",
            "same rack beats same zone and region"
        );
        assert_eq!(served("d2").await, "pC", "same zone beats same region");
    }
    // d3 shares no level with any prefill endpoint: the filter keeps all (fails open), every
    // score is 0, and the request still splits.
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..12 {
        seen.insert(served("d3").await);
    }
    assert!(
        seen.iter()
            .all(|p| ["pA", "pB", "pC"].contains(&p.as_str())),
        "{seen:?}"
    );
    assert!(seen.len() > 1, "ties are broken at random: {seen:?}");
}

/// `vllm:lora_requests_info` with the given labels (value: the series' creation time).
fn lora_metrics(series: &[(&str, &str, &str, f64)]) -> String {
    let mut s = String::from("# TYPE vllm:lora_requests_info gauge\n");
    for (running, waiting, max, t) in series {
        s += &format!(
            "vllm:lora_requests_info{{max_lora=\"{max}\",running_lora_adapters=\"{running}\",\
             waiting_lora_adapters=\"{waiting}\"}} {t:e}\n"
        );
    }
    s + "vllm:num_requests_running{engine=\"0\"} 0\n"
}

#[tokio::test]
async fn lora_affinity_scorer_routes_by_the_engines_adapters() {
    let models = json!([
        {"id": "base", "object": "model", "parent": null},
        {"id": "sql-lora", "object": "model", "parent": "base"},
        {"id": "chat-lora", "object": "model", "parent": "base"},
    ]);
    let e1 = lora_metrics(&[
        // An older state (lower value) says chat-lora ran here: the latest one wins.
        ("chat-lora", "", "1", 1.7e9),
        ("sql-lora", "", "1", 1.8e9),
    ]);
    let e2 = lora_metrics(&[("", "chat-lora", "4", 1.8e9)]);
    let e3 = lora_metrics(&[("x,y", "chat-lora", "2", 1.8e9)]);
    let eps = vec![
        engine("e1", "decode", ["", "", "", ""], &e1, models.clone()).await,
        engine("e2", "decode", ["", "", "", ""], &e2, models.clone()).await,
        engine("e3", "decode", ["", "", "", ""], &e3, models).await,
    ];
    let config = "apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: decode-filter
- type: lora-affinity-scorer
- type: max-score-picker
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: decode-filter
  - pluginRef: lora-affinity-scorer
  - pluginRef: max-score-picker
";
    let r = router(eps, config).await;
    let url = url(&r);
    for i in 0..4 {
        // sql-lora: running on e1 (1.0); e2 has room (0.8); e3 is full (0).
        let a = complete(&url, "sql-lora", i, &[]).await;
        assert_eq!((a.status, a.served()[2].as_str()), (200, "e1"));
        // chat-lora: e1 full (0); e2 has room (0.8); e3 full, adapter waiting (0.6).
        let a = complete(&url, "chat-lora", i, &[]).await;
        assert_eq!((a.status, a.served()[2].as_str()), (200, "e2"));
    }
    // The base model is no adapter: every engine scores 0 and each one serves a share.
    let mut seen = std::collections::BTreeSet::new();
    for i in 0..15 {
        let a = complete(&url, "base", i, &[]).await;
        assert_eq!(a.status, 200);
        seen.insert(a.served()[2].clone());
    }
    assert!(seen.len() > 1, "{seen:?}");
}

/// Gauges: running, waiting, KV usage.
fn gauges(running: u32, waiting: u32, kv: f64) -> String {
    format!(
        "vllm:num_requests_running{{engine=\"0\"}} {running}\n\
         vllm:num_requests_waiting{{engine=\"0\"}} {waiting}\n\
         vllm:kv_cache_usage_perc{{engine=\"0\"}} {kv}\n"
    )
}

fn attribute_config(filter_value: f64, fallback: bool) -> String {
    attribute_config_with(
        &format!(
            "{{type: threshold, threshold: {{operator: LessThanOrEqual, value: {filter_value}}}}}"
        ),
        fallback,
    )
}

/// The config of [`attribute_config`] with the filter's `algorithm` given as a flow mapping.
fn attribute_config_with(algorithm: &str, fallback: bool) -> String {
    format!(
        "apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: endpoint-attribute-filter
  name: kv-filter
  parameters:
    attribute: KVCacheUsagePercent
    onMissing: Fail
    fallbackOnEmpty: {fallback}
    algorithm: {algorithm}
- type: endpoint-attribute-scorer
  name: queue-attribute
  parameters:
    attributeKey: WaitingQueueSize
    algorithm:
      type: linear_lower_is_better
- type: max-score-picker
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: kv-filter
  - pluginRef: queue-attribute
  - pluginRef: max-score-picker
"
    )
}

#[tokio::test]
async fn endpoint_attribute_filter_and_scorer_read_the_scraped_gauges() {
    let models = json!([{"id": MODEL, "object": "model"}]);
    let no = ["", "", "", ""];
    let mk = || async {
        vec![
            // Shortest queue but KV nearly full: filtered out at 0.9.
            engine("e1", "decode", no, &gauges(0, 0, 0.95), models.clone()).await,
            engine("e2", "decode", no, &gauges(3, 7, 0.30), models.clone()).await,
            engine("e3", "decode", no, &gauges(1, 2, 0.50), models.clone()).await,
            // No KV gauge: missing, and `onMissing: Fail` drops it.
            engine(
                "e4",
                "decode",
                no,
                "vllm:num_requests_waiting 0\n",
                models.clone(),
            )
            .await,
        ]
    };
    // KV ≤ 0.9 keeps e2 and e3; of those, waiting 2 < 7: e3 scores 1, e2 0.
    let r = router(mk().await, &attribute_config(0.9, false)).await;
    for i in 0..4 {
        let a = complete(&url(&r), MODEL, i, &[]).await;
        assert_eq!((a.status, a.served()[2].as_str()), (200, "e3"));
    }
    // KV ≤ 0.1 keeps nobody: without fallback the profile has no endpoint (429) ...
    let r = router(mk().await, &attribute_config(0.1, false)).await;
    let a = complete(&url(&r), MODEL, 0, &[]).await;
    assert_eq!(a.status, 429, "{:?}", a.body);
    // ... with `fallbackOnEmpty` every endpoint stays, and the queue scorer picks e1 or e4
    // (waiting 0).
    let r = router(mk().await, &attribute_config(0.1, true)).await;
    for i in 0..4 {
        let a = complete(&url(&r), MODEL, i, &[]).await;
        assert_eq!(a.status, 200);
        assert!(
            ["e1", "e4"].contains(&a.served()[2].as_str()),
            "{:?}",
            a.served()
        );
    }
    // The other algorithms (KV e1 0.95, e2 0.30, e3 0.50, e4 missing and dropped): the lowest
    // one is e2; within [0.4, 1] are e1 and e3, and e1 waits 0; the lower half (nearest-rank
    // P50 of 0.30, 0.50, 0.95 is 0.50) is e2 and e3, and e3 waits less.
    for (algorithm, want) in [
        ("{type: topK, topK: {k: 1, higherIsBetter: false}}", "e2"),
        ("{type: range, range: {min: 0.4, max: 1}}", "e1"),
        (
            "{type: percentile, percentile: {percentile: 50, higherIsBetter: false}}",
            "e3",
        ),
    ] {
        let r = router(mk().await, &attribute_config_with(algorithm, false)).await;
        for i in 0..3 {
            let a = complete(&url(&r), MODEL, i, &[]).await;
            assert_eq!(
                (a.status, a.served()[2].as_str()),
                (200, want),
                "{algorithm}"
            );
        }
    }
}

#[test]
fn llm_d_samples_with_these_plugins_load_or_fail_for_dcgm_only() {
    let topo = sample("pd-topology-epp-config.yaml");
    let s = Scheduler::from_yaml(&topo, "pd-topology-epp-config.yaml")
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(s.profile_names().collect::<Vec<_>>(), ["prefill", "decode"]);
    let again = Scheduler::from_yaml(&s.effective_config_yaml(), "effective").unwrap();
    assert_eq!(again.effective_config_yaml(), s.effective_config_yaml());

    // GPU utilization comes from DCGM hardware counters, which pdgate has no producer for:
    // the sample fails on its dcgm-* plugins, and the attribute filter and scorer that read
    // `GPUUtilization/dcgm-extractor` report nothing more.
    let gpu = sample("sim-epp-gpu-config.yaml");
    let first = Scheduler::from_yaml(&gpu, "sim-epp-gpu-config.yaml")
        .err()
        .expect("refused");
    assert!(
        first.to_string().contains("unsupported plugin type"),
        "{first}"
    );
    assert!(first.to_string().contains("dcgm-"), "{first}");
    let all = pdgate_scheduler::config::check(&gpu, "sim-epp-gpu-config.yaml").unwrap_err();
    assert!(!all.0.is_empty());
    for e in &all.0 {
        let t = e.plugin.as_ref().map(|p| p.plugin_type.as_str());
        assert!(
            !t.is_some_and(|t| t.starts_with("endpoint-attribute-")),
            "{e}"
        );
        assert!(!e.message.contains("GPUUtilization"), "{e}");
    }
    // Without its dcgm-* plugins, the same attribute plugins are refused for the hardware
    // counter, naming the field.
    let no_dcgm = gpu
        .replace(
            "- type: dcgm-data-source\n  name: dcgm-source\n  parameters:\n    port: 9400\n    interval: \"1s\"\n",
            "",
        )
        .replace("- type: dcgm-extractor\n  name: dcgm-extractor\n", "")
        .replace(
            "dataLayer:\n  sources:\n  - pluginRef: dcgm-source\n    extractors:\n    - pluginRef: dcgm-extractor\n",
            "",
        );
    assert!(!no_dcgm.contains("dcgm-source"), "{no_dcgm}");
    let errs = pdgate_scheduler::config::check(&no_dcgm, "gpu.yaml").unwrap_err();
    let msgs: Vec<String> = errs.0.iter().map(|e| e.to_string()).collect();
    assert_eq!(msgs.len(), 2, "{msgs:#?}");
    assert!(msgs[0].contains("plugin `gpu-utilization-filter` (type `endpoint-attribute-filter`): parameters.attribute: `GPUUtilization/dcgm-extractor` is a GPU hardware counter"), "{}", msgs[0]);
    assert!(msgs[1].contains("plugin `gpu-utilization-scorer` (type `endpoint-attribute-scorer`): parameters.attributeKey: `GPUUtilization/dcgm-extractor` is a GPU hardware counter"), "{}", msgs[1]);
}
