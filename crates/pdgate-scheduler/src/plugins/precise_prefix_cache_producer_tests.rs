//! Unit tests of `precise_prefix_cache_producer.rs`.

use crate::plugins::testutil::ep;
use crate::{Scheduler, SchedulingRequest, Snapshot};
use pdgate_api::kv_events::{BlockStored, EventBatch, KvEvent};
use pdgate_api::PromptInput;

/// llm-d's precise sample (guides/precise-prefix-cache-aware), engines at 64 tokens.
const YAML: &str = "apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: precise-prefix-cache-producer
  parameters:
    tokenProcessorConfig:
      blockSize: 16
      hashSeed: \"42\"
    speculativeIndexing: true
    indexerConfig:
      kvBlockIndexConfig:
        enableMetrics: true
    kvEventsConfig:
      topicFilter: \"kv@\"
      concurrency: 8
      discoverPods: true
      podDiscoveryConfig:
        socketPort: 5556
        replaySocketPort: 5559
- type: prefix-cache-scorer
  parameters:
    prefixMatchInfoProducerName: precise-prefix-cache-producer
- type: max-score-picker
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: prefix-cache-scorer
  - pluginRef: max-score-picker
";

#[test]
fn llm_d_precise_config_feeds_the_scorer_and_speculates() {
    let s = Scheduler::from_yaml(YAML, "precise.yaml").expect("loads");
    let subs = s.kv_event_indexes();
    assert_eq!(subs.len(), 1, "no approximate producer injected");
    assert_eq!(subs[0].producer, "precise-prefix-cache-producer");
    let ev = subs[0].index.events();
    assert_eq!(
        (
            ev.topic_filter.as_str(),
            ev.concurrency,
            ev.pod_discovery_config.socket_port,
            ev.pod_discovery_config.replay_socket_port
        ),
        ("kv@", 8, 5556, Some(5559))
    );
    assert_eq!(subs[0].index.settings().speculative_ttl_ms, Some(2000));
    assert!(s.effective_config_yaml().contains("speculativeTTL: 2s"));
    // Engine `b` (64-token blocks) holds the prompt's first 128 tokens: 8 canonical blocks.
    let eps = [ep("a", None), ep("b", None)];
    for e in &eps {
        e.load.set_models(vec!["m".into()]);
    }
    let tokens: Vec<u32> = (0..160).collect();
    let stored = BlockStored {
        block_hashes: vec![1, 2],
        token_ids: tokens[..128].to_vec(),
        block_size: 64,
        ..BlockStored::default()
    };
    let batch = EventBatch {
        seq: 1,
        ts: 0.0,
        dp_rank: None,
        events: vec![KvEvent::BlockStored(stored)],
    };
    assert_eq!(subs[0].index.apply(&eps[1], &batch, 0).blocks_stored, 8);
    let snap = Snapshot {
        endpoints: eps.to_vec(),
        version: 1,
    };
    let p = PromptInput::Tokens(tokens);
    let r = s
        .schedule(&SchedulingRequest::new("r", "m", &p), &snap)
        .expect("pick");
    assert_eq!(r.decode.endpoint.endpoint.name, "b");
    assert_eq!(r.decode.cached_tokens, 128);
    // The pick credited `b` speculatively with the 2 blocks its engine has not reported.
    assert_eq!(subs[0].index.blocks_held("b"), 10);
    assert_eq!(subs[0].index.counts().speculative_added, 2);
}

/// A request scheduled at `first` ms (`SchedulingRequest::now_ms`) credits its 64-token
/// prompt (4 blocks of 16) to its pick until `first` + the 2 s TTL; a second request for the
/// same prompt scheduled at `then` ms: whether it went to the credited endpoint, and the
/// tokens it found cached on its pick. Nothing reads the clock: both times are the callers'.
fn credit_seen_at(first: u64, then: u64) -> (bool, usize) {
    let s = Scheduler::from_yaml(YAML, "precise.yaml").expect("loads");
    let eps = [ep("a", None), ep("b", None)];
    for e in &eps {
        e.load.set_models(vec!["m".into()]);
    }
    let snap = Snapshot {
        endpoints: eps.to_vec(),
        version: 1,
    };
    let p = PromptInput::Tokens((0..64).collect());
    let at = |now_ms| SchedulingRequest {
        now_ms,
        ..SchedulingRequest::new("r", "m", &p)
    };
    let first = s.schedule(&at(first), &snap).expect("pick");
    assert_eq!(first.decode.cached_tokens, 0, "nothing cached yet");
    let credited = first.decode.endpoint.endpoint.name.clone();
    drop(first);
    let second = s.schedule(&at(then), &snap).expect("pick");
    let same = second.decode.endpoint.endpoint.name == credited;
    (same, second.decode.cached_tokens)
}

#[test]
fn speculative_credits_expire_at_the_requests_now() {
    // Credited at 1000 until 3000: at 2999 the credit draws the request (4 blocks × 16).
    assert_eq!(credit_seen_at(1_000, 2_999), (true, 64));
    // At 3000 it has expired: nothing is cached anywhere (the pick is a tie).
    assert_eq!(credit_seen_at(1_000, 3_000).1, 0);
    // Only the difference counts, not the wall clock: the same at other times.
    assert_eq!(credit_seen_at(500_000, 501_999), (true, 64));
    assert_eq!(credit_seen_at(500_000, 502_000).1, 0);
}

#[test]
fn unknown_and_unsupported_fields_are_errors_naming_them() {
    let with = |params: &str| {
        let yaml = format!(
            "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n\
                 - type: precise-prefix-cache-producer\n  parameters:\n{params}\n\
                 - type: max-score-picker\n"
        );
        Scheduler::from_yaml(&yaml, "p.yaml")
            .err()
            .map(|e| e.to_string())
    };
    let e = with("    indexerConfig:\n      kvBlockIndexConfig:\n        redisConfig: {}").unwrap();
    assert!(e.contains("redisConfig"), "{e}");
    let e = with("    speculativeTTL: 2d").unwrap();
    assert!(e.contains("speculativeTTL"), "{e}");
    let e = with("    tokenProcessorConfig:\n      blockSize: 0").unwrap();
    assert!(e.contains("tokenProcessorConfig.blockSize"), "{e}");
    // Port 0 passed and then retried forever; a replay port equal to the publish port
    // can never bind on the engine.
    let pods = |p: &str| format!("    kvEventsConfig:\n      podDiscoveryConfig: {p}");
    for (p, field) in [
        ("{socketPort: 0}", "podDiscoveryConfig.socketPort"),
        (
            "{replaySocketPort: 0}",
            "podDiscoveryConfig.replaySocketPort",
        ),
        (
            "{socketPort: 5557, replaySocketPort: 5557}",
            "must differ from socketPort",
        ),
    ] {
        let e = with(&pods(p)).unwrap();
        assert!(e.contains(field), "{p}: {e}");
    }
    assert_eq!(
        with(&pods("{socketPort: 5557, replaySocketPort: 5657}")),
        None
    );
    assert_eq!(
        with("    tokenProcessorConfig:\n      blockSizeTokens: 64"),
        None
    );
}
