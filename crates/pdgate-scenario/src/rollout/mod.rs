//! A revision rollout through per-role routers (layout (b), design.md §4 and §5.1), used by
//! `pdgate demo --rollout` and the end-to-end test `e2e_rollout`.
//!
//! In-process on 127.0.0.1: 16 simulators — revisions `a` and `b`, each 2 prefill + 6 decode,
//! labeled `llm-d.ai/role`, `disaggregatedset.x-k8s.io/{role,revision,name=demo}` — behind a
//! prefill router and a decode router (the built-in P/D config plus a
//! `disaggregatedset-rollout-screener`, max-role, required roles prefill and decode, scoped to
//! the `demo` set), both reading one endpoints file (polled every 100 ms) — or, with
//! [`Discovery::Kubernetes`], watching the set's `InferencePool` and pods in a stand-in
//! Kubernetes API server ([`kube`]) — behind a coordinator with conditional decode on.
//!
//! For each step ([`plan::DEFAULT_STEPS`]) the scenario publishes the step's endpoint list
//! ([`plan::listings`]: B's pods become Ready one by one, A's leave through `ready: false`,
//! `terminating: true` and removal) — it rewrites the file, or makes the pod updates
//! ([`publish`]) — waits until both routers hold it (measuring how long that took), then
//! sends the step's requests with bounded concurrency. Meanwhile a trickle of long requests keeps
//! requests in flight across every change. [`checks::evaluate`] turns what was seen into the
//! per-step table and the acceptance checks (see [`checks`] for the attribution rule).

pub mod checks;
pub mod kube;
pub mod plan;
pub mod prompts;
pub mod publish;
pub mod report;
pub mod scenario;

pub use plan::{max_role_shares, Counts, DEFAULT_STEPS};
pub use publish::Discovery;
pub use report::{Check, RolloutReport, StepRow};

use std::time::Duration;

/// How to run the rollout.
#[derive(Debug, Clone)]
pub struct RolloutConfig {
    /// Where the routers get their endpoints: the file (default) or Kubernetes pods.
    pub discovery: Discovery,
    /// Ready counts per step.
    pub steps: Vec<Counts>,
    /// Requests per step, at least; a step with a mixed expected share gets as many as the
    /// share check needs to be a 4σ bound ([`plan::requests_for`]).
    pub requests_per_step: usize,
    /// Step requests in flight at once.
    pub concurrency: usize,
    /// `max_tokens` of a step request.
    pub max_tokens: u32,
    /// Trickle loops (each one long request at a time).
    pub trickle_loops: usize,
    /// `max_tokens` of a trickle request (long enough to span step changes).
    pub trickle_max_tokens: u32,
    /// Pause between two trickle requests of one loop.
    pub trickle_gap: Duration,
    /// Shortest time a step lasts (from its publication to the next), so that the trickle
    /// also starts requests in short steps such as the uncovered one.
    pub min_step: Duration,
    /// Simulator speedup.
    pub speedup: f64,
    /// How often the routers check the endpoints file (file discovery).
    pub poll: Duration,
    /// Longest wait for both routers to hold a step's list.
    pub apply_timeout: Duration,
    /// Tolerance of the share check, as a fraction (0.05 = ±5 points).
    pub share_tolerance: f64,
    /// Fewest requests in total.
    pub min_requests: usize,
    /// Seed of the prompt generators.
    pub seed: u64,
}

impl Default for RolloutConfig {
    /// File discovery, the default steps, 250 requests per step (more where the share check needs them),
    /// concurrency 16, 4 output tokens, 2 trickle loops of 1,024-token requests 10 ms apart,
    /// steps of at least 400 ms, speedup 50, 100 ms polls, 1 s apply timeout, ±5 points,
    /// ≥ 2,000 requests.
    fn default() -> Self {
        RolloutConfig {
            discovery: Discovery::File,
            steps: DEFAULT_STEPS.to_vec(),
            requests_per_step: 250,
            concurrency: 16,
            max_tokens: 4,
            trickle_loops: 2,
            trickle_max_tokens: 1_024,
            trickle_gap: Duration::from_millis(10),
            min_step: Duration::from_millis(400),
            speedup: 50.0,
            poll: Duration::from_millis(100),
            apply_timeout: Duration::from_secs(1),
            share_tolerance: 0.05,
            min_requests: 2_000,
            seed: 0x5eed_0001,
        }
    }
}

/// Runs the rollout (the endpoints file in a fresh temporary directory, removed afterwards,
/// or the stand-in API server, stopped afterwards) and evaluates it.
///
/// Errors: the fleet, the API server or a router cannot start, the file cannot be written,
/// or the HTTP client fails to build. Failed requests are not errors: the checks judge them.
pub async fn run(cfg: &RolloutConfig) -> anyhow::Result<RolloutReport> {
    let dir = scenario::temp_dir()?;
    let observed = scenario::observe(cfg, &dir).await;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(checks::evaluate(
        observed?,
        cfg.share_tolerance,
        cfg.min_requests,
    ))
}

/// `pdgate demo --rollout [--discovery kubernetes]`: runs the rollout, prints the table and
/// the checks; fails when a check failed.
///
/// Errors: those of [`run`], and one naming the failed checks.
pub async fn demo(requests_per_step: usize, discovery: Discovery) -> anyhow::Result<()> {
    let cfg = RolloutConfig {
        requests_per_step,
        discovery,
        ..RolloutConfig::default()
    };
    let source = match discovery {
        Discovery::File => "one endpoints file".to_string(),
        Discovery::Kubernetes => format!(
            "InferencePool {}/{} and its pods, watched in a stand-in Kubernetes API server",
            kube::NAMESPACE,
            plan::SET_NAME
        ),
    };
    eprintln!(
        "demo: rollout of set `{}` from revision a to b, {} steps, layout (b): coordinator \
         (conditional decode) → prefill router + decode router ({source}) → 16 simulators",
        plan::SET_NAME,
        cfg.steps.len()
    );
    let report = run(&cfg).await?;
    println!(
        "pdgate demo --rollout --discovery {}: 2 prefill + 6 decode workers per revision, max-role revision gating, speedup {}\n",
        match discovery {
            Discovery::File => "file",
            Discovery::Kubernetes => "kubernetes",
        },
        cfg.speedup
    );
    print!("{}", report.render());
    let failed = report.failed();
    anyhow::ensure!(
        failed.is_empty(),
        "{} rollout check(s) failed: {}",
        failed.len(),
        failed
            .iter()
            .map(|c| c.name.as_str())
            .collect::<Vec<_>>()
            .join("; ")
    );
    Ok(())
}
