//! `pdgate serve` flags. Defaults come from the constants in [`crate::app`].

use crate::app::{
    start_state, PhaseRouters, ServeOptions, DEFAULT_MAX_BODY_BYTES, DEFAULT_SCRAPE_INTERVAL_MS,
    DEFAULT_SCRAPE_TIMEOUT_MS,
};
use anyhow::Context;
use pdgate_coordinator::header_rules::ForwardRules;
use pdgate_coordinator::{EcConnector, KvConnector};
use pdgate_fleet::endpoints_file::check_address;
use pdgate_fleet::EndpointSource;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// Flags of `pdgate serve`.
#[derive(Debug, Clone, clap::Args)]
pub struct ServeArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// Port to listen on.
    #[arg(long, default_value_t = 8080)]
    pub port: u16,
    /// EndpointPickerConfig YAML (llm-d format). Without it, the built-in default is used.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Print the effective config (defaults injected) and exit: the scheduler's, or with
    /// `--coordinator-config` the coordinator file's (as `pdgate check-config` prints it).
    #[arg(long)]
    pub print_config: bool,
    /// Where endpoints come from.
    #[command(flatten)]
    pub discovery: pdgate_fleet::args::DiscoveryArgs,
    /// Request body limit, bytes.
    #[arg(long, default_value_t = DEFAULT_MAX_BODY_BYTES)]
    pub max_body_bytes: usize,
    /// Engine /metrics scrape interval, ms (at least 1).
    #[arg(long, default_value_t = DEFAULT_SCRAPE_INTERVAL_MS,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub scrape_interval_ms: u64,
    /// Time allowed for one engine /metrics scrape (response head and body), ms; an engine
    /// slower than this is marked unknown for that tick.
    #[arg(long, default_value_t = DEFAULT_SCRAPE_TIMEOUT_MS,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub scrape_timeout_ms: u64,
    /// Upstream timeouts, retries, breakers, prefill-unavailable policy.
    #[command(flatten)]
    pub resilience: crate::config::resilience_args::ResilienceArgs,
    /// Callers trusted to send coordinator-to-router headers (`x-llm-d-epp-profile`, the
    /// forwarded revision header, the decision id, `Prefer: if-available`), by source
    /// address: CIDRs or addresses, comma-separated. Default: none.
    #[arg(long, value_delimiter = ',')]
    pub trusted_coordinator_networks: Vec<String>,
    /// A file holding a shared secret (at least 16 visible ASCII characters): a caller that
    /// presents it in `x-pdgate-coordinator-token` is trusted; a coordinator
    /// (`--prefill-router`) given the same file sends it on every leg to its routers.
    #[arg(long)]
    pub coordinator_token_file: Option<PathBuf>,
    /// An InferenceObjective and its priority, `NAME=PRIORITY` (repeatable): a request whose
    /// `x-llm-d-inference-objective` (or `x-gateway-inference-objective`) names it gets that
    /// priority for flow control (its band; priority < 0 is sheddable). Unknown or absent
    /// objectives have priority 0. (In llm-d these are `InferenceObjective` resources.)
    #[arg(long = "inference-objective", value_name = "NAME=PRIORITY")]
    pub inference_objectives: Vec<String>,
    /// Whom the flow identity headers (`x-llm-d-inference-objective`,
    /// `x-llm-d-inference-fairness-id`, `x-llm-d-slo-ttft-ms` and their older names) are
    /// honoured from: `trusted` (default) — callers in `--trusted-coordinator-networks` or
    /// with the coordinator token; from anyone else they are ignored and counted, and the
    /// request gets priority 0 and its client address as fairness id. `any` — every request
    /// (llm-d's behaviour, when a gateway in front sets or overwrites these headers).
    #[arg(long, value_enum, default_value_t = pdgate_core::flow_key::FlowHeadersFrom::Trusted)]
    pub flow_headers_from: pdgate_core::flow_key::FlowHeadersFrom,
    /// On SIGTERM or SIGINT: how long running requests may take to finish, ms (queued and
    /// new ones get 503 `rejected-shutting-down`, `/health` answers not ready meanwhile).
    #[arg(long, default_value_t = DEFAULT_SHUTDOWN_GRACE_MS)]
    pub shutdown_grace_ms: u64,
    /// Client header/body timeouts, connection and in-flight body limits.
    #[command(flatten)]
    pub client_limits: crate::client_limits::ClientLimitsArgs,
    /// Server threads, each with its own runtime and listener (default: one per core).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Coordinate per-role routers instead of scheduling: the prefill router's `HOST:PORT`
    /// (another `pdgate serve`, or any gateway + EPP reading `x-llm-d-epp-profile`).
    #[arg(long, requires = "decode_router")]
    pub prefill_router: Option<String>,
    /// The encode router's `HOST:PORT` (with `--prefill-router`): requests with image, audio
    /// or video parts get one encode leg per item before prefill.
    #[arg(long, requires = "prefill_router")]
    pub encode_router: Option<String>,
    /// The decode router's `HOST:PORT` (with `--prefill-router`).
    #[arg(long, requires = "prefill_router")]
    pub decode_router: Option<String>,
    /// With per-role routers: send the decode leg first with `Prefer: if-available`; on its
    /// 412 run prefill then decode (conditional decode, design.md §4).
    #[arg(long, requires = "decode_router")]
    pub conditional_decode: bool,
    /// Response headers captured from every phase response (2xx and a conditional-decode
    /// 412) and sent on later legs, comma-separated; replaces the default
    /// `x-llm-d-disagg-revision`; an empty value forwards nothing.
    #[arg(long, value_delimiter = ',', num_args = 0..)]
    pub forward_response_headers: Option<Vec<String>>,
    /// The `kv_transfer_params` contract of split requests: `kv-nixl` (vLLM NixlConnector:
    /// decode pulls the blocks the prefill answer names) or `kv-shared-storage` (vLLM
    /// ExampleConnector: both engines share a KV store keyed by the prompt's tokens).
    #[arg(long, default_value_t = KvConnector::default(), value_parser = |s: &str| s.parse::<KvConnector>())]
    pub kv_connector: KvConnector,
    /// How encode legs hand their output to prefill: `pdgate` (encoders answer
    /// `ec_transfer_params`, the pdgate simulator's handoff) or `ec-shared-storage` (vLLM
    /// ECExampleConnector: engines share an encoder cache keyed by mm_hash).
    #[arg(long, default_value_t = EcConnector::default(), value_parser = |s: &str| s.parse::<EcConnector>())]
    pub ec_connector: EcConnector,
    /// Encode legs in flight at once for one request.
    #[arg(long, default_value_t = pdgate_coordinator::ec_connector::DEFAULT_ENCODE_PARALLELISM,
          value_parser = |s: &str| match s.parse::<usize>() {
              Ok(n) if (1..=crate::config::coordinator_config::MAX_ENCODE_PARALLEL).contains(&n) => Ok(n),
              _ => Err(format!("`{s}` is not a number of legs within 1..={}",
                               crate::config::coordinator_config::MAX_ENCODE_PARALLEL)),
          })]
    pub encode_max_parallel: usize,
    /// Idle keep-alive connections kept per upstream host (engines or routers).
    #[arg(long, default_value_t = crate::dispatch::upstream::DEFAULT_MAX_IDLE_PER_HOST)]
    pub upstream_max_idle_per_host: usize,
    /// How long an idle upstream connection is kept, ms.
    #[arg(long, default_value_t = pdgate_fleet::scrape::client::DEFAULT_POOL_IDLE_TIMEOUT.as_millis() as u64,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub upstream_idle_timeout_ms: u64,
    /// Coordinator steps run on each client request before its legs (`replace-media-urls`,
    /// `render`).
    #[command(flatten)]
    pub pre_steps: crate::pre_steps::PreStepArgs,
    /// llm-d's coordinator YAML (server, gateway, pipeline): run as that coordinator
    /// (`crate::config::coordinator_config`); its settings replace the flags they map to, which may
    /// then not be given too. `COORDINATOR_*` environment variables override it.
    #[arg(long, conflicts_with_all = [
        "config", "host", "port", "prefill_router", "decode_router", "encode_router",
        "conditional_decode", "forward_response_headers", "kv_connector", "max_body_bytes",
        "ec_connector", "encode_max_parallel",
        "upstream_max_idle_per_host", "upstream_idle_timeout_ms", "shutdown_grace_ms",
        "client_header_timeout_ms", "client_body_timeout_ms", "stream_head_timeout_secs",
        "leg_deadline_secs", "stream_total_timeout_secs", "endpoints", "endpoint", "pool_name", "pod_selector",
        "render_address", "render_timeout_ms", "render_max_idle_per_host",
        "render_idle_timeout_ms", "render_max_total_tokens",
        "render_max_total_placeholder_tokens", "tokens_in_prefill", "replace_media_urls",
        "media_download_timeout_ms", "media_max_concurrent_downloads", "media_max_entries",
        "media_max_download_mib", "media_allow_private_networks", "media_allowed_domains",
    ])]
    pub coordinator_config: Option<PathBuf>,
}

