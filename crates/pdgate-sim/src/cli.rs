//! `pdgate sim` flags ([`SimArgs`]); defaults come from the constants in [`crate::config`].

use crate::config::*;
use crate::fleet::{parse_fleet, plan_flags, plan_fleet, PlannedWorker};
use crate::kv_events::{KvEventEncoding, KvEventsConfig};
use crate::transfer_config::{EcTransferConfig, KvTransferConfig};
use std::path::PathBuf;
use std::time::Duration;

/// Flags of `pdgate sim`: the fleet to start and the engine settings every worker shares.
#[derive(Debug, Clone, clap::Args)]
pub struct SimArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// First port; worker i listens on port+i (0 = ephemeral ports).
    #[arg(long, default_value_t = 8000)]
    pub port: u16,
    /// Host written into kv_transfer_params.remote_host and ec_transfer_params (default: the listen address, or
    /// 127.0.0.1 when listening on 0.0.0.0 / ::).
    #[arg(long)]
    pub advertise_host: Option<String>,
    /// Number of workers [default: 1, or the length of --roles].
    #[arg(long, conflicts_with = "fleet")]
    pub workers: Option<usize>,
    /// Role of every worker: prefill, decode, prefill-decode (alias both), encode.
    #[arg(long, default_value = "prefill-decode", conflicts_with_all = ["roles", "fleet"])]
    pub role: String,
    /// One role per worker, comma separated (e.g. prefill,decode,decode).
    #[arg(long, value_delimiter = ',', conflicts_with = "fleet")]
    pub roles: Vec<String>,
    /// Revision label of every worker.
    #[arg(long, conflicts_with = "fleet")]
    pub revision: Option<String>,
    /// YAML fleet file (list of workers: name, role, revision, labels, count, port); replaces
    /// --workers, --role, --roles and --revision.
    #[arg(long)]
    pub fleet: Option<PathBuf>,
    /// Served model name.
    #[arg(long, default_value = DEFAULT_MODEL)]
    pub model: String,
    /// Tokens per KV block.
    #[arg(long, default_value_t = DEFAULT_BLOCK_SIZE)]
    pub block_size: usize,
    /// KV cache capacity in blocks.
    #[arg(long, default_value_t = DEFAULT_NUM_GPU_BLOCKS)]
    pub num_gpu_blocks: usize,
    /// Most requests in the running batch.
    #[arg(long, default_value_t = DEFAULT_MAX_NUM_SEQS)]
    pub max_num_seqs: usize,
    /// Token budget of one engine step.
    #[arg(long, default_value_t = DEFAULT_MAX_NUM_BATCHED_TOKENS)]
    pub max_num_batched_tokens: usize,
    /// Longest prompt + output, in tokens.
    #[arg(long, default_value_t = DEFAULT_MAX_MODEL_LEN)]
    pub max_model_len: usize,
    /// Divides every simulated duration (step costs, KV transfers).
    #[arg(long, default_value_t = DEFAULT_SPEEDUP)]
    pub speedup: f64,
    /// Lifetime of a prefill lease, wall-clock seconds.
    #[arg(long, default_value_t = DEFAULT_LEASE_TTL_SECS)]
    pub lease_ttl_secs: u64,
    /// KV bytes per token (transfer cost).
    #[arg(long, default_value_t = DEFAULT_KV_BYTES_PER_TOKEN)]
    pub kv_bytes_per_token: u64,
    /// KV transfer bandwidth, gigabits per second.
    #[arg(long, default_value_t = DEFAULT_KV_BANDWIDTH_GBPS)]
    pub kv_bandwidth_gbps: f64,
    /// Fixed cost of one KV transfer, simulated milliseconds.
    #[arg(long, default_value_t = DEFAULT_KV_SETUP_MS)]
    pub kv_setup_ms: f64,
    /// Probability (0..1) of answering a request with --error-status before any byte.
    #[arg(long, default_value_t = DEFAULT_ERROR_RATE)]
    pub error_rate: f64,
    /// Status of injected errors.
    #[arg(long, default_value_t = DEFAULT_ERROR_STATUS)]
    pub error_status: u16,
    /// Probability (0..1) of cutting a stream mid-way (the body ends abruptly, without `data: [DONE]`).
    #[arg(long, default_value_t = DEFAULT_ABORT_RATE)]
    pub abort_rate: f64,
    /// Wall-clock delay before each inference request is processed.
    #[arg(long, default_value_t = DEFAULT_SLOW_START_MS)]
    pub slow_start_ms: u64,
    /// Encoder cost of one media item (image, audio, video), simulated milliseconds.
    #[arg(long, default_value_t = DEFAULT_ENCODE_MS_PER_ITEM)]
    pub encode_ms_per_item: f64,
    /// Lifetime of an encoder-cache lease, wall-clock seconds [default: --lease-ttl-secs].
    #[arg(long)]
    pub ec_lease_ttl_secs: Option<u64>,
    /// vLLM's KV-event publisher config (JSON KVEventsConfig), e.g.
    /// '{"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"tcp://*:5557"}';
    /// worker i publishes on the endpoint's port + i (replay port + i), as vLLM's DP ranks.
    #[arg(long, value_parser = parse_kv_events_config)]
    pub kv_events_config: Option<KvEventsConfig>,
    /// Encoding of KV events: tagged maps (vLLM 0.32) or positional arrays (older vLLM)
    /// [pdgate-sim extension].
    #[arg(long, value_enum, default_value_t = KvEventEncoding::Tagged)]
    pub kv_events_encoding: KvEventEncoding,
    /// vLLM's KV connector config (JSON KVTransferConfig) for every worker [default: NIXL
    /// handoff]: '{"kv_connector":"NixlConnector","kv_role":"kv_both"}', or shared storage
    /// (llm-d's kv-shared-storage) with
    /// '{"kv_connector":"ExampleConnector","kv_role":"kv_both","kv_connector_extra_config":{"shared_storage_path":"/dir"}}'
    /// (also "SharedStorageConnector"; path default /tmp): every request loads its prompt's
    /// KV from the directory when stored there by a worker of the same model and revision,
    /// else stores it; kv_transfer_params are ignored.
    #[arg(long, value_parser = parse_kv_transfer_config)]
    pub kv_transfer_config: Option<KvTransferConfig>,
    /// vLLM's encoder-cache connector config (JSON ECTransferConfig) for every worker
    /// [default: ec_transfer_params pulls]:
    /// '{"ec_connector":"ECExampleConnector","ec_role":"ec_both","ec_connector_extra_config":{"shared_storage_path":"/dir"}}'
    /// (llm-d's ec-shared-storage; ec_producer / ec_both store what they encode, every role
    /// loads by mm_hash; ec_transfer_params are ignored).
    #[arg(long, value_parser = parse_ec_transfer_config)]
    pub ec_transfer_config: Option<EcTransferConfig>,
    /// Keep the exact bytes of the last N response bodies of the engine APIs (each at most
    /// 1 MiB), by x-request-id, served at GET /debug/responses/{request_id}; 0 = off
    /// [pdgate-sim extension]. At most 100000.
    #[arg(long, default_value_t = DEFAULT_RECORD_RESPONSES,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(0..=100_000))]
    pub record_responses: usize,
}

