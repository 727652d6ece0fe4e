//! Precise prefix routing end to end: simulator workers publishing vLLM KV events (ZMQ PUB on
//! 127.0.0.1, port 0), routers with `precise-prefix-cache-producer` feeding
//! `prefix-cache-scorer` subscribed to them (each endpoint's port given by its
//! `pdgate.io/kv-events-port` label), and readers of the router's `/debug/kv-index`.

use super::{send, sim_worker, spec, url};
use pdgate_core::kv_feed::{PORT_LABEL, REPLAY_PORT_LABEL};
use pdgate_scheduler::Endpoint;
use pdgate_server::ServerHandle;
use pdgate_sim::kv_events::KvEventsConfig;
use pdgate_sim::{SimConfig, WorkerHandle};
use serde_json::{json, Value};
use std::time::Duration;

/// Bound on every wait of these tests (events reach the index within milliseconds).
pub const BOUND: Duration = Duration::from_secs(10);

/// Canonical block size of the routers (tokens).
pub const ROUTER_BLOCK: usize = 16;

/// The producer's name in [`PRECISE_YAML`] (the `producer` label of the index metrics).
pub const PRODUCER: &str = "precise-prefix-cache-producer";

/// llm-d's precise prefix routing: the KV-event index (canonical blocks of 16 tokens, every
/// topic) feeding `prefix-cache-scorer`, with the queue as the second signal.
pub const PRECISE_YAML: &str = "\
apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: precise-prefix-cache-producer
  parameters:
    tokenProcessorConfig:
      blockSize: 16
    kvEventsConfig:
      topicFilter: \"\"
- type: prefix-cache-scorer
  parameters:
    prefixMatchInfoProducerName: precise-prefix-cache-producer
- type: queue-scorer
- type: max-score-picker
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: prefix-cache-scorer
    weight: 3
  - pluginRef: queue-scorer
    weight: 1
  - pluginRef: max-score-picker
";

/// Simulator settings with `block_size` tokens per engine block and KV events published on
/// a free port of 127.0.0.1 (vLLM's `--kv-events-config`), fast.
pub fn kv_sim_config(block_size: usize) -> SimConfig {
    kv_sim_config_json(
        block_size,
        r#"{"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"tcp://127.0.0.1:0"}"#,
    )
}

/// [`kv_sim_config`] with a replay socket too (vLLM's `replay_endpoint`, a free port).
pub fn kv_sim_config_with_replay(block_size: usize) -> SimConfig {
    kv_sim_config_json(
        block_size,
        r#"{"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"tcp://127.0.0.1:0",
            "replay_endpoint":"tcp://127.0.0.1:0"}"#,
    )
}

fn kv_sim_config_json(block_size: usize, kv_events: &str) -> SimConfig {
    SimConfig {
        block_size,
        speedup: 1000.0,
        kv_events: Some(KvEventsConfig::parse(kv_events).unwrap()),
        ..SimConfig::default()
    }
}

/// A decode-role simulator worker `name` publishing KV events, with `cfg`.
pub async fn kv_worker(name: &str, cfg: SimConfig) -> WorkerHandle {
    sim_worker(spec(name, "decode", None), cfg).await
}

/// The endpoints of `workers`, each labeled with its KV-event port ([`PORT_LABEL`]) and,
/// when it has one, its replay port ([`REPLAY_PORT_LABEL`]).
pub fn kv_endpoints(workers: &[WorkerHandle]) -> Vec<Endpoint> {
    workers
        .iter()
        .map(|w| {
            let mut labels = w.spec().labels.clone();
            let ports = w.kv_event_ports().expect("KV events are on");
            labels.insert(PORT_LABEL.into(), ports.publish.to_string());
            if let Some(replay) = ports.replay {
                labels.insert(REPLAY_PORT_LABEL.into(), replay.to_string());
            }
            Endpoint::new(w.name(), w.addr().to_string(), labels)
        })
        .collect()
}

/// An endpoints file (`--endpoints-file`) listing `workers` as [`kv_endpoints`] does.
pub fn kv_endpoints_yaml(workers: &[WorkerHandle]) -> String {
    let mut s = String::from("endpoints:\n");
    for w in workers {
        s += &format!(
            "- name: {}\n  address: {}\n  labels: {{llm-d.ai/role: {}, {PORT_LABEL}: \"{}\"}}\n",
            w.name(),
            w.addr(),
            w.role(),
            publish_port(w)
        );
    }
    s
}

fn publish_port(w: &WorkerHandle) -> u16 {
    w.kv_event_ports().expect("KV events are on").publish
}

/// An in-process router with [`PRECISE_YAML`] in front of `workers`.
pub async fn precise_router(workers: &[WorkerHandle]) -> ServerHandle {
    super::router(kv_endpoints(workers), PRECISE_YAML).await
}

