//! The acceptance replay: the router in front of a simulated 2P+4D fleet on loopback replays
//! the first 500 requests of the Mooncake conversation trace, once with the prefix-aware
//! default config and once with round-robin, each on a fresh fleet. Cache reuse is read from
//! the engines' counters (a split request's decode leg reports 0 `cached_tokens`, as vLLM 0.32).

use crate::support;

use pdgate_bench::{load_mooncake, mooncake_work, replay, ReplayConfig, Report};
use pdgate_scenario::fleet::{self, FleetSpec};
use pdgate_scheduler::{DEFAULT_CONFIG_YAML, ROUND_ROBIN_CONFIG_YAML};

const REQUESTS: usize = 500;
const SPEEDUP: f64 = 10.0;
const NUM_GPU_BLOCKS: usize = 262_144;

/// A replay's report and its cache reuse: the share of prompt tokens no engine computed,
/// `1 − Σ prompt_tokens_by_source{local_compute} / Σ prompt tokens` over the fleet (a split
/// request is computed once, by its prefill; its decode leg computes nothing).
async fn run(config: &str) -> (Report, f64) {
    let mut spec = FleetSpec::new(2, 4, SPEEDUP);
    // A KV pool of 4M tokens per worker (Mooncake-style DRAM pool), so that reuse in the
    // trace is limited by routing, not by eviction.
    spec.sim.num_gpu_blocks = NUM_GPU_BLOCKS;
    let fleet = fleet::start(&spec, config).await.unwrap();
    let records = load_mooncake(&support::conversation_trace(), Some(REQUESTS)).unwrap();
    let work = mooncake_work(&records, 512);
    let mut cfg = ReplayConfig::new(fleet.url(), pdgate_sim::config::DEFAULT_MODEL);
    cfg.speedup = SPEEDUP;
    cfg.concurrency = 128;
    cfg.progress = false;
    // Round-robin's cache hits depend on which prefill worker each turn of a conversation
    // lands on, i.e. on arrival order: replay in exact trace order so the comparison does not
    // hinge on timer races.
    cfg.ordered = true;
    let report = replay(&cfg, work).await.unwrap();
    // Every booking was released once the replay ended.
    for _ in 0..100 {
        if fleet.in_flight() == 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(fleet.in_flight(), 0);
    let computed: u64 = fleet
        .workers
        .iter()
        .map(|w| w.stats().prompt_tokens_local_compute)
        .sum();
    assert!(report.prompt_tokens > 0 && computed <= report.prompt_tokens);
    let reuse = 1.0 - computed as f64 / report.prompt_tokens as f64;
    (report, reuse)
}

fn check_served(report: &Report) {
    assert_eq!(report.requests, REQUESTS as u64);
    assert_eq!(report.ok, REQUESTS as u64, "errors: {:?}", report.errors);
    assert!(report.errors.is_empty(), "errors: {:?}", report.errors);
    for r in &report.records {
        let p = r.served.prefill_endpoint.as_deref().unwrap_or("");
        let d = r.served.decode_endpoint.as_deref().unwrap_or("");
        assert!(
            d.starts_with("decode-"),
            "request {} decode endpoint {d:?}",
            r.index
        );
        match r.served.pd_mode.as_deref() {
            Some("split") => assert!(
                p.starts_with("prefill-"),
                "request {} prefill {p:?}",
                r.index
            ),
            Some("aggregated") => assert_eq!(p, d, "request {}", r.index),
            other => panic!("request {} has pd mode {other:?}", r.index),
        }
    }
}

#[tokio::test(flavor = "current_thread")]
async fn mooncake_500_prefix_aware_beats_round_robin_on_engine_cache_reuse() {
    let (aware, aware_reuse) = run(DEFAULT_CONFIG_YAML).await;
    check_served(&aware);
    let (rr, rr_reuse) = run(ROUND_ROBIN_CONFIG_YAML).await;
    check_served(&rr);
    eprintln!(
        "engine cache reuse: prefix-aware {aware_reuse:.4} ({:?}), round-robin {rr_reuse:.4} ({:?})",
        aware.pd_modes, rr.pd_modes
    );
    eprintln!(
        "prefix-aware per endpoint: {:?}",
        aware.requests_by_endpoint
    );
    assert!(rr_reuse > 0.0);
    assert!(
        aware_reuse >= 1.5 * rr_reuse,
        "prefix-aware {aware_reuse:.4} < 1.5 x round-robin {rr_reuse:.4}"
    );
    // Load stays in the score: no decode endpoint takes more than half the traffic even
    // though every request starts with the same block.
    let max_decode = aware
        .requests_by_endpoint
        .iter()
        .filter(|(k, _)| k.starts_with("decode:"))
        .map(|(_, v)| *v)
        .max()
        .unwrap();
    assert!(
        max_decode <= REQUESTS as u64 / 2,
        "{:?}",
        aware.requests_by_endpoint
    );
}
