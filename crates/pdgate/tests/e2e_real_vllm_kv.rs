//! The real `pdgate serve` binary with llm-d's precise prefix routing in front of two real
//! vLLM 0.32 CPU servers publishing their KV events (`support::real_vllm`): a repeated
//! prompt goes to the engine whose events say it holds it and hits its cache; after
//! `/reset_prefix_cache` and after a restart, that engine is no longer credited.
//!
//! Like `e2e_real_vllm.rs`: the install runs from the test (cached outside the repo) and a
//! failed install fails it; `PDGATE_SKIP_REAL_VLLM=1` skips it loudly (CI refuses it).

mod support;

use std::time::{Duration, Instant};
use support::real_vllm::{self, series, Fleet, ServerSpec};
use support::real_vllm_http::*;

/// llm-d's precise prefix producer (`precise-prefix-cache-producer` feeding
/// `prefix-cache-scorer`) reading the engines' KV events, with the prompts tokenized by the
/// model's own `tokenizer.json` (`token-producer`, local backend: `TOKENIZER` is replaced by
/// the tiny model's directory) so that the router's block hashes cover the engine's token ids.
/// Each endpoint's ZMQ port is its `pdgate.io/kv-events-port` label.
const PRECISE_CONFIG: &str = "\
apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: token-producer
  parameters:
    modelName: tiny
    local:
      tokenizer: TOKENIZER
- type: precise-prefix-cache-producer
  parameters:
    tokenProcessorConfig:
      blockSize: 16
- type: prefix-cache-scorer
  parameters:
    prefixMatchInfoProducerName: precise-prefix-cache-producer
- type: queue-scorer
- type: decode-filter
- type: max-score-picker
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: decode-filter
  - pluginRef: prefix-cache-scorer
    weight: 3
  - pluginRef: queue-scorer
    weight: 1
  - pluginRef: max-score-picker
";

/// Sends `prompt` through `url` (pinned to `pin` when given) and returns (served endpoint,
/// cached tokens).
async fn once(url: &str, prompt: &str, pin: Option<&str>) -> (String, u64) {
    let headers: Vec<(&str, &str)> = pin
        .map(|p| ("x-worker-instance-id", p))
        .into_iter()
        .collect();
    let a = post(url, "/v1/completions", &headers, &completion(prompt, 1)).await;
    assert_eq!(a.status, 200, "{}", a.text);
    (a.served()[2].to_string(), usage(&a.json()).1)
}

/// Canonical blocks pdgate's precise index credits to `endpoint` (`pdgate_kv_index_blocks`).
async fn index_blocks(url: &str, endpoint: &str) -> f64 {
    let text = reqwest::get(format!("{url}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    series(&text, "pdgate_kv_index_blocks", &[("endpoint", endpoint)]).unwrap_or(0.0)
}

/// Waits (≤ 30 s) until pdgate's index credits `endpoint` with blocks (`held`) or none;
/// on timeout, panics with pdgate's KV-event counters and index dump.
async fn wait_index(url: &str, endpoint: &str, held: bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while (index_blocks(url, endpoint).await > 0.0) != held {
        if Instant::now() > deadline {
            let m = support::metrics(url).await;
            let kv: Vec<&str> = m.lines().filter(|l| l.starts_with("pdgate_kv_")).collect();
            let dump = reqwest::get(format!("{url}/debug/kv-index?sample=2"))
                .await
                .unwrap();
            panic!(
                "{endpoint} credited with blocks: {held} not reached in 30 s\n{}\n{}",
                kv.join("\n"),
                dump.text().await.unwrap()
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn real_vllm_kv_events_drive_precise_prefix_routing() {
    let Some(home) = real_vllm::install() else {
        return;
    };
    let spec = |name: &str, core| ServerSpec {
        name: name.into(),
        core,
        kv_role: None,
    };
    let mut fleet = Fleet::start(&home, vec![spec("vllm-0", 0), spec("vllm-1", 1)]).await;
    let mut yaml = fleet.endpoints_yaml(&["decode", "decode"]);
    for s in &fleet.servers {
        let labels = "labels: {llm-d.ai/role: decode";
        let entry = format!("address: {}\n  {labels}", s.addr());
        yaml = yaml.replace(
            &entry,
            &format!("{entry}, pdgate.io/kv-events-port: '{}'", s.ports.kv_events),
        );
    }
    let config = PRECISE_CONFIG.replace("TOKENIZER", home.join("tiny").to_str().unwrap());
    let router = pdgate(&yaml, Some(&config), "precise");
    let url = router.url.as_str();
    let prompt = text(7, 300);
    let first = post(url, "/v1/completions", &[], &completion(&prompt, 1)).await;
    assert_eq!(first.status, 200, "{}", first.text);
    let holder = first.served()[2].to_string();
    let cached = cached_when_held(usage(&first.json()).0);

    // The holder's events credit it: repeats go there and hit its cache.
    wait_index(url, &holder, true).await;
    for _ in 0..3 {
        assert_eq!(once(url, &prompt, None).await, (holder.clone(), cached));
    }
    let index = |name: &str| {
        fleet
            .servers
            .iter()
            .position(|s| s.spec.name == name)
            .unwrap()
    };
    let (h, other) = (index(&holder), 1 - index(&holder));
    let other_name = fleet.servers[other].spec.name.clone();

    // Reset the holder's cache (AllBlocksCleared), then let the other engine hold the prompt:
    // only the other one is credited now, so every repeat goes there.
    // vLLM queues `AllBlocksCleared` and publishes it with its next engine step: a short
    // request (no full block, so nothing stored) pinned to the holder makes it step.
    assert_eq!(fleet.servers[h].reset_prefix_cache().await, 200);
    assert_eq!(once(url, "hello", Some(&holder)).await, (holder.clone(), 0));
    wait_index(url, &holder, false).await;
    assert_eq!(
        once(url, &prompt, Some(&other_name)).await,
        (other_name.clone(), 0)
    );
    wait_index(url, &other_name, true).await;
    for _ in 0..4 {
        assert_eq!(
            once(url, &prompt, None).await,
            (other_name.clone(), cached),
            "after /reset_prefix_cache the old holder is not credited"
        );
    }

    // The old holder takes the prompt again (pinned); then the other engine restarts empty
    // on the same address: only the old holder is credited.
    assert_eq!(once(url, &prompt, Some(&holder)).await.0, holder);
    wait_index(url, &holder, true).await;
    fleet.servers[other].restart().await;
    wait_index(url, &other_name, false).await;
    for _ in 0..4 {
        assert_eq!(
            once(url, &prompt, None).await,
            (holder.clone(), cached),
            "a restarted engine is not credited for its old blocks"
        );
    }
}
