//! llm-d's own sample `EndpointPickerConfig`s (`tests/data/llm-d-router/`, copied unchanged,
//! see SOURCE.md there) load as they are: every one but `sim-epp-gpu-config.yaml`, which
//! pdgate refuses for its DCGM GPU-counter source, saying why.

use pdgate_scheduler::config::{check, DataLayer};
use pdgate_scheduler::Scheduler;

/// The directory of the samples.
const DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/llm-d-router");

/// The sample pdgate refuses.
const GPU: &str = "sim-epp-gpu-config.yaml";

/// What `from_yaml` says about [`GPU`]: its first problem, the DCGM source on line 6.
const GPU_ERROR: &str = "sim-epp-gpu-config.yaml: line 6: plugin `dcgm-source` (type \
    `dcgm-data-source`): unsupported plugin type `dcgm-data-source` (reads NVIDIA DCGM hardware \
    GPU counters, which pdgate does not collect)";

/// Every sample as `(file name, text)`, sorted by name.
fn samples() -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = std::fs::read_dir(DIR)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read_to_string(&p).unwrap())
        })
        .collect();
    out.sort();
    out
}

#[test]
fn every_sample_but_the_gpu_one_loads() {
    let all = samples();
    // SOURCE.md lists 19 files.
    assert_eq!(
        all.len(),
        19,
        "{:?}",
        all.iter().map(|s| &s.0).collect::<Vec<_>>()
    );
    let failures: Vec<String> = all
        .iter()
        .filter(|(name, _)| name != GPU)
        .filter_map(|(name, text)| Scheduler::from_yaml(text, name).err())
        .map(|e| e.to_string())
        .collect();
    assert!(
        failures.is_empty(),
        "{} of {} samples do not load:\n{}",
        failures.len(),
        all.len() - 1,
        failures.join("\n")
    );
}

#[test]
fn the_gpu_sample_is_refused_for_its_dcgm_source_and_says_why() {
    let text = std::fs::read_to_string(format!("{DIR}/{GPU}")).unwrap();
    let err = Scheduler::from_yaml(&text, GPU).err().expect("refused");
    assert_eq!(err.to_string(), GPU_ERROR);
}

#[test]
fn the_gpu_sample_has_no_other_problem() {
    // The extractor is refused too; the plugins and the dataLayer entry naming them report
    // nothing more (no cascade).
    let text = std::fs::read_to_string(format!("{DIR}/{GPU}")).unwrap();
    let errors = check(&text, GPU).expect_err("refused");
    let lines: Vec<String> = errors.0.iter().map(|e| e.to_string()).collect();
    assert_eq!(
        lines,
        [
            GPU_ERROR,
            "sim-epp-gpu-config.yaml: line 11: plugin `dcgm-extractor` (type `dcgm-extractor`): \
             unsupported plugin type `dcgm-extractor` (extracts NVIDIA DCGM hardware GPU \
             counters, which pdgate does not collect)",
        ]
    );
}

#[test]
fn samples_with_a_data_layer_scrape_with_the_defaults() {
    // Both name metrics-data-source and core-metrics-extractor with default parameters, and
    // an endpoint-notification-source feeding producers that pdgate feeds anyway.
    for name in [
        "epp-precise-prefix-cache-config.yaml",
        "epp-mm-embeddings-cache-config.yaml",
    ] {
        let text = std::fs::read_to_string(format!("{DIR}/{name}")).unwrap();
        match Scheduler::from_yaml(&text, name) {
            Ok(s) => assert_eq!(**s.data_layer(), DataLayer::default(), "{name}"),
            Err(e) => panic!("{e}"),
        }
    }
}

