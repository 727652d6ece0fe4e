//! Throughput: 6 workers in one process at speedup 1000 push ~500 requests of ~7,000-token
//! prompts and 400 output tokens (streamed) through in well under a minute.

mod common;

use common::*;
use futures_util::StreamExt;
use pdgate_sim::{spawn_fleet, WorkerSpec};
use serde_json::json;
use std::time::{Duration, Instant};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn six_workers_serve_500_long_requests_quickly() {
    let specs = (0..6)
        .map(|i| WorkerSpec::new(format!("agg-{i}"), "prefill-decode"))
        .collect();
    let fleet = spawn_fleet(specs, fast(), "127.0.0.1", 0).await.unwrap();
    let urls: Vec<String> = fleet.iter().map(|w| w.url()).collect();
    let client = reqwest::Client::new();
    let start = Instant::now();
    let results = futures_util::stream::iter(0..500u32)
        .map(|i| {
            let (client, url) = (client.clone(), urls[i as usize % urls.len()].clone());
            async move {
                // 20 shared 6,000-token prefixes, each request with its own 1,000-token tail.
                let mut prompt = tokens((i % 20) * 10_000, 6000);
                prompt.extend(tokens(1_000_000 + i * 1000, 1000));
                let mut resp = client
                    .post(format!("{url}/v1/completions"))
                    .json(&json!({"model": "pdgate-sim", "prompt": prompt, "max_tokens": 400, "stream": true,
                                  "stream_options": {"include_usage": true}}))
                    .send()
                    .await
                    .unwrap();
                assert_eq!(resp.status(), 200);
                let mut body = Vec::new();
                while let Some(c) = resp.chunk().await.unwrap() {
                    body.extend_from_slice(&c);
                }
                let (events, done) = sse_events(std::str::from_utf8(&body).unwrap());
                assert!(done);
                assert_eq!(events.len(), 401);
                events[400]["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64().unwrap()
            }
        })
        .buffer_unordered(500)
        .collect::<Vec<u64>>()
        .await;
    let took = start.elapsed();
    let cached: u64 = results.iter().sum();
    let served: u64 = fleet.iter().map(|w| w.stats().completions).sum();
    assert_eq!(served, 500);
    assert!(cached > 0, "shared prefixes were hit");
    assert!(took < Duration::from_secs(30), "took {took:?}");
    eprintln!(
        "500 requests in {took:?}, cached ratio {:.3}",
        cached as f64 / (500.0 * 7000.0)
    );
    for w in &fleet {
        let s = w.stats();
        assert_eq!(
            (s.running, s.waiting, s.kv_blocks_used),
            (0, 0, 0),
            "{}: {s:?}",
            w.name()
        );
    }
}