/// Workers `(name, settings)` publishing KV events and a [`precise_router`] in front of
/// them whose feeds are live ([`wait_feeds`]); returns them and the router's URL.
pub async fn precise_fleet(
    engines: Vec<(&str, SimConfig)>,
) -> (Vec<WorkerHandle>, ServerHandle, String) {
    let mut workers = Vec::new();
    for (name, cfg) in engines {
        workers.push(kv_worker(name, cfg).await);
    }
    let router = precise_router(&workers).await;
    let u = url(&router);
    wait_feeds(&[&u], &workers).await;
    (workers, router, u)
}

/// `GET {url}/debug/kv-index`: the dump of the router's (only) precise index.
pub async fn kv_index(url: &str) -> Value {
    let r = reqwest::get(format!("{url}/debug/kv-index")).await.unwrap();
    assert_eq!(r.status(), 200, "GET /debug/kv-index");
    let mut v: Value = r.json().await.unwrap();
    v["indexes"][0]["index"].take()
}

/// Canonical blocks the router at `url` credits to endpoint `name` (0 when it has no entry).
pub async fn blocks_held(url: &str, name: &str) -> u64 {
    let ix = kv_index(url).await;
    ix["endpoints"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == name)
        .map_or(0, |e| e["blocks_held"].as_u64().unwrap())
}

/// Waits (at most [`BOUND`]) until the router at `url` credits `name` with exactly `blocks`.
pub async fn wait_blocks(url: &str, name: &str, blocks: u64) {
    let start = tokio::time::Instant::now();
    loop {
        let held = blocks_held(url, name).await;
        if held == blocks {
            return;
        }
        if start.elapsed() > BOUND {
            let dump = reqwest::get(format!("{url}/debug/kv-index")).await.unwrap();
            panic!(
                "{url}: `{name}` holds {held} blocks, not {blocks}, after {BOUND:?}; {}",
                dump.text().await.unwrap()
            );
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// `POST {worker}/reset_prefix_cache` (one `AllBlocksCleared`); asserts 200.
pub async fn reset_prefix_cache(w: &WorkerHandle) {
    let r = reqwest::Client::new()
        .post(format!("{}/reset_prefix_cache", w.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "reset_prefix_cache of {}", w.name());
}

/// Token ids `first..first + len` (a prompt no other test prompt shares a block with when
/// the ranges are disjoint).
pub fn ids(first: u32, len: u32) -> Vec<u32> {
    (first..first + len).collect()
}

/// A completion of the token-id `prompt` (`max_tokens` 1) for the simulator's model.
pub fn completion(prompt: &[u32]) -> Value {
    json!({"model": "pdgate-sim", "prompt": prompt, "max_tokens": 1})
}

/// Sends `prompt` through the router at `url` (pinned to endpoint `pin` when given); returns
/// the endpoint that served it (`x-pdgate-decode-endpoint`, checked against the simulator's
/// `x-sim-worker` when pdgate forwards it) and the engine's `cached_tokens`.
pub async fn route(url: &str, prompt: &[u32], pin: Option<&str>) -> (String, u64) {
    let headers: Vec<(&str, &str)> = pin
        .map(|p| ("x-worker-instance-id", p))
        .into_iter()
        .collect();
    let r = send(url, &headers, &completion(prompt)).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let served = r.served()[2].clone();
    let sim = r.header("x-sim-worker");
    assert!(sim.is_empty() || sim == served, "{sim} vs {served}");
    let cached = r.body["usage"]["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .unwrap_or_else(|| panic!("usage.prompt_tokens_details.cached_tokens in {}", r.body));
    (served, cached)
}

/// Waits until every router of `urls` receives every worker's events and has scraped its
/// model (so a prompt's first block is keyed): per worker, a 64-token probe sent straight to
/// it (its cache reset first, so it is announced again) until every router credits it, then
/// a reset until every router credits nothing. A ZMQ PUB drops what it publishes before a
/// subscription has reached it, so the probe is repeated until it arrives.
pub async fn wait_feeds(urls: &[&str], workers: &[WorkerHandle]) {
    let probe = ids(900_000, 64);
    for w in workers {
        let start = tokio::time::Instant::now();
        'probe: loop {
            assert!(
                start.elapsed() < BOUND,
                "routers {urls:?} receive the KV events of `{}`",
                w.name()
            );
            reset_prefix_cache(w).await;
            let r = send(&w.url(), &[], &completion(&probe)).await;
            assert_eq!(r.status, 200, "{}", r.body);
            let tried = tokio::time::Instant::now();
            while tried.elapsed() < Duration::from_millis(300) {
                let mut all = true;
                for u in urls {
                    all &= blocks_held(u, w.name()).await > 0;
                }
                if all {
                    break 'probe;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
        reset_prefix_cache(w).await;
        for u in urls {
            wait_blocks(u, w.name(), 0).await;
        }
    }
}

/// `http://ADDR` of each of `routers`.
pub fn urls(routers: &[ServerHandle]) -> Vec<String> {
    routers.iter().map(url).collect()
}