/// The 97 plugin types llm-d-router registers (`cmd/epp/runner/runner.go`
/// `registerInTreePlugins`, commit `ebab687`), in its order.
const LLM_D_TYPES: [&str; 97] = [
    "disaggregatedset-rollout-screener",
    "label-selector-filter",
    "by-label-selector",
    "by-label",
    "encode-filter",
    "decode-filter",
    "prefill-filter",
    "session-affinity-filter",
    "endpoint-attribute-filter",
    "topology-affinity-filter",
    "utilization-filter",
    "data-parallel-profile-handler",
    "load-aware-scorer",
    "context-length-aware",
    "session-affinity-scorer",
    "header-label-affinity-scorer",
    "models-data-source",
    "models-data-extractor",
    "topology-extractor",
    "dcgm-data-source",
    "dcgm-extractor",
    "prefix-cache-scorer",
    "max-score-picker",
    "random-picker",
    "weighted-random-picker",
    "single-profile-handler",
    "disagg-headers-handler",
    "prefill-header-handler",
    "pd-profile-handler",
    "disagg-profile-handler",
    "always-disagg-pd-decider",
    "prefix-based-pd-decider",
    "always-disagg-multimodal-decider",
    "kv-cache-utilization-scorer",
    "queue-scorer",
    "running-requests-size-scorer",
    "lora-affinity-scorer",
    "token-load-scorer",
    "no-hit-lru-scorer",
    "active-request-scorer",
    "precise-prefix-cache-scorer",
    "mm-embeddings-cache-scorer",
    "precise-prefix-cache-producer",
    "header-profile-handler",
    "endpoint-attribute-scorer",
    "topology-affinity-scorer",
    "burst-prefix-cache-producer",
    "p2p-source-producer",
    "multicluster-session-affinity-filter",
    "multicluster-queue-scorer",
    "multicluster-kv-cache-utilization-scorer",
    "multicluster-prefix-cache-scorer",
    "multicluster-approx-prefix-cache-producer",
    "global-strict-fairness-policy",
    "round-robin-fairness-policy",
    "program-aware-fairness",
    "fcfs-ordering-policy",
    "edf-ordering-policy",
    "slo-deadline-ordering-policy",
    "static-usage-limit-policy",
    "sheddable-eviction-filter",
    "priority-then-time-eviction-order-policy",
    "priority-holdback-policy",
    "soft-reflective-ceiling-policy",
    "approx-prefix-cache-producer",
    "inflight-load-producer",
    "predicted-latency-producer",
    "tokenizer",
    "mm-embeddings-cache-producer",
    "token-producer",
    "session-id-producer",
    "latency-slo-admitter",
    "probabilistic-admitter",
    "prefix-cache-affinity-filter",
    "slo-headroom-tier-filter",
    "latency-scorer",
    "header-based-testing-filter",
    "destination-endpoint-served-verifier",
    "metrics-data-source",
    "core-metrics-extractor",
    "multicluster-metrics-data-source",
    "multicluster-metrics-extractor",
    "k8s-notification-source",
    "endpoint-notification-source",
    "request-attribute-reporter",
    "openai-parser",
    "vllmgrpc-parser",
    "passthrough-parser",
    "anthropic-parser",
    "vllmhttp-parser",
    "sglanghttp-parser",
    "vertexai-parser",
    "concurrency-detector",
    "utilization-detector",
    "file-discovery",
    "multicluster-file-discovery",
    "agent-identity",
];

#[test]
fn every_llm_d_type_is_registered_or_refused_with_a_reason() {
    use pdgate_scheduler::registry::{lookup, refusal, REFUSED};
    let neither: Vec<&str> = LLM_D_TYPES
        .iter()
        .copied()
        .filter(|t| lookup(t).is_none() && refusal(t).is_none())
        .collect();
    assert!(
        neither.is_empty(),
        "neither registered nor refused: {neither:?}"
    );
    let both: Vec<&str> = REFUSED
        .iter()
        .map(|(t, _)| *t)
        .filter(|t| lookup(t).is_some())
        .collect();
    assert!(both.is_empty(), "registered and refused: {both:?}");
    let foreign: Vec<&str> = REFUSED
        .iter()
        .map(|(t, _)| *t)
        .filter(|t| !LLM_D_TYPES.contains(t))
        .collect();
    assert!(
        foreign.is_empty(),
        "refused but not llm-d types: {foreign:?}"
    );
}

/// The README's compatibility table says what the registry does: every llm-d type is a row,
/// a `supported` row is registered, a `refused` row is refused with the reason the row gives.
#[test]
fn the_readme_table_agrees_with_the_registry() {
    use pdgate_scheduler::registry::{lookup, refusal};
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md")).unwrap();
    let start = readme
        .find("### llm-d plugin types: supported and refused")
        .expect("the README has the table");
    let rows: Vec<(&str, &str, &str)> = readme[start..]
        .lines()
        .skip_while(|l| !l.starts_with("| `"))
        .take_while(|l| l.starts_with("| `"))
        .map(|l| {
            let cells: Vec<&str> = l.split(" | ").collect();
            let ty = cells[0].trim_start_matches("| `").trim_end_matches('`');
            (ty, cells[1], cells[2].trim_end_matches(" |"))
        })
        .collect();
    let listed: Vec<&str> = rows.iter().map(|r| r.0).collect();
    let missing: Vec<&&str> = LLM_D_TYPES.iter().filter(|t| !listed.contains(t)).collect();
    assert!(
        missing.is_empty(),
        "llm-d types missing from the README: {missing:?}"
    );
    for (ty, status, why) in rows {
        if status.starts_with("supported") {
            assert!(lookup(ty).is_some(), "README says `{ty}` is supported");
        } else {
            assert_eq!(refusal(ty), Some(why), "README's reason for `{ty}`");
        }
    }
}
