//! The real `pdgate serve` binary in front of two real vLLM 0.32 CPU servers (a tiny local
//! model; `support::real_vllm`): aggregated routing of completions and chat, streamed and not;
//! the engines' real `/metrics` read by pdgate; a prompt repeated through pdgate served from
//! the engine's prefix cache; a prefill→decode split over NIXL, proven by the engines'
//! counters. The KV-event checks (precise prefix routing) are the second test, to be enabled
//! once the subscriber and the precise index are merged.
//!
//! The install (`tools/real-vllm/install.sh`) runs from the test, cached outside the repo; a
//! failed install fails the test. `PDGATE_SKIP_REAL_VLLM=1` skips it with a loud banner (for
//! developers; CI never sets it). Needs ~6.5 GB of disk and ~9 GB of memory.

mod support;

use serde_json::{json, Value};
use std::time::{Duration, Instant};
use support::process::{serve, Served, TempPath};
use support::real_vllm::{self, series, Fleet, KvRole, ServerSpec, VllmServer, BLOCK_SIZE, MODEL};
use support::vllm::wait_for;

/// A deterministic text prompt of `words` words, distinct per `seed` from its first word on
/// (so no two seeds share a KV block).
fn text(seed: u32, words: u32) -> String {
    (0..words)
        .map(|i| format!("s{seed}w{} ", i.wrapping_mul(2_654_435_761) % 9973))
        .collect()
}

/// An answer read whole: status, headers, body text.
struct Answer {
    status: u16,
    headers: http::HeaderMap,
    text: String,
}

impl Answer {
    fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .map_or("", |v| v.to_str().unwrap_or(""))
    }

    fn json(&self) -> Value {
        serde_json::from_str(&self.text).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text))
    }

    /// The `data:` payloads of an SSE body, `[DONE]` excluded; panics when the stream does
    /// not end with `data: [DONE]` or a payload is not JSON.
    fn sse(&self) -> Vec<Value> {
        assert!(
            self.text.ends_with("data: [DONE]\n\n"),
            "the stream ends with [DONE]: {}",
            self.text
        );
        (self.text.split("\n\n"))
            .filter_map(|e| e.strip_prefix("data: "))
            .filter(|d| *d != "[DONE]")
            .map(|d| serde_json::from_str(d).unwrap_or_else(|e| panic!("{e}: {d}")))
            .collect()
    }

    /// `[x-pdgate-pd-mode, prefill endpoint, decode endpoint]`.
    fn served(&self) -> [&str; 3] {
        [
            self.header("x-pdgate-pd-mode"),
            self.header("x-pdgate-prefill-endpoint"),
            self.header("x-pdgate-decode-endpoint"),
        ]
    }
}

/// POSTs `body` to `{url}{path}` with `headers` and reads the whole answer.
async fn post(url: &str, path: &str, headers: &[(&str, &str)], body: &Value) -> Answer {
    let mut req = reqwest::Client::new()
        .post(format!("{url}{path}"))
        .timeout(Duration::from_secs(120))
        .json(body);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let r = req.send().await.unwrap();
    let (status, headers) = (r.status().as_u16(), r.headers().clone());
    Answer {
        status,
        headers,
        text: r.text().await.unwrap(),
    }
}

/// A completion of `prompt` through `url`: `max_tokens` generated exactly (`ignore_eos`).
fn completion(prompt: &str, max_tokens: u32) -> Value {
    json!({"model": MODEL, "prompt": prompt, "max_tokens": max_tokens, "ignore_eos": true})
}

/// `body` streamed, with the usage in a last event (`stream_options.include_usage`).
fn streamed(mut body: Value) -> Value {
    body["stream"] = json!(true);
    body["stream_options"] = json!({"include_usage": true});
    body
}

/// The `usage.completion_tokens` of a stream's last event (vLLM may send several tokens in
/// one event, so events are not counted).
fn streamed_tokens(events: &[Value]) -> u64 {
    let last = events.last().expect("at least one event");
    last["usage"]["completion_tokens"]
        .as_u64()
        .unwrap_or_else(|| panic!("the last event holds the usage: {last}"))
}

