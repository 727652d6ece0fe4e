//! `pdgate demo`: a simulated 2-prefill + 4-decode fleet in-process, the built-in multi-turn
//! chat workload replayed once through the prefix-aware default config and once through
//! round-robin (each on a fresh fleet, so caches start cold alike), reports side by side.

use crate::fleet::{self, FleetSpec};
use pdgate_bench::{
    chat_workload, render_side_by_side, replay, ChatWorkloadConfig, ReplayConfig, Report,
};
use pdgate_scheduler::{DEFAULT_CONFIG_YAML, ROUND_ROBIN_CONFIG_YAML};

/// Flags of `pdgate demo`.
#[derive(Debug, Clone, clap::Args)]
pub struct DemoArgs {
    /// Prefill workers.
    #[arg(long, default_value_t = 2)]
    pub prefill: usize,
    /// Decode workers.
    #[arg(long, default_value_t = 4)]
    pub decode: usize,
    /// Simulator speedup (divides every simulated duration) and replay speedup.
    #[arg(long, default_value_t = 2.0)]
    pub speedup: f64,
    /// KV cache capacity of each simulated worker, in 16-token blocks.
    #[arg(long, default_value_t = 2048)]
    pub num_gpu_blocks: usize,
    /// Distinct shared system prompts in the chat workload.
    #[arg(long, default_value_t = 16)]
    pub system_prompts: usize,
    /// Conversations in the chat workload.
    #[arg(long, default_value_t = 48)]
    pub conversations: usize,
    /// Turns per conversation.
    #[arg(long, default_value_t = 6)]
    pub turns: usize,
    /// Write both reports as JSON to this file.
    #[arg(long)]
    pub json: Option<std::path::PathBuf>,
    /// No progress bars.
    #[arg(long)]
    pub quiet: bool,
    /// Run the revision-rollout scenario instead: revisions a and b (2 prefill + 6 decode
    /// simulators each, speedup 50) behind a prefill and a decode router that read one
    /// endpoints file, rewritten step by step (or watch pods: `--discovery kubernetes`),
    /// behind a coordinator with conditional decode;
    /// prints the per-step table and the checks, and fails when a check fails. The flags
    /// above do not apply to it.
    #[arg(long)]
    pub rollout: bool,
    /// Rollout: where the routers get their endpoints — `file` (one endpoints file,
    /// rewritten at each step) or `kubernetes` (an InferencePool and its pods in a stand-in
    /// Kubernetes API server, watched through kube-rs; each step is a set of pod updates).
    #[arg(long, value_enum, default_value_t = crate::rollout::Discovery::File, requires = "rollout")]
    pub discovery: crate::rollout::Discovery,
    /// Rollout: requests per step (at least; steps with a mixed expected share get enough for
    /// the ±5-point share check to be a 4σ bound).
    #[arg(long, default_value_t = 250)]
    pub requests_per_step: usize,
}

async fn one_run(args: &DemoArgs, name: &str, config: &str) -> anyhow::Result<Report> {
    let mut spec = FleetSpec::new(args.prefill, args.decode, args.speedup);
    spec.sim.num_gpu_blocks = args.num_gpu_blocks;
    let fleet = fleet::start(&spec, config).await?;
    let work = chat_workload(&ChatWorkloadConfig {
        conversations: args.conversations,
        turns: args.turns,
        system_prompts: args.system_prompts,
        ..ChatWorkloadConfig::default()
    });
    eprintln!(
        "demo: {name}: {} requests against {}",
        work.len(),
        fleet.url()
    );
    let mut cfg = ReplayConfig::new(fleet.url(), pdgate_sim::config::DEFAULT_MODEL);
    cfg.speedup = args.speedup;
    cfg.progress = !args.quiet;
    replay(&cfg, work).await
}

/// Runs the demo and prints the side-by-side report.
pub async fn run(args: DemoArgs) -> anyhow::Result<()> {
    if args.rollout {
        return crate::rollout::demo(args.requests_per_step, args.discovery).await;
    }
    let aware = one_run(&args, "prefix-aware (default config)", DEFAULT_CONFIG_YAML).await?;
    let rr = one_run(&args, "round-robin", ROUND_ROBIN_CONFIG_YAML).await?;
    println!(
        "pdgate demo: {} prefill + {} decode simulated workers, built-in multi-turn chat workload, speedup {}\n",
        args.prefill, args.decode, args.speedup
    );
    println!(
        "{}",
        render_side_by_side(&[("prefix-aware", &aware), ("round-robin", &rr)])
    );
    let ratio = if rr.cached_token_ratio > 0.0 {
        aware.cached_token_ratio / rr.cached_token_ratio
    } else {
        f64::INFINITY
    };
    println!("cached-token ratio, prefix-aware / round-robin: {ratio:.2}x");
    if let Some(path) = &args.json {
        let both = serde_json::json!({"prefix_aware": aware, "round_robin": rr});
        std::fs::write(path, serde_json::to_vec_pretty(&both)?)?;
    }
    Ok(())
}
