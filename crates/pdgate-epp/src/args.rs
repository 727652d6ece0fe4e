//! `pdgate epp` flags (llm-d's EPP names: `--grpc-port`, `--grpc-health-port`,
//! `--metrics-port`, `--pool-name`, `--pool-namespace`, `--pool-group`, `--config-file`) and
//! running it until SIGTERM.

use crate::service;
use crate::state::{Epp, EppOptions};
use anyhow::Context;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// Default ext_proc port (llm-d's EPP).
pub const DEFAULT_GRPC_PORT: u16 = 9002;
/// Default gRPC health port (llm-d's EPP).
pub const DEFAULT_GRPC_HEALTH_PORT: u16 = 9003;
/// Default Prometheus port (llm-d's EPP).
pub const DEFAULT_METRICS_PORT: u16 = 9090;

/// Flags of `pdgate epp`.
#[derive(Debug, Clone, clap::Args)]
pub struct EppArgs {
    /// Address the gRPC and metrics servers listen on.
    #[arg(long, default_value = "0.0.0.0")]
    pub host: String,
    /// Port of the ext_proc gRPC service (0 picks a free one).
    #[arg(long, default_value_t = DEFAULT_GRPC_PORT)]
    pub grpc_port: u16,
    /// Port of the gRPC health services (`liveness`, `readiness`, the ext_proc service).
    #[arg(long, default_value_t = DEFAULT_GRPC_HEALTH_PORT)]
    pub grpc_health_port: u16,
    /// Port of `/metrics` (Prometheus text).
    #[arg(long, default_value_t = DEFAULT_METRICS_PORT)]
    pub metrics_port: u16,
    /// EndpointPickerConfig YAML (llm-d format); without it, the built-in default.
    #[arg(long, alias = "config")]
    pub config_file: Option<PathBuf>,
    /// TLS on the ext_proc port (llm-d's EPP default is true, with a self-signed
    /// certificate). pdgate serves plaintext gRPC: pass `--secure-serving=false` and configure
    /// the Gateway's backend for plaintext (the deploy/ manifests do).
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1,
          default_missing_value = "true")]
    pub secure_serving: bool,
    /// Where endpoints come from.
    #[command(flatten)]
    pub discovery: pdgate_fleet::args::DiscoveryArgs,
    /// Request body limit, bytes.
    #[arg(long, default_value_t = pdgate_core::defaults::DEFAULT_MAX_BODY_BYTES)]
    pub max_body_bytes: usize,
    /// What a data plane may hold: `serve`'s client-limit flags and the stream limits
    /// ([`crate::limits`]).
    #[command(flatten)]
    pub limits: crate::limits::EppLimitsArgs,
    /// Engine /metrics scrape interval, ms (at least 1).
    #[arg(long, default_value_t = pdgate_core::defaults::DEFAULT_SCRAPE_INTERVAL_MS,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub scrape_interval_ms: u64,
    /// Time allowed for one engine /metrics scrape (head and body), ms.
    #[arg(long, default_value_t = pdgate_core::defaults::DEFAULT_SCRAPE_TIMEOUT_MS,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub scrape_timeout_ms: u64,
    /// An InferenceObjective and its priority, `NAME=PRIORITY` (repeatable), as `serve`'s
    /// flag: the priority flow control gives a request whose objective header names it.
    #[arg(long = "inference-objective", value_name = "NAME=PRIORITY")]
    pub inference_objectives: Vec<String>,
    /// Whom the flow identity headers (objective, fairness id, TTFT objective) are honoured
    /// from: `trusted` (default) — nobody, the EPP has no trusted callers: they are ignored
    /// and counted, every request gets priority 0 in the default flow; `any` — every request
    /// (llm-d's behaviour: the Gateway's HTTPRoute sets or overwrites these headers).
    #[arg(long, value_enum, default_value_t = pdgate_core::flow_key::FlowHeadersFrom::Trusted)]
    pub flow_headers_from: pdgate_core::flow_key::FlowHeadersFrom,
    /// On SIGTERM or SIGINT: how long streams in progress may take to finish, ms (readiness
    /// turns NOT_SERVING at once; no new stream is accepted).
    #[arg(long, default_value_t = pdgate_core::defaults::DEFAULT_SHUTDOWN_GRACE_MS)]
    pub shutdown_grace_ms: u64,
}

