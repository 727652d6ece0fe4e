//! `pdgate bench --engine-metrics` against in-process simulator workers on 127.0.0.1:0: the
//! engine-counter share it reports equals the simulator's own counters, and on one engine fed
//! one request at a time it equals the offline infinite-cache ceiling exactly (same tokenizer,
//! same hit rule).

use clap::Parser;
use pdgate_bench::cli::execute;
use pdgate_bench::BenchArgs;
use pdgate_sim::{spawn_fleet, SimConfig, WorkerHandle, WorkerSpec};

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: BenchArgs,
}

fn args(argv: &[String]) -> BenchArgs {
    Cli::try_parse_from(std::iter::once("bench".to_string()).chain(argv.iter().cloned()))
        .unwrap()
        .args
}

async fn fleet(n: usize) -> Vec<WorkerHandle> {
    let specs = (0..n)
        .map(|i| WorkerSpec::new(format!("w{i}"), "prefill-decode"))
        .collect();
    let cfg = SimConfig {
        speedup: 100.0,
        num_gpu_blocks: 4_096,
        ..SimConfig::default()
    };
    spawn_fleet(specs, cfg, "127.0.0.1", 0).await.unwrap()
}

/// Σ (cached, prompt) tokens in `usage` per worker, the simulator's own tally.
fn usage(workers: &[WorkerHandle]) -> Vec<(u64, u64)> {
    workers
        .iter()
        .map(|w| {
            let s = w.stats();
            (s.cached_tokens, s.prompt_tokens)
        })
        .collect()
}

/// 24 chat turns (shared system prompts), 2 output tokens each, no pacing.
fn bench_flags(workers: &[WorkerHandle], concurrency: usize) -> Vec<String> {
    let mut argv: Vec<String> = [
        "--workload",
        "chat",
        "--limit",
        "24",
        "--speedup",
        "0",
        "--max-output-tokens",
        "2",
        "--model",
        "pdgate-sim",
        "--quiet",
    ]
    .map(String::from)
    .to_vec();
    argv.extend(["--concurrency".into(), concurrency.to_string()]);
    for (i, w) in workers.iter().enumerate() {
        argv.extend(["--url".into(), w.url()]);
        // Base URL for one, full /metrics URL for the other: both forms are accepted.
        let metrics = if i == 0 {
            w.url()
        } else {
            format!("{}/metrics", w.url())
        };
        argv.extend(["--engine-metrics".into(), metrics]);
    }
    argv
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn engine_counter_share_equals_the_simulators_own_counters() {
    let workers = fleet(2).await;
    // Warm worker 0 before the run so its counters do not start at zero: the report must
    // show the run's deltas only.
    let warm = serde_json::json!({"model": "pdgate-sim", "prompt": (0..64).collect::<Vec<u32>>(),
        "max_tokens": 1});
    let client = reqwest::Client::new();
    for _ in 0..2 {
        let r = client
            .post(format!("{}/v1/completions", workers[0].url()))
            .json(&warm)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        r.bytes().await.unwrap();
    }
    let before = usage(&workers);
    assert!(before[0].0 > 0, "warm-up produced no hit: {before:?}");

    let report = execute(&args(&bench_flags(&workers, 4))).await.unwrap();
    assert_eq!((report.requests, report.ok), (24, 24));
    let after = usage(&workers);
    let fleet = report.engine_cache.as_ref().expect("engine counters read");
    assert_eq!(fleet.engines.len(), 2);
    assert_eq!((fleet.restarted, fleet.unreadable), (0, 0));
    let mut want = (0, 0);
    for (i, e) in fleet.engines.iter().enumerate() {
        let d = e.delta.expect("engine read after the run");
        let sim = (after[i].0 - before[i].0, after[i].1 - before[i].1);
        assert_eq!(
            (d.hit_tokens, d.query_tokens),
            sim,
            "engine {i} ({})",
            e.url
        );
        assert!(!d.restarted);
        assert!(sim.1 > 0, "engine {i} got no request");
        want = (want.0 + sim.0, want.1 + sim.1);
    }
    assert_eq!(
        fleet.engines[0].url,
        format!("{}/metrics", workers[0].url())
    );
    assert_eq!((fleet.hit_tokens, fleet.query_tokens), want);
    assert!(
        want.0 > 0,
        "the chat workload shares system prompts: some hits expected"
    );
    // With no P/D split, usage and the counters agree on the run's prompts too.
    assert_eq!((report.cached_tokens, report.prompt_tokens), want);

    // The printed table carries the fleet line and one line per engine.
    let table = report.render_table();
    let line = |prefix: &str| {
        table
            .lines()
            .find(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("no `{prefix}` line in\n{table}"))
            .to_string()
    };
    assert_eq!(
        line("engine cache share")
            .split_whitespace()
            .skip(3)
            .map(String::from)
            .collect::<Vec<_>>(),
        [
            format!("{:.3}", want.0 as f64 / want.1 as f64),
            format!("({}/{}", want.0, want.1),
            "tokens,".to_string(),
            "2".to_string(),
            "engines)".to_string()
        ]
    );
    let w1 = line(&format!("engine cache {}/metrics", workers[1].url()));
    let (h1, q1) = (after[1].0 - before[1].0, after[1].1 - before[1].1);
    assert!(w1.ends_with(&format!("({h1}/{q1})")), "{w1}");
    // The ceiling took the simulators' geometry: 16-token blocks, 2 × 4,096 blocks.
    let c = report
        .ceiling
        .as_ref()
        .expect("ceiling from vllm:cache_config_info");
    assert_eq!((c.block_size, c.capacity_blocks), (16, 8_192));
    assert_eq!(c.infinite.query_tokens, want.1);
    assert!(c.infinite.hit_tokens >= want.0, "{c:?} vs {want:?}");
    for w in workers {
        w.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_engine_one_request_at_a_time_reaches_the_infinite_ceiling() {
    let workers = fleet(1).await;
    let report = execute(&args(&bench_flags(&workers, 1))).await.unwrap();
    assert_eq!(report.ok, 24);
    let fleet = report.engine_cache.as_ref().unwrap();
    let c = report.ceiling.as_ref().unwrap();
    // Nothing evicted (4,096 blocks hold the whole workload) and every prompt finished before
    // the next arrived: the engine hits exactly what the offline model says.
    assert_eq!(c.lru, c.infinite);
    assert_eq!(
        (fleet.hit_tokens, fleet.query_tokens),
        (c.infinite.hit_tokens, c.infinite.query_tokens)
    );
    assert!(fleet.hit_tokens > 0);
    assert_eq!(fleet.max_over_fair, 1.0);
    for w in workers {
        w.shutdown().await;
    }
}