/// `pdgate serve` over the endpoints file `endpoints`, with the built-in config unless
/// `config` is given.
fn pdgate(endpoints: &str, config: Option<&str>, stem: &str) -> Served {
    let endpoints = TempPath::write(&format!("{stem}-endpoints"), endpoints);
    let path = endpoints.path().to_str().unwrap().to_string();
    let mut files = vec![endpoints];
    let mut args = vec!["--endpoints".to_string(), path];
    if let Some(yaml) = config {
        let c = TempPath::write(&format!("{stem}-config"), yaml);
        args.extend(["--config".to_string(), c.path().to_str().unwrap().into()]);
        files.push(c);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    serve(&args, &[], files)
}

/// A sample of pdgate's own `/metrics` for `endpoint`, `None` when absent (unknown).
fn endpoint_gauge(text: &str, name: &str, endpoint: &str) -> Option<f64> {
    series(text, name, &[("endpoint", endpoint)])
}

/// The engine counter `name{labels}` (summed over engines), 0 when absent.
fn counter(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    series(text, name, labels).unwrap_or(0.0)
}

/// What vLLM reports as `cached_tokens` for a prompt of `prompt` tokens whose blocks it all
/// holds: whole blocks only, and at least the last token is computed again.
fn cached_when_held(prompt: u64) -> u64 {
    (prompt - 1) / BLOCK_SIZE * BLOCK_SIZE
}

fn usage(body: &Value) -> (u64, u64) {
    let u = &body["usage"];
    let prompt = u["prompt_tokens"].as_u64().expect("usage.prompt_tokens");
    let cached = u["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .expect("usage.prompt_tokens_details.cached_tokens (--enable-prompt-tokens-details)");
    (prompt, cached)
}

#[tokio::test]
async fn real_vllm_aggregated_metrics_and_nixl_split_through_pdgate() {
    let started = Instant::now();
    let Some(home) = real_vllm::install() else {
        return;
    };
    let spec = |name: &str, core| ServerSpec {
        name: name.into(),
        core,
        kv_role: Some(KvRole::Both),
    };
    let fleet = Fleet::start(&home, vec![spec("vllm-0", 0), spec("vllm-1", 1)]).await;
    let names = ["vllm-0", "vllm-1"];

    // One router runs everything aggregated (both engines decode-capable only); another
    // splits, vllm-0 prefilling and vllm-1 decoding. Both use the built-in config.
    let agg = pdgate(&fleet.endpoints_yaml(&["decode", "decode"]), None, "agg");
    let split = pdgate(&fleet.endpoints_yaml(&["prefill", "decode"]), None, "split");

    // The engines' gauges are read for both endpoints (absent = unknown).
    wait_for(
        Duration::from_secs(30),
        "pdgate reads both engines' gauges",
        || {
            let url = agg.url.clone();
            async move {
                let m = support::metrics(&url).await;
                names.iter().all(|e| {
                    endpoint_gauge(&m, "pdgate_endpoint_up", e) == Some(1.0)
                        && endpoint_gauge(&m, "pdgate_endpoint_requests_running", e) == Some(0.0)
                        && endpoint_gauge(&m, "pdgate_endpoint_requests_waiting", e) == Some(0.0)
                        && endpoint_gauge(&m, "pdgate_endpoint_kv_cache_usage_perc", e).is_some()
                })
            }
        },
    )
    .await;
    let models: Value = reqwest::get(format!("{}/v1/models", agg.url))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(models["data"][0]["id"], MODEL, "{models}");

    aggregated_apis(&agg.url, &fleet).await;
    repeated_prompt_hits_the_engine_cache(&agg.url, &fleet).await;
    running_gauge_follows_a_stream(&agg.url).await;
    nixl_split(&split.url, &fleet.servers[0], &fleet.servers[1]).await;

    // After the traffic both routers still read both engines. A real scrape under load can
    // outlast pdgate's default timeout (3 s; one did with the machine at load 14 on 2 cores):
    // that tick's gauges are unknown and the failure is counted, never fatal. The count is
    // printed, not asserted, since the machine is shared.
    for router in [&agg, &split] {
        wait_for(
            Duration::from_secs(30),
            "both engines scraped again",
            || {
                let url = router.url.clone();
                async move {
                    let m = support::metrics(&url).await;
                    names
                        .iter()
                        .all(|e| endpoint_gauge(&m, "pdgate_endpoint_up", e) == Some(1.0))
                }
            },
        )
        .await;
        let m = support::metrics(&router.url).await;
        let errors = series(&m, "pdgate_scrape_errors_total", &[]);
        eprintln!("{}: pdgate_scrape_errors_total {errors:?}", router.url);
    }
    eprintln!(
        "real-vLLM test: servers ready in {:.1} s / {:.1} s; whole test {:.1} s",
        fleet.servers[0].start_time.as_secs_f64(),
        fleet.servers[1].start_time.as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
}

/// Completions and chat, streamed and not, through the aggregated router: each answers 200
/// from one of the engines, and the engines count exactly these four requests.
async fn aggregated_apis(url: &str, fleet: &Fleet) {
    let before = engines_sum(fleet, "vllm:request_success_total").await;
    let names = ["vllm-0", "vllm-1"];

    let a = post(url, "/v1/completions", &[], &completion("def main():", 8)).await;
    assert_eq!(a.status, 200, "{}", a.text);
    let [mode, _, decode] = a.served();
    assert_eq!(mode, "aggregated");
    assert!(names.contains(&decode), "served by {decode:?}");
    let body = a.json();
    assert_eq!(body["object"], "text_completion");
    assert_eq!(body["usage"]["completion_tokens"], 8);

    let a = post(
        url,
        "/v1/completions",
        &[],
        &streamed(completion("import os", 8)),
    )
    .await;
    assert_eq!(a.status, 200, "{}", a.text);
    assert_eq!(a.header("content-type"), "text/event-stream; charset=utf-8");
    let events = a.sse();
    assert!(events.iter().all(|e| e["object"] == "text_completion"));
    assert_eq!(streamed_tokens(&events), 8);

    let chat = json!({"model": MODEL, "max_tokens": 8, "ignore_eos": true,
        "messages": [{"role": "user", "content": "Say hello."}]});
    let a = post(url, "/v1/chat/completions", &[], &chat).await;
    assert_eq!(a.status, 200, "{}", a.text);
    assert_eq!(a.served()[0], "aggregated");
    let body = a.json();
    assert_eq!(body["object"], "chat.completion");
    assert_eq!(body["choices"][0]["message"]["role"], "assistant");
    assert_eq!(body["usage"]["completion_tokens"], 8);

    let a = post(url, "/v1/chat/completions", &[], &streamed(chat)).await;
    assert_eq!(a.status, 200, "{}", a.text);
    let events = a.sse();
    assert!(events
        .iter()
        .all(|e| e["object"] == "chat.completion.chunk"));
    assert_eq!(events[0]["choices"][0]["delta"]["role"], "assistant");
    assert_eq!(streamed_tokens(&events), 8);

    let after = engines_sum(fleet, "vllm:request_success_total").await;
    assert_eq!(
        after - before,
        4.0,
        "the engines finished exactly 4 requests"
    );
}

/// Σ over the fleet's engines of the counter `name`.
async fn engines_sum(fleet: &Fleet, name: &str) -> f64 {
    let mut sum = 0.0;
    for s in &fleet.servers {
        sum += counter(&s.metrics().await, name, &[]);
    }
    sum
}

/// A long prompt sent three times goes to one engine, which serves the repeats from its
/// prefix cache (every whole block but the one holding the last token).
async fn repeated_prompt_hits_the_engine_cache(url: &str, fleet: &Fleet) {
    let prompt = text(1, 300);
    let first = post(url, "/v1/completions", &[], &completion(&prompt, 1)).await;
    assert_eq!(first.status, 200, "{}", first.text);
    let holder = first.served()[2].to_string();
    let (tokens, cached) = usage(&first.json());
    assert!(tokens > 4 * BLOCK_SIZE, "a long prompt: {tokens} tokens");
    assert_eq!(cached, 0, "nothing cached before");
    let server = (fleet.servers.iter())
        .find(|s| s.spec.name == holder)
        .expect("the holder is one of the servers");
    let hits_before = counter(&server.metrics().await, "vllm:prefix_cache_hits_total", &[]);
    for _ in 0..2 {
        let again = post(url, "/v1/completions", &[], &completion(&prompt, 1)).await;
        assert_eq!(again.status, 200, "{}", again.text);
        assert_eq!(again.served()[2], holder, "the repeat goes to the holder");
        assert_eq!(usage(&again.json()), (tokens, cached_when_held(tokens)));
    }
    let hits_after = counter(&server.metrics().await, "vllm:prefix_cache_hits_total", &[]);
    assert_eq!(
        hits_after - hits_before,
        2.0 * cached_when_held(tokens) as f64,
        "the engine counted the hits"
    );
}

/// While a stream runs, pdgate's copy of the engine's `vllm:num_requests_running` shows it on
/// the serving endpoint; once it ends, 0 again.
async fn running_gauge_follows_a_stream(url: &str) {
    let b = streamed(completion("class Stream:", 200));
    let u = url.to_string();
    let stream = tokio::spawn(async move { post(&u, "/v1/completions", &[], &b).await });
    let deadline = Instant::now() + Duration::from_secs(60);
    let seen = loop {
        let m = support::metrics(url).await;
        let running = ["vllm-0", "vllm-1"]
            .into_iter()
            .find(|e| endpoint_gauge(&m, "pdgate_endpoint_requests_running", e) == Some(1.0));
        if running.is_some() {
            break running;
        }
        assert!(
            Instant::now() < deadline,
            "no running request in pdgate's gauges within 60 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let a = stream.await.unwrap();
    assert_eq!(a.status, 200, "{}", a.text);
    assert_eq!(streamed_tokens(&a.sse()), 200);
    assert_eq!(
        Some(a.served()[2]),
        seen,
        "the gauge rose on the serving endpoint"
    );
    let endpoint = seen.unwrap();
    wait_for(
        Duration::from_secs(10),
        "the running gauge back to 0",
        || {
            let u = url.to_string();
            async move {
                let m = support::metrics(&u).await;
                endpoint_gauge(&m, "pdgate_endpoint_requests_running", endpoint) == Some(0.0)
            }
        },
    )
    .await;
}

/// A split request through pdgate: the prefill engine computes the prompt, the decode engine
/// receives it over NIXL (`external_kv_transfer` rises by the prompt's tokens, 64 KiB per
/// block moved) and computes nothing; its `cached_tokens` is 0 (vLLM 0.32 does not count
/// transferred KV as cached). Non-streamed, then streamed.
async fn nixl_split(url: &str, prefill: &VllmServer, decode: &VllmServer) {
    for (seed, stream) in [(2, false), (3, true)] {
        let p0 = prefill.metrics().await;
        let d0 = decode.metrics().await;
        let mut b = completion(&text(seed, 300), 4);
        if stream {
            b = streamed(b);
        }
        let a = post(url, "/v1/completions", &[], &b).await;
        assert_eq!(a.status, 200, "{}", a.text);
        assert_eq!(a.served(), ["split", "vllm-0", "vllm-1"]);
        let body = if stream {
            let events = a.sse();
            assert_eq!(streamed_tokens(&events), 4);
            events.last().unwrap().clone()
        } else {
            a.json()
        };
        let (tokens, cached) = usage(&body);
        assert_eq!(cached, 0, "vLLM 0.32: transferred KV is not cached_tokens");
        assert_eq!(body["usage"]["completion_tokens"], 4);

        let (p1, d1) = (prefill.metrics().await, decode.metrics().await);
        let by =
            |t: &str, src| counter(t, "vllm:prompt_tokens_by_source_total", &[("source", src)]);
        let delta = |a: &str, b: &str, src| by(b, src) - by(a, src);
        assert_eq!(
            delta(&p0, &p1, "local_compute"),
            tokens as f64,
            "prefill computed"
        );
        assert_eq!(
            delta(&d0, &d1, "external_kv_transfer"),
            tokens as f64,
            "decode received"
        );
        assert_eq!(
            delta(&d0, &d1, "local_compute"),
            0.0,
            "decode computed no prompt"
        );
        let bytes = |t: &str| counter(t, "vllm:nixl_bytes_transferred_sum", &[]);
        assert_eq!(
            bytes(&d1) - bytes(&d0),
            (tokens.div_ceil(BLOCK_SIZE) * 65_536) as f64,
            "64 KiB per block moved"
        );
    }
}

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
