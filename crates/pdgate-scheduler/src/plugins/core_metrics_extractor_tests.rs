//! Unit tests of `core_metrics_extractor.rs`.

use super::*;
use std::collections::BTreeMap;

fn engines(yaml: &str) -> Result<EngineMetrics, PluginError> {
    let v: Value = serde_yaml_ng::from_str(yaml).unwrap();
    let mut ctx = BuildCtx {
        built: &[],
        profiles: &[],
        next_slot: 0,
    };
    let b = build(Some(&v), &mut ctx)?;
    match b.data {
        Some(DataPlugin::MetricsExtractor(m)) => Ok((*m).clone()),
        _ => panic!("not an extractor"),
    }
}

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn specs_parse_like_llm_d() {
    let s = MetricSpec::parse("nv_trt_llm_request_metrics{request_type=waiting}")
        .unwrap()
        .unwrap();
    assert_eq!(s.name, "nv_trt_llm_request_metrics");
    assert_eq!(s.labels, vec![("request_type".into(), "waiting".into())]);
    let s = MetricSpec::parse(r#" m:x { a = "1 2" , b=c } "#)
        .unwrap()
        .unwrap();
    assert_eq!(s.name, "m:x");
    assert_eq!(
        s.labels,
        vec![("a".into(), "1 2".into()), ("b".into(), "c".into())]
    );
    assert_eq!(s.to_string(), r#"m:x{a="1 2",b="c"}"#);
    assert_eq!(MetricSpec::parse("m{}").unwrap().unwrap().labels, vec![]);
    assert_eq!(MetricSpec::parse(""), Ok(None));
    assert_eq!(
        MetricSpec::parse("9bad"),
        Err(r#"not a valid metric specification: "9bad""#.into())
    );
    assert_eq!(
        MetricSpec::parse("m{a=1"),
        Err(r#"not a valid metric specification: "m{a=1""#.into())
    );
    assert_eq!(
        MetricSpec::parse("m{a=1,}"),
        Err(r#"invalid label pair "" in specification: "m{a=1,}""#.into())
    );
    assert_eq!(
        MetricSpec::parse("m{a:b=1}"),
        Err(r#"invalid label pair "a:b=1" in specification: "m{a:b=1}""#.into())
    );
    let mut got = Vec::new();
    assert!(s.matches(|k| {
        got.push(k.to_string());
        Some(if k == "a" { "1 2" } else { "c" }.to_string())
    }));
    assert_eq!(got, ["a", "b"]);
    assert!(!s.matches(|_| None));
}

#[test]
fn defaults_map_engine_labels_to_built_in_names() {
    let m = EngineMetrics::default();
    assert_eq!(
        m.engines
            .iter()
            .map(|(n, _)| n.as_str())
            .collect::<Vec<_>>(),
        [
            "vllm",
            "sglang",
            "trtllm-serve",
            "triton-tensorrt-llm",
            "triton"
        ]
    );
    let vllm = m.for_labels(&labels(&[]));
    assert_eq!(
        vllm.queue,
        Some(MetricSpec::named("vllm:num_requests_waiting"))
    );
    assert_eq!(
        vllm.kv_usage_fallback,
        Some(MetricSpec::named("vllm:gpu_cache_usage_perc"))
    );
    let sglang = m.for_labels(&labels(&[(DEFAULT_ENGINE_LABEL_KEY, "sglang")]));
    assert_eq!(
        sglang.running,
        Some(MetricSpec::named("sglang:num_running_reqs"))
    );
    assert_eq!(sglang.cache_block_size_label, "page_size");
    // The legacy label counts when the key is absent or empty; unknown values → default.
    let legacy = labels(&[
        (DEFAULT_ENGINE_LABEL_KEY, ""),
        (LEGACY_ENGINE_LABEL_KEY, "triton"),
    ]);
    assert_eq!(m.for_labels(&legacy).kv_usage, None);
    let unknown = labels(&[(DEFAULT_ENGINE_LABEL_KEY, "nope")]);
    assert_eq!(
        m.for_labels(&unknown).running,
        Some(MetricSpec::named("vllm:num_requests_running"))
    );
    let trt = m.engine("triton-tensorrt-llm").unwrap();
    assert_eq!(
        trt.cache_block_size.as_ref().unwrap().to_string(),
        r#"nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="tokens_per"}"#
    );
}

#[test]
fn user_configs_replace_built_ins_whole_and_set_the_default() {
    let m = engines(
        "engineLabelKey: engine\ndefaultEngine: mine\nengineConfigs:\n\
             - name: mine\n  queuedRequestsSpec: q{tier=gold}\n\
             - name: vllm\n  runningRequestsSpec: r\n",
    )
    .unwrap();
    assert_eq!(m.label_key, "engine");
    let mine = m.for_labels(&labels(&[]));
    assert_eq!(
        mine.queue.as_ref().unwrap().to_string(),
        r#"q{tier="gold"}"#
    );
    assert_eq!(mine.running, None);
    let vllm = m.for_labels(&labels(&[("engine", "vllm")]));
    assert_eq!(
        (
            vllm.queue.clone(),
            vllm.running.clone(),
            vllm.kv_usage_fallback.clone()
        ),
        (None, Some(MetricSpec::named("r")), None)
    );
    assert_eq!(vllm.cache_block_size_label, DEFAULT_BLOCK_SIZE_LABEL);
    assert_eq!(m.engines.len(), 6);
}

#[test]
fn bad_parameters_name_their_field() {
    let err = |y: &str| {
        let e = engines(y).unwrap_err();
        (e.path.unwrap_or_default(), e.message)
    };
    assert_eq!(
        err("defaultEngine: sgl\n"),
        (
            "defaultEngine".into(),
            r#"defaultEngine "sgl" not found in engineConfigs"#.into()
        )
    );
    assert_eq!(
        err("engineConfigs:\n- queuedRequestsSpec: q\n"),
        (
            "engineConfigs[0].name".into(),
            "engine config name cannot be empty".into()
        )
    );
    assert_eq!(
        err("engineConfigs:\n- name: default\n").1,
        r#"engine config name cannot be "default" (reserved)"#
    );
    assert_eq!(
        err("engineConfigs:\n- name: a\n- name: a\n"),
        (
            "engineConfigs[1].name".into(),
            r#"mapping for engine type "a" already exists"#.into()
        )
    );
    assert_eq!(
        err("engineConfigs:\n- name: a\n  kvUsageSpec: 'k{x}'\n"),
        (
            "engineConfigs[0].kvUsageSpec".into(),
            r#"engine "a": invalid label pair "x" in specification: "k{x}""#.into()
        )
    );
    let (field, msg) =
        err("engineConfigs:\n- name: a\n  customMetrics:\n  - {attributeKey: k, metricSpec: m}\n");
    assert_eq!(field, "engineConfigs[0].customMetrics");
    assert!(msg.starts_with("not supported"), "{msg}");
    let (field, msg) = err("engineConfigs:\n- name: a\n  bogus: 1\n");
    assert_eq!(field, "engineConfigs[0]");
    assert!(msg.starts_with("unknown field `bogus`"), "{msg}");
}