async fn bind(host: &str, port: u16) -> anyhow::Result<tokio::net::TcpListener> {
    let addr: SocketAddr = tokio::net::lookup_host((host, port))
        .await
        .with_context(|| format!("resolving {host}"))?
        .next()
        .with_context(|| format!("{host} resolves to no address"))?;
    tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding {addr}"))
}

/// Runs `pdgate epp` until SIGTERM/SIGINT, then drains: readiness NOT_SERVING, no new
/// streams, streams in progress get up to `--shutdown-grace-ms`.
///
/// Errors: a bad config or discovery flag, a port that cannot be bound, TLS asked for.
pub async fn run(args: EppArgs) -> anyhow::Result<()> {
    if args.secure_serving {
        anyhow::bail!(
            "--secure-serving: pdgate epp serves plaintext gRPC only; pass \
             --secure-serving=false and point the Gateway at it without TLS"
        );
    }
    let scheduler =
        pdgate_core::startup::load_scheduler(args.config_file.as_ref(), "--config-file")?;
    let endpoints = args
        .discovery
        .source()?
        .ok_or_else(|| anyhow::anyhow!(pdgate_fleet::args::NO_ENDPOINTS))?;
    let mut opts = EppOptions::new(Arc::new(scheduler), endpoints);
    opts.max_body_bytes = args.max_body_bytes;
    // As `serve`: the soft descriptor limit raised to the hard one, before the connection
    // limit's default is derived from it.
    let nofile = pdgate_core::client_limits::raise_nofile_limit();
    opts.limits = args.limits.limits();
    tracing::info!(
        nofile,
        max_client_connections = opts.limits.client.max_connections,
        max_ext_proc_streams = opts.limits.max_streams,
        "client limits"
    );
    opts.scrape_interval = Duration::from_millis(args.scrape_interval_ms);
    opts.scrape_timeout = Duration::from_millis(args.scrape_timeout_ms);
    opts.flow_headers_from = args.flow_headers_from;
    opts.objectives = pdgate_core::flow_control::Objectives::parse(&args.inference_objectives)
        .map_err(|e| anyhow::anyhow!(e))?;
    let grpc = bind(&args.host, args.grpc_port).await?;
    let health = bind(&args.host, args.grpc_health_port).await?;
    let metrics = bind(&args.host, args.metrics_port).await?;
    let (epp, _tasks) = Epp::start(opts).await?;
    let addrs = (
        grpc.local_addr()?,
        health.local_addr()?,
        metrics.local_addr()?,
    );
    eprintln!(
        "pdgate epp listening: ext_proc {}, health {}, metrics http://{}/metrics",
        addrs.0, addrs.1, addrs.2
    );
    tracing::info!(ext_proc = %addrs.0, health = %addrs.1, metrics = %addrs.2, "pdgate epp listening");
    let health_task = tokio::spawn(service::serve_health(epp.clone(), health));
    let metrics_task = tokio::spawn(service::serve_metrics(epp.clone(), metrics));
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let mut server = tokio::spawn(service::serve_ext_proc(epp.clone(), grpc, async {
        let _ = stop_rx.await;
    }));
    let result = tokio::select! {
        r = &mut server => return finish(r, health_task, metrics_task),
        s = pdgate_core::startup::shutdown_signal() => s,
    };
    result.context("waiting for SIGTERM")?;
    // Draining: readiness NOT_SERVING at once; the server stops accepting (HTTP/2 GOAWAY on
    // Envoy's connection) and waits for the streams in progress, up to the grace.
    epp.drain();
    let grace = Duration::from_millis(args.shutdown_grace_ms);
    tracing::info!(
        in_flight = epp.registry.in_flight_total(),
        ?grace,
        "pdgate epp draining"
    );
    let _ = stop_tx.send(());
    match tokio::time::timeout(grace, &mut server).await {
        Ok(r) => finish(r, health_task, metrics_task),
        Err(_) => {
            tracing::warn!(
                in_flight = epp.registry.in_flight_total(),
                ?grace,
                "grace period over; streams cut"
            );
            server.abort();
            finish(Ok(Ok(())), health_task, metrics_task)
        }
    }
}

type Served = Result<Result<(), tonic::transport::Error>, tokio::task::JoinError>;

/// Stops the side servers and reports how the ext_proc server ended.
fn finish(
    served: Served,
    health: tokio::task::JoinHandle<Result<(), tonic::transport::Error>>,
    metrics: tokio::task::JoinHandle<()>,
) -> anyhow::Result<()> {
    health.abort();
    metrics.abort();
    tracing::info!("pdgate epp stopped");
    served
        .context("ext_proc server task")?
        .context("ext_proc server")
}
