//! pdgate-sim: a vLLM-compatible engine simulator (design.md §6), many workers per process.
//!
//! Each worker is one engine behind an HTTP server: OpenAI `/v1/completions` and
//! `/v1/chat/completions`, Anthropic `/v1/messages`, `/v1/responses`, `/v1/embeddings` and
//! `/inference/v1/generate` in vLLM 0.32's wire shapes (stream and not), `/tokenize`,
//! `/detokenize`, `/v1/models`, `/health`, `/metrics` under vLLM's names, a response recorder
//! (`--record-responses`, `GET /debug/responses/{request_id}`), a prefix cache with refcounts
//! and LRU eviction, a continuous-batching step loop priced by the Dynamo mocker cost model, and the vLLM NIXL P/D handshake over a real HTTP side
//! channel (`/kv/pull`) that refuses unknown engines, expired or consumed leases, and engines of
//! another revision. Encode workers (`--role encode`, encoder disaggregation as vLLM's EPD) encode
//! the media of chat requests and hand the output to prefills over `/ec/pull`. With vLLM's
//! shared-storage connectors (`--kv-transfer-config` ExampleConnector, `--ec-transfer-config`
//! ECExampleConnector; [`storage`], [`transfer_config`]) KV and encoder output go through a
//! directory instead. See README.md for flags, the handoff protocols and the fleet file.
//!
//! - [`run`]: what `pdgate sim` runs (starts the fleet, serves until ctrl-c).
//! - [`spawn_worker`] / [`spawn_fleet`]: in-process workers for tests and the demo.

mod cli;
pub mod config;
pub mod cost;
pub mod ec_handoff;
mod engine;
pub mod fleet;
pub mod handoff;
mod http;
pub mod kube_api;
pub mod kv_events;
mod metrics;
pub mod pull;
mod stats;
pub mod storage;
pub mod tokenizer;
pub mod transfer_config;
mod worker;

pub use cli::SimArgs;
pub use config::{SimConfig, WorkerSpec};
pub use fleet::PlannedWorker;
pub use stats::WorkerStats;
pub use worker::{spawn_fleet, spawn_pod_fleet, spawn_worker, WorkerHandle};

/// Starts the fleet described by `args` and serves until ctrl-c.
pub async fn run(args: SimArgs) -> anyhow::Result<()> {
    let cfg = args.config();
    cfg.validate()?;
    let plan = args.plan()?;
    let mut handles = Vec::with_capacity(plan.len());
    for (i, w) in plan.into_iter().enumerate() {
        let listener = worker::bind(&args.host, w.port).await?;
        let h = spawn_worker(w.spec, cfg.for_worker(i)?, listener).await?;
        println!(
            "sim worker {} role={} revision={} engine={} listening on {}",
            h.name(),
            h.role(),
            h.revision().unwrap_or("-"),
            h.engine_id(),
            h.url()
        );
        if let Some(p) = h.kv_event_ports() {
            println!(
                "sim worker {} publishes KV events on port {}{}",
                h.name(),
                p.publish,
                p.replay
                    .map(|r| format!(" (replay {r})"))
                    .unwrap_or_default()
            );
        }
        handles.push(h);
    }
    if let Some(dir) = cfg.kv_shared_storage() {
        println!(
            "sim KV connector ExampleConnector: shared storage {}",
            dir.display()
        );
    }
    if let Some(ec) = &cfg.ec_transfer {
        println!(
            "sim EC connector {}: shared storage {}",
            ec.ec_connector,
            ec.shared_storage_path.display()
        );
    }
    tracing::info!(workers = handles.len(), model = %cfg.model, speedup = cfg.speedup, "simulator ready");
    tokio::signal::ctrl_c().await?;
    tracing::info!("ctrl-c: stopping the simulator");
    for h in handles {
        h.shutdown().await;
    }
    Ok(())
}
