//! llm-d's coordinator file and the `kv-shared-storage` connector end to end (issue 13
//! item 1): simulator workers speaking vLLM's `ExampleConnector` over a shared directory,
//! pdgate splitting requests in front of them, and the real binary run as llm-d's coordinator
//! (`pdgate serve --coordinator-config`) with a pdgate router as its gateway. Assertions are on
//! the workers' own counters (which engine stored, which loaded, how many tokens).

use crate::support;

use pdgate_coordinator::KvConnector;
use pdgate_scenario::fleet;
use pdgate_scheduler::DEFAULT_CONFIG_YAML;
use pdgate_sim::transfer_config::KvTransferConfig;
use pdgate_sim::{SimConfig, WorkerHandle};
use serde_json::json;
use std::collections::BTreeMap;
use std::path::PathBuf;
use support::process::{self, TempPath};
use support::{endpoints, member, screened_config, sim_workers, url};

/// A fresh shared-storage directory, removed on drop.
struct SharedDir(PathBuf);

impl SharedDir {
    fn new() -> Self {
        let dir = std::env::temp_dir().join(format!(
            "pdgate-e2e-shared-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        SharedDir(dir)
    }
}

impl Drop for SharedDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// One prefill and one decode worker of revision `a`, both with `ExampleConnector` on `dir`.
async fn workers(dir: &SharedDir) -> Vec<WorkerHandle> {
    let json = json!({
        "kv_connector": "ExampleConnector",
        "kv_role": "kv_both",
        "kv_connector_extra_config": {"shared_storage_path": dir.0.to_str().unwrap()},
    })
    .to_string();
    let cfg = SimConfig {
        kv_transfer: Some(KvTransferConfig::parse(&json).unwrap()),
        ..support::sim_config(50.0)
    };
    sim_workers(
        vec![
            member("prefill-0", "a", "prefill"),
            member("decode-0", "a", "decode"),
        ],
        cfg,
    )
    .await
}

/// The decode worker loaded the prompt the prefill worker stored: one store on the prefill
/// side, one hit of `tokens` on the decode side, written by the same revision.
fn assert_handoff(w: &[WorkerHandle], tokens: u64) {
    let (p, d) = (w[0].stats(), w[1].stats());
    assert_eq!(
        p.kv_storage_stores, 1,
        "the prefill engine stored the prompt"
    );
    assert_eq!(
        d.kv_storage_lookups,
        BTreeMap::from([("hit".to_string(), 1)]),
        "the decode engine found it, written by its own revision"
    );
    assert_eq!(d.external_prefix_cache_hits, tokens);
    assert_eq!(d.prompt_tokens_external_kv_transfer, tokens);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_storage_split_loads_the_prefill_kv_on_the_decode_engine() {
    let dir = SharedDir::new();
    let w = workers(&dir).await;
    // The rollout screener gates both phases to one revision and stamps it on the answer.
    let router = fleet::router_with(endpoints(&w), &screened_config(), |o| {
        o.kv_connector = KvConnector::SharedStorage
    })
    .await
    .unwrap();
    fleet::wait_for_models(&router).await;
    // 256 prompt tokens: the prefill stores align(256) = 240 (16-token blocks, vLLM's
    // `((n - 1) // 16) * 16`), the decode looks up align(255) = 240.
    let r = support::send(&url(&router), &[], &support::body(0, 256, 4)).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        r.served(),
        ["split", "prefill-0", "decode-0"].map(String::from)
    );
    // vLLM 0.32 reports the transferred tokens as 0 cached tokens on the decode leg.
    assert_eq!(r.body["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
    assert_eq!(r.header("x-llm-d-disagg-revision"), "a");
    assert_handoff(&w, 240);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_runs_as_llm_d_coordinator_from_its_config_file() {
    let dir = SharedDir::new();
    let w = workers(&dir).await;
    // The gateway: a pdgate router selecting its profile from the phase header.
    let gateway = support::router(endpoints(&w), DEFAULT_CONFIG_YAML).await;
    fleet::wait_for_models(&gateway).await;
    let (coordinator, url) = coordinator_from(
        &format!(
            "log_level: 2\nserver:\n  listen_addr: \"127.0.0.1:0\"\n  read_timeout: 10s\ngateway:\n  address: http://{}\n  timeout: 20s\npipeline:\n  kv_connector: kv-shared-storage\n  use_openai_format: true\n  steps:\n    - type: prefill\n    - type: decode\n",
            gateway.addr
        ),
        &[("RUST_LOG", "info")],
    );
    let r = support::send(&url, &[], &support::body(0, 256, 4)).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
    assert_handoff(&w, 240);
    // Its log, written to a pipe as to a pod's log, is plain text (colour codes only on a
    // terminal; an adversarial try found them in a log file).
    let log = coordinator.log();
    let loaded: Vec<&String> = log
        .iter()
        .filter(|l| l.contains("coordinator config loaded"))
        .collect();
    assert_eq!(loaded.len(), 1, "{log:?}");
    assert!(log.iter().all(|l| !l.contains('\x1b')), "{log:?}");
    // `check-config` recognises the file and prints it with defaults written out.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_pdgate"))
        .args(["check-config", &path_of_sample()])
        .output()
        .unwrap();
    // llm-d's sample loads as it ships, every step included.
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for step in [
        "replace-media-urls",
        "render",
        "encode",
        "prefill",
        "decode",
    ] {
        assert!(
            stdout.contains(&format!("- type: {step}\n")),
            "{step}: {stdout}"
        );
    }
    assert!(
        stdout.contains("address: http://rendering-service:8080"),
        "{stdout}"
    );
    // `serve --print-config` prints the same: the coordinator file that would run, not the
    // scheduler config a coordinator does not use.
    let printed = std::process::Command::new(env!("CARGO_BIN_EXE_pdgate"))
        .args([
            "serve",
            "--coordinator-config",
            &path_of_sample(),
            "--print-config",
        ])
        .output()
        .unwrap();
    assert!(printed.status.success(), "{printed:?}");
    assert_eq!(String::from_utf8_lossy(&printed.stdout), stdout);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn render_and_tokens_in_prefill_from_the_coordinator_file() {
    let dir = SharedDir::new();
    let w = workers(&dir).await;
    let gateway = support::router(endpoints(&w), DEFAULT_CONFIG_YAML).await;
    fleet::wait_for_models(&gateway).await;
    // The render service is an engine's own render endpoint (vLLM's /v1/*/render).
    let (_coordinator, url) = coordinator_from(
        &format!(
            "gateway:\n  address: http://{}\nserver:\n  listen_addr: \"127.0.0.1:0\"\npipeline:\n  kv_connector: kv-shared-storage\n  use_openai_format: false\n  steps:\n    - type: render\n      params:\n        address: http://{}\n        max_total_tokens: 100000\n    - type: prefill\n    - type: decode\n",
            gateway.addr,
            w[0].addr()
        ),
        &[("RUST_LOG", "info")],
    );
    let words: String = (0..300).map(|i| format!("w{i} ")).collect();
    let chat = json!({"model": "pdgate-sim", "max_tokens": 3,
        "messages": [{"role": "user", "content": words}]});
    let r = support::send_to(&url, "/v1/chat/completions", &[], chat.to_string()).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["object"], "chat.completion");
    // The prefill engine ran a tokens-in generate leg; the decode engine the chat request,
    // loading the KV the prefill stored under the same token ids.
    let (p, d) = (w[0].stats(), w[1].stats());
    assert_eq!((p.generate, p.chat_completions), (1, 0), "{p:?}");
    assert_eq!((d.generate, d.chat_completions), (0, 1), "{d:?}");
    assert_eq!(p.kv_storage_stores, 1);
    assert_eq!(
        d.kv_storage_lookups,
        BTreeMap::from([("hit".to_string(), 1)])
    );
}

/// The real binary run as llm-d's coordinator from the file `yaml`, with `env`; the process
/// and its URL.
fn coordinator_from(yaml: &str, env: &[(&str, &str)]) -> (process::Served, String) {
    let file = TempPath::write("coordinator.yaml", yaml);
    let path = file.path().to_str().unwrap().to_string();
    let p = process::start(
        &["serve"],
        &["--coordinator-config", &path],
        env,
        vec![file],
        "pdgate serve listening on ",
    );
    let url = p.url.split_whitespace().next().unwrap().to_string();
    (p, url)
}

/// llm-d's sample coordinator file beside the checkout.
fn path_of_sample() -> String {
    concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/compat/llm-d/coordinator.yaml"
    )
    .to_string()
}

/// A fake gateway: a non-streamed leg (prefill) answers at once; a streamed leg (decode)
/// sends five SSE events 300 ms apart, then `[DONE]`.
async fn slow_gateway() -> support::FakeEngine {
    support::fake_engine("/v1/completions", |r| {
        let streamed = r.json()["stream"] == true;
        if !streamed {
            return axum::response::IntoResponse::into_response(axum::Json(
                json!({"choices": [{"text": "x"}]}),
            ));
        }
        let events = futures_util::stream::unfold(0u32, |i| async move {
            if i > 5 {
                return None;
            }
            tokio::time::sleep(std::time::Duration::from_millis(300)).await;
            let line = match i {
                5 => "data: [DONE]\n\n".to_string(),
                _ => format!("data: {{\"choices\":[{{\"text\":\"t{i}\"}}]}}\n\n"),
            };
            Some((Ok::<_, std::io::Error>(bytes::Bytes::from(line)), i + 1))
        });
        axum::response::Response::builder()
            .header("content-type", "text/event-stream")
            .body(axum::body::Body::from_stream(events))
            .unwrap()
    })
    .await
}

/// Regression (adversarial try, issue 13): SIGTERM cut a coordinator's running stream at
/// once (its legs book nothing on its own endpoints, so it saw nothing in flight). Now the
/// stream finishes, a new request meanwhile gets 503, and the process exits after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_coordinator_drains_its_running_streams_on_sigterm() {
    let gateway = slow_gateway().await;
    let (mut coordinator, url) = coordinator_from(
        &format!(
            "server:\n  listen_addr: \"127.0.0.1:0\"\n  shutdown_timeout: 10s\ngateway:\n  address: http://{}\npipeline:\n  steps:\n  - type: prefill\n  - type: decode\n",
            gateway.addr
        ),
        &[],
    );
    let mut body = support::body(0, 64, 8);
    body["stream"] = json!(true);
    let client = reqwest::Client::new();
    let mut resp = client
        .post(format!("{url}/v1/completions"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let first = resp.chunk().await.unwrap().unwrap();
    assert!(first.starts_with(b"data: "), "{first:?}");
    coordinator.terminate();
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let late = client
        .post(format!("{url}/v1/completions"))
        .json(&support::body(0, 64, 8))
        .send()
        .await
        .unwrap();
    assert_eq!(late.status(), 503, "a new request while draining");
    let mut rest = Vec::new();
    while let Some(c) = resp.chunk().await.unwrap() {
        rest.extend_from_slice(&c);
    }
    let text = String::from_utf8(rest).unwrap();
    assert!(
        text.ends_with("data: [DONE]\n\n"),
        "the stream finished: {text}"
    );
    let code = tokio::task::spawn_blocking(move || {
        coordinator.wait_exit(std::time::Duration::from_secs(5))
    })
    .await
    .unwrap();
    assert_eq!(code, Some(0));
}

/// The `encode` step with `ec-shared-storage` (llm-d's default): the coordinator sends one
/// encode leg per image through the gateway, the encoder writes its output under the image's
/// mm_hash, the prefill engine loads it from there (nothing on the wire), and the decode
/// engine loads the prefill's KV. Assertions on the three engines' own counters.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_encode_step_hands_its_output_over_the_shared_storage() {
    let dir = SharedDir::new();
    let extra = json!({"shared_storage_path": dir.0.to_str().unwrap()});
    let ec = |role: &str| {
        pdgate_sim::transfer_config::EcTransferConfig::parse(
            &json!({"ec_connector": "ECExampleConnector", "ec_role": role,
                    "ec_connector_extra_config": extra})
            .to_string(),
        )
        .unwrap()
    };
    let kv = KvTransferConfig::parse(
        &json!({"kv_connector": "ExampleConnector", "kv_role": "kv_both",
                "kv_connector_extra_config": extra})
        .to_string(),
    )
    .unwrap();
    let cfg = |ec_role: &str, with_kv: bool| SimConfig {
        ec_transfer: Some(ec(ec_role)),
        kv_transfer: with_kv.then(|| kv.clone()),
        ..support::sim_config(50.0)
    };
    let p = support::sim_worker(
        member("prefill-0", "a", "prefill"),
        cfg("ec_consumer", true),
    )
    .await;
    let d = support::sim_worker(member("decode-0", "a", "decode"), cfg("ec_consumer", true)).await;
    let e = support::sim_worker(member("encode-0", "a", "encode"), cfg("ec_producer", false)).await;
    let gateway = support::router(endpoints([&p, &d, &e]), DEFAULT_CONFIG_YAML).await;
    fleet::wait_for_models(&gateway).await;
    let (_coordinator, url) = coordinator_from(
        &format!(
            "server:\n  listen_addr: \"127.0.0.1:0\"\ngateway:\n  address: http://{}\npipeline:\n  kv_connector: kv-shared-storage\n  ec_connector: ec-shared-storage\n  steps:\n  - type: encode\n    params:\n      max_parallel: 2\n  - type: prefill\n  - type: decode\n",
            gateway.addr
        ),
        &[],
    );
    // 40 words: past one 16-token block, so the prefill engine stores KV for decode.
    let question = "what differs between these pictures ".repeat(8);
    let body = json!({"model": "pdgate-sim", "max_tokens": 4, "messages": [{"role": "user", "content": [
        {"type": "text", "text": question},
        {"type": "image_url", "image_url": {"url": "https://example.com/img-1.png"}}]}]});
    let r = reqwest::Client::new()
        .post(format!("{url}/v1/chat/completions"))
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = r.status();
    let text = r.text().await.unwrap();
    assert_eq!(status, 200, "{text}");
    let (es, ps, ds) = (e.stats(), p.stats(), d.stats());
    assert_eq!(
        (es.encode_items, es.ec_storage_stores),
        (1, 1),
        "the encoder stored its output"
    );
    assert_eq!(
        (
            ps.remote_encoded_items,
            ps.local_encoded_items,
            ps.ec_storage_lookups.get("hit")
        ),
        (1, 0, Some(&1)),
        "the prefill engine loaded the image by its mm_hash"
    );
    assert_eq!(ps.kv_storage_stores, 1);
    assert_eq!(
        ds.kv_storage_lookups.get("hit"),
        Some(&1),
        "the decode engine loaded the KV"
    );
}