fn parse_kv_events_config(s: &str) -> Result<KvEventsConfig, String> {
    KvEventsConfig::parse(s).map_err(|e| e.to_string())
}

fn parse_kv_transfer_config(s: &str) -> Result<KvTransferConfig, String> {
    KvTransferConfig::parse(s).map_err(|e| e.to_string())
}

fn parse_ec_transfer_config(s: &str) -> Result<EcTransferConfig, String> {
    EcTransferConfig::parse(s).map_err(|e| e.to_string())
}

impl SimArgs {
    /// Engine settings from the flags.
    pub fn config(&self) -> SimConfig {
        SimConfig {
            model: self.model.clone(),
            block_size: self.block_size,
            num_gpu_blocks: self.num_gpu_blocks,
            max_num_seqs: self.max_num_seqs,
            max_num_batched_tokens: self.max_num_batched_tokens,
            max_model_len: self.max_model_len,
            speedup: self.speedup,
            lease_ttl: Duration::from_secs(self.lease_ttl_secs),
            kv_bytes_per_token: self.kv_bytes_per_token,
            kv_bandwidth_gbps: self.kv_bandwidth_gbps,
            kv_setup_ms: self.kv_setup_ms,
            error_rate: self.error_rate,
            error_status: self.error_status,
            abort_rate: self.abort_rate,
            slow_start: Duration::from_millis(self.slow_start_ms),
            advertise_host: self.advertise_host.clone(),
            encode_ms_per_item: self.encode_ms_per_item,
            ec_lease_ttl: self.ec_lease_ttl_secs.map(Duration::from_secs),
            kv_events: self.kv_events_config.clone(),
            kv_events_encoding: self.kv_events_encoding,
            kv_transfer: self.kv_transfer_config.clone(),
            ec_transfer: self.ec_transfer_config.clone(),
            record_responses: self.record_responses,
        }
    }

