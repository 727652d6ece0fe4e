//! The real `pdgate serve` binary in front of two real vLLM 0.32 CPU servers (a tiny local
//! model; `support::real_vllm`): aggregated routing of completions and chat, streamed and not;
//! the engines' real `/metrics` read by pdgate; a prompt repeated through pdgate served from
//! the engine's prefix cache; a prefill→decode split over NIXL, proven by the engines'
//! counters; the same split for Anthropic messages (streamed), responses and token-id
//! generate, and tokenize/detokenize routed to an engine. The KV-event checks (precise prefix routing) are in `e2e_real_vllm_kv.rs`.
//!
//! The install (`tools/real-vllm/install.sh`) runs from the test, cached outside the repo; a
//! failed install fails the test. `PDGATE_SKIP_REAL_VLLM=1` skips it with a loud banner (for
//! developers; CI never sets it). Needs ~6.5 GB of disk and ~9 GB of memory.

mod support;

use serde_json::{json, Value};
use std::time::{Duration, Instant};
use support::real_vllm::{self, series, Fleet, KvRole, ServerSpec, VllmServer, BLOCK_SIZE, MODEL};
use support::real_vllm_http::*;
use support::vllm::wait_for;

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
    other_apis_split(&split.url, &fleet.servers[0], &fleet.servers[1]).await;

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
///
/// pdgate's copy lags the engine by up to one scrape interval, so the step first waits until it
/// shows both engines idle: a request of the previous step still shown running (a CI run saw
/// the cache-hit repeat at 1 on vllm-0) would be read as this stream, and would also steer the
/// router to the other engine.
async fn running_gauge_follows_a_stream(url: &str) {
    wait_for(
        Duration::from_secs(30),
        "pdgate shows both engines idle before the stream",
        || {
            let u = url.to_string();
            async move {
                let m = support::metrics(&u).await;
                ["vllm-0", "vllm-1"]
                    .iter()
                    .all(|e| endpoint_gauge(&m, "pdgate_endpoint_requests_running", e) == Some(0.0))
            }
        },
    )
    .await;
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

/// Prompt tokens the engines computed and received: `(prefill local_compute, decode
/// external_kv_transfer, decode local_compute)` from their `/metrics`.
async fn prompt_sources(prefill: &VllmServer, decode: &VllmServer) -> (f64, f64, f64) {
    let by = |t: &str, src| counter(t, "vllm:prompt_tokens_by_source_total", &[("source", src)]);
    let (p, d) = (prefill.metrics().await, decode.metrics().await);
    (
        by(&p, "local_compute"),
        by(&d, "external_kv_transfer"),
        by(&d, "local_compute"),
    )
}

/// The APIs other than completions and chat through the splitting router against real vLLM:
/// `/tokenize` and `/detokenize` answered by an engine; token-id `/inference/v1/generate`,
/// a streamed Anthropic `/v1/messages` and `/v1/responses` split, each proven by the
/// engines' counters (the decode engine receives the prompt over NIXL and computes none of
/// it). vLLM reads generate's handoff from `sampling_params.extra_args`, where pdgate puts it.
async fn other_apis_split(url: &str, prefill: &VllmServer, decode: &VllmServer) {
    let prompt = text(5, 300);
    let t = post(
        url,
        "/tokenize",
        &[],
        &json!({"model": MODEL, "prompt": prompt}),
    )
    .await;
    assert_eq!(t.status, 200, "{}", t.text);
    assert_eq!(t.served()[0], "aggregated");
    let ids = t.json()["tokens"].clone();
    let n = ids.as_array().unwrap().len() as f64;
    assert!(n > 4.0 * BLOCK_SIZE as f64, "{n} tokens");
    let d = post(
        url,
        "/detokenize",
        &[],
        &json!({"model": MODEL, "tokens": ids}),
    )
    .await;
    assert_eq!(d.status, 200, "{}", d.text);
    assert!(
        d.json()["prompt"].as_str().unwrap().contains("s5w0"),
        "{}",
        d.text
    );

    let before = prompt_sources(prefill, decode).await;
    let gen = json!({"model": MODEL, "token_ids": ids,
        "sampling_params": {"max_tokens": 4, "temperature": 0, "ignore_eos": true}});
    let g = post(url, "/inference/v1/generate", &[], &gen).await;
    assert_eq!(g.status, 200, "{}", g.text);
    assert_eq!(g.served(), ["split", "vllm-0", "vllm-1"]);
    assert_eq!(
        g.json()["choices"][0]["token_ids"]
            .as_array()
            .unwrap()
            .len(),
        4
    );
    let after = prompt_sources(prefill, decode).await;
    assert_eq!(
        after.0 - before.0,
        n,
        "generate: prefill computed the prompt"
    );
    assert_eq!(
        after.1 - before.1,
        n,
        "generate: decode received it over NIXL"
    );
    assert_eq!(
        after.2 - before.2,
        0.0,
        "generate: decode computed none of it"
    );

    let msg = json!({"model": MODEL, "max_tokens": 4, "stream": true, "system": "Be brief.",
        "messages": [{"role": "user", "content": text(6, 300)}]});
    let before = prompt_sources(prefill, decode).await;
    let m = post(url, "/v1/messages", &[("x-request-id", "msg-real-1")], &msg).await;
    assert_eq!(m.status, 200, "{}", m.text);
    assert_eq!(m.served(), ["split", "vllm-0", "vllm-1"]);
    let names: Vec<&str> = m
        .text
        .split("\n\n")
        .filter_map(|e| e.lines().next()?.strip_prefix("event: "))
        .collect();
    assert_eq!(names.first(), Some(&"message_start"), "{}", m.text);
    assert_eq!(names.last(), Some(&"message_stop"), "{}", m.text);
    assert!(names.contains(&"content_block_delta"), "{}", m.text);
    assert!(!m.text.contains("[DONE]") && !m.text.contains("kv_transfer_params"));
    assert!(
        m.text.contains("\"id\":\"chatcmpl-msg-real-1\""),
        "{}",
        m.text
    );
    decode_received(before, prompt_sources(prefill, decode).await, "messages");

    let resp = json!({"model": MODEL, "max_output_tokens": 4, "input": text(7, 300)});
    let before = prompt_sources(prefill, decode).await;
    let r = post(url, "/v1/responses", &[], &resp).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.served(), ["split", "vllm-0", "vllm-1"]);
    assert_eq!(r.json()["object"], "response");
    assert!(
        r.json()
            .get("kv_transfer_params")
            .is_none_or(Value::is_null),
        "{}",
        r.text
    );
    decode_received(before, prompt_sources(prefill, decode).await, "responses");
}

/// Between two [`prompt_sources`] readings the decode engine received a prompt of more than
/// four blocks over NIXL and computed none of it.
fn decode_received(before: (f64, f64, f64), after: (f64, f64, f64), api: &str) {
    assert!(
        after.1 - before.1 > 4.0 * BLOCK_SIZE as f64,
        "{api}: decode received the prompt"
    );
    assert_eq!(after.2 - before.2, 0.0, "{api}: decode computed none of it");
}