/// Loads llm-d's coordinator YAML at `path` (`--coordinator-config`), with `COORDINATOR_*`
/// environment overrides.
///
/// Errors: the file cannot be read or nests too deep ([`read_config_file`], naming the flag),
/// or every problem found, one per line as `check-config` shows them.
pub fn load_coordinator_config(
    path: &std::path::Path,
) -> anyhow::Result<crate::config::coordinator_config::CoordinatorConfig> {
    let text = read_config_file(path).map_err(|e| anyhow::anyhow!("--coordinator-config: {e}"))?;
    crate::config::coordinator_config::CoordinatorConfig::load(
        &text,
        &path.display().to_string(),
        &|k| std::env::var(k).ok(),
    )
    .map_err(|all| anyhow::anyhow!("invalid coordinator config:\n{all}"))
}

pub use pdgate_core::startup::{load_scheduler, read_config_file, shutdown_signal};

/// Runs `pdgate serve` until the process is stopped.
pub async fn run(mut args: ServeArgs) -> anyhow::Result<()> {
    if let Some(path) = args.coordinator_config.clone() {
        let c = load_coordinator_config(&path)?;
        if args.print_config {
            print!("{}", c.effective_yaml());
            return Ok(());
        }
        c.apply(&mut args);
        tracing::info!(
            file = %path.display(),
            gateway = %c.gateway,
            kv_connector = %c.kv_connector,
            conditional_decode = c.conditional_decode,
            "coordinator config loaded"
        );
    }
    let scheduler = load_scheduler(args.config.as_ref(), "--config")?;
    if args.print_config {
        print!("{}", scheduler.effective_config_yaml());
        return Ok(());
    }
    let endpoints = match args.discovery.source()? {
        Some(source) => source,
        None if args.decode_router.is_some() => EndpointSource::Static(Vec::new()),
        None => anyhow::bail!(
            "{} (or --prefill-router and --decode-router to coordinate routers)",
            pdgate_fleet::args::NO_ENDPOINTS
        ),
    };
    let addr = tokio::net::lookup_host((args.host.as_str(), args.port))
        .await
        .with_context(|| format!("resolving {}", args.host))?
        .next()
        .with_context(|| format!("{} resolves to no address", args.host))?;
    let mut opts = ServeOptions::new(Arc::new(scheduler), endpoints);
    opts.max_body_bytes = args.max_body_bytes;
    opts.scrape_interval = Duration::from_millis(args.scrape_interval_ms);
    opts.scrape_timeout = Duration::from_millis(args.scrape_timeout_ms.max(1));
    opts.resilience = args.resilience.settings();
    opts.kv_connector = args.kv_connector;
    opts.pre_steps = args.pre_steps.steps().map_err(anyhow::Error::msg)?;
    opts.encode = pdgate_coordinator::EncodeSettings {
        connector: args.ec_connector,
        parallelism: args.encode_max_parallel,
    };
    opts.upstream_pool = crate::dispatch::upstream::PoolSettings {
        max_idle_per_host: args.upstream_max_idle_per_host,
        idle_timeout: Duration::from_millis(args.upstream_idle_timeout_ms),
    };
    let networks = crate::trust::parse_networks(&args.trusted_coordinator_networks)
        .map_err(anyhow::Error::msg)?;
    opts.trust = match &args.coordinator_token_file {
        Some(path) => crate::trust::TrustedCallers::token_from_file(networks, path),
        None => crate::trust::TrustedCallers::new(networks, None),
    }
    .map_err(|e| anyhow::anyhow!("--coordinator-token-file: {e}"))?;
    opts.flow_headers_from = args.flow_headers_from;
    opts.objectives = crate::flow_control::Objectives::parse(&args.inference_objectives)
        .map_err(anyhow::Error::msg)?;
    let nofile = crate::client_limits::raise_nofile_limit();
    opts.client_limits = args.client_limits.limits();
    tracing::info!(
        nofile,
        max_client_connections = opts.client_limits.max_connections,
        "client limits"
    );
    if let Some(names) = &args.forward_response_headers {
        // `''` (one empty value) forwards nothing; an empty item inside a list is a typo.
        let names: Vec<&str> = match names.as_slice() {
            [only] if only.trim().is_empty() => Vec::new(),
            list => list.iter().map(|n| n.trim()).collect(),
        };
        if names.iter().any(|n| n.is_empty()) {
            anyhow::bail!("--forward-response-headers: an empty name in the list");
        }
        opts.forward_rules = ForwardRules::new(&names)
            .map_err(|e| anyhow::anyhow!("--forward-response-headers: {e}"))?;
    }
    if let (Some(p), Some(d)) = (&args.prefill_router, &args.decode_router) {
        check_address(p).map_err(|e| anyhow::anyhow!("--prefill-router: {e}"))?;
        check_address(d).map_err(|e| anyhow::anyhow!("--decode-router: {e}"))?;
        let mut routers = PhaseRouters::new(p, d, args.conditional_decode);
        if let Some(e) = &args.encode_router {
            check_address(e).map_err(|e| anyhow::anyhow!("--encode-router: {e}"))?;
            routers = routers.with_encode(e);
        }
        opts.routers = Some(routers);
    }
    let (state, _tasks) = start_state(opts).await?;
    let threads = args
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .max(1);
    let bound = crate::ingress::threads::spawn_server_threads(addr, threads, &state)
        .with_context(|| format!("binding {addr}"))?;
    tracing::info!(addr = %bound, threads, "pdgate serve listening");
    eprintln!("pdgate serve listening on http://{bound} ({threads} server threads)");
    shutdown_signal().await?;
    // Draining: queued and new requests get 503 `rejected-shutting-down`, `/health` answers
    // not ready (load balancers stop sending), running requests finish within the grace.
    state.flow.shutdown();
    let grace = Duration::from_millis(args.shutdown_grace_ms);
    tracing::info!(
        in_flight = state.in_flight_total(),
        active = state.active.count(),
        ?grace,
        "pdgate serve draining"
    );
    let deadline = tokio::time::Instant::now() + grace;
    // Every answer still being sent counts (`active`); a coordinator's legs book nothing here.
    let busy = || state.in_flight_total() > 0 || state.active.count() > 0;
    while busy() && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // A moment for the last answers to leave.
    tokio::time::sleep(Duration::from_millis(100)).await;
    tracing::info!(in_flight = state.in_flight_total(), "pdgate serve stopped");
    Ok(())
}

pub use pdgate_core::defaults::DEFAULT_SHUTDOWN_GRACE_MS;