    /// The workers to start, from `--fleet` or the per-worker flags.
    pub fn plan(&self) -> anyhow::Result<Vec<PlannedWorker>> {
        match &self.fleet {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|e| {
                    anyhow::anyhow!("cannot read fleet file {}: {e}", path.display())
                })?;
                let entries =
                    parse_fleet(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
                plan_fleet(&entries, self.port)
            }
            None => plan_flags(
                self.workers,
                &self.role,
                &self.roles,
                self.revision.as_deref(),
                self.port,
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        sim: SimArgs,
    }

    #[test]
    fn defaults_match_sim_config_default() {
        let cli = Cli::try_parse_from(["sim"]).unwrap();
        assert_eq!(cli.sim.config(), SimConfig::default());
        assert_eq!((cli.sim.host.as_str(), cli.sim.port), ("127.0.0.1", 8000));
        let plan = cli.sim.plan().unwrap();
        assert_eq!(plan.len(), 1);
        assert_eq!(plan[0].spec.role, "prefill-decode");
    }

    #[test]
    fn roles_and_fleet_conflict() {
        let cli = Cli::try_parse_from(["sim", "--roles", "prefill,decode", "--port", "0"]).unwrap();
        assert_eq!(cli.sim.plan().unwrap().len(), 2);
        assert!(Cli::try_parse_from(["sim", "--roles", "decode", "--fleet", "f.yaml"]).is_err());
        assert!(Cli::try_parse_from(["sim", "--role", "decode", "--roles", "decode"]).is_err());
    }

    #[test]
    fn encode_role_and_knobs() {
        let cli = Cli::try_parse_from([
            "sim",
            "--role",
            "encode",
            "--workers",
            "2",
            "--encode-ms-per-item",
            "5",
            "--ec-lease-ttl-secs",
            "30",
        ])
        .unwrap();
        let plan = cli.sim.plan().unwrap();
        let names: Vec<_> = plan
            .iter()
            .map(|w| (w.spec.name.as_str(), w.spec.role.as_str()))
            .collect();
        assert_eq!(names, vec![("encode-0", "encode"), ("encode-1", "encode")]);
        let cfg = cli.sim.config();
        assert_eq!(cfg.encode_ms_per_item, 5.0);
        assert_eq!(cfg.ec_ttl(), Duration::from_secs(30));
        assert_eq!(
            SimConfig::default().ec_ttl(),
            SimConfig::default().lease_ttl
        );
    }

    #[test]
    fn kv_events_flags() {
        let cli = Cli::try_parse_from([
            "sim",
            "--kv-events-config",
            r#"{"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"tcp://*:6000","replay_endpoint":"tcp://*:6100"}"#,
            "--kv-events-encoding",
            "positional",
        ])
        .unwrap();
        let cfg = cli.sim.config();
        assert!(cfg.kv_events_enabled());
        assert_eq!(cfg.kv_events_encoding, KvEventEncoding::Positional);
        let w1 = cfg.for_worker(1).unwrap().kv_events.unwrap();
        assert_eq!(
            (w1.endpoint.as_str(), w1.replay_endpoint.as_deref()),
            ("tcp://*:6001", Some("tcp://*:6101"))
        );
        let err = Cli::try_parse_from([
            "sim",
            "--kv-events-config",
            r#"{"enable_kv_cache_events":true,"publisher":"kafka"}"#,
        ])
        .err()
        .unwrap()
        .to_string();
        assert!(
            err.contains("publisher \"kafka\" is not supported"),
            "{err}"
        );
        assert!(!Cli::try_parse_from(["sim"])
            .unwrap()
            .sim
            .config()
            .kv_events_enabled());
    }

    #[test]
    fn transfer_config_flags() {
        let cli = Cli::try_parse_from([
            "sim",
            "--kv-transfer-config",
            r#"{"kv_connector":"ExampleConnector","kv_role":"kv_both","kv_connector_extra_config":{"shared_storage_path":"/data/kv"}}"#,
            "--ec-transfer-config",
            r#"{"ec_connector":"ECExampleConnector","ec_role":"ec_both","ec_connector_extra_config":{"shared_storage_path":"/data/ec"}}"#,
        ])
        .unwrap();
        let cfg = cli.sim.config();
        assert_eq!(
            cfg.kv_shared_storage(),
            Some(std::path::Path::new("/data/kv"))
        );
        let ec = cfg.ec_transfer.unwrap();
        assert_eq!(ec.shared_storage_path, PathBuf::from("/data/ec"));
        let err = Cli::try_parse_from(["sim", "--kv-transfer-config", r#"{"kv_connector":"X"}"#])
            .err()
            .unwrap()
            .to_string();
        assert!(
            err.contains("--kv-transfer-config: kv_role is required"),
            "{err}"
        );
        let nixl = Cli::try_parse_from([
            "sim",
            "--kv-transfer-config",
            r#"{"kv_connector":"NixlConnector","kv_role":"kv_both"}"#,
        ])
        .unwrap();
        assert_eq!(nixl.sim.config().kv_shared_storage(), None);
    }
}
