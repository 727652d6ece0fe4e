//! Engine settings ([`SimConfig`]) and worker identity ([`WorkerSpec`]), with the defaults the
//! CLI uses (one constant per setting, so the CLI and `Default` cannot drift apart).

use crate::kv_events::{KvEventEncoding, KvEventsConfig};
use crate::transfer_config::{EcTransferConfig, KvTransferConfig};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

/// Served model name.
pub const DEFAULT_MODEL: &str = "pdgate-sim";
/// Tokens per KV block.
pub const DEFAULT_BLOCK_SIZE: usize = 16;
/// KV cache capacity in blocks.
pub const DEFAULT_NUM_GPU_BLOCKS: usize = 16384;
/// Largest batch (running requests).
pub const DEFAULT_MAX_NUM_SEQS: usize = 256;
/// Token budget of one engine step (prefill chunks + one token per decoding request).
pub const DEFAULT_MAX_NUM_BATCHED_TOKENS: usize = 8192;
/// Longest prompt + output accepted, in tokens.
pub const DEFAULT_MAX_MODEL_LEN: usize = 131072;
/// Divides every simulated duration.
pub const DEFAULT_SPEEDUP: f64 = 1.0;
/// Lifetime of a prefill lease, in wall-clock seconds (vLLM's NIXL abort timeout).
pub const DEFAULT_LEASE_TTL_SECS: u64 = 480;
/// KV bytes per token (a Llama-3-8B in bf16: 2 × 32 layers × 8 KV heads × 128 × 2 bytes).
pub const DEFAULT_KV_BYTES_PER_TOKEN: u64 = 131072;
/// KV transfer bandwidth in gigabits per second (a 200 Gb/s RDMA NIC).
pub const DEFAULT_KV_BANDWIDTH_GBPS: f64 = 200.0;
/// Fixed cost of one KV transfer, in simulated milliseconds.
pub const DEFAULT_KV_SETUP_MS: f64 = 2.0;
/// Probability of answering a request with [`DEFAULT_ERROR_STATUS`] before any byte.
pub const DEFAULT_ERROR_RATE: f64 = 0.0;
/// Status of injected errors.
pub const DEFAULT_ERROR_STATUS: u16 = 500;
/// Probability of cutting a stream mid-way.
pub const DEFAULT_ABORT_RATE: f64 = 0.0;
/// Wall-clock delay before a request is processed (its first byte).
pub const DEFAULT_SLOW_START_MS: u64 = 0;
/// Encoder cost of one media item (image, audio or video), in simulated milliseconds.
pub const DEFAULT_ENCODE_MS_PER_ITEM: f64 = 20.0;
/// Response bodies kept for `GET /debug/responses/{request_id}` (0 = off).
pub const DEFAULT_RECORD_RESPONSES: usize = 0;
/// Output length when a request names none (vLLM's completions default).
pub const DEFAULT_MAX_TOKENS: usize = 16;

/// Engine settings shared by every worker of a fleet.
#[derive(Debug, Clone, PartialEq)]
pub struct SimConfig {
    /// Served model name; other names get 404.
    pub model: String,
    /// Tokens per KV block.
    pub block_size: usize,
    /// KV cache capacity in blocks.
    pub num_gpu_blocks: usize,
    /// Most requests running at once.
    pub max_num_seqs: usize,
    /// Token budget of one step.
    pub max_num_batched_tokens: usize,
    /// Longest prompt + output, in tokens.
    pub max_model_len: usize,
    /// Divides every simulated duration (step costs, KV transfers).
    pub speedup: f64,
    /// Lifetime of a prefill lease (wall clock, not divided by `speedup`).
    pub lease_ttl: Duration,
    /// KV bytes per token, for the transfer cost.
    pub kv_bytes_per_token: u64,
    /// KV transfer bandwidth, gigabits per second.
    pub kv_bandwidth_gbps: f64,
    /// Fixed cost of one KV transfer, simulated milliseconds.
    pub kv_setup_ms: f64,
    /// Probability (0..1) of answering a request with `error_status` before any byte.
    pub error_rate: f64,
    /// Status of injected errors.
    pub error_status: u16,
    /// Probability (0..1) that a stream is cut mid-way.
    pub abort_rate: f64,
    /// Wall-clock delay before each inference request is processed (not divided by `speedup`).
    pub slow_start: Duration,
    /// Host written into `kv_transfer_params.remote_host` and `ec_transfer_params[*].remote_host`;
    /// `None` = the listener's IP (127.0.0.1 when it listens on an unspecified address).
    pub advertise_host: Option<String>,
    /// Encoder cost of one media item, simulated milliseconds (divided by `speedup`).
    pub encode_ms_per_item: f64,
    /// Lifetime of an encoder-cache lease (wall clock); `None` = `lease_ttl`.
    pub ec_lease_ttl: Option<Duration>,
    /// vLLM's `--kv-events-config`; `None` = no KV events (vLLM's default). Worker i of a
    /// fleet publishes on the configured ports + i.
    pub kv_events: Option<KvEventsConfig>,
    /// Encoding of published events (pdgate-sim extension).
    pub kv_events_encoding: KvEventEncoding,
    /// vLLM's `--kv-transfer-config`; `None` = the NIXL handoff (`NixlConnector`).
    pub kv_transfer: Option<KvTransferConfig>,
    /// vLLM's `--ec-transfer-config`; `None` = encoder output handed over by
    /// `ec_transfer_params` pulls.
    pub ec_transfer: Option<EcTransferConfig>,
    /// Response bodies the response recorder keeps, each at most 1 MiB (0 = off;
    /// pdgate-sim extension, see `http::recorder`).
    pub record_responses: usize,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            model: DEFAULT_MODEL.to_string(),
            block_size: DEFAULT_BLOCK_SIZE,
            num_gpu_blocks: DEFAULT_NUM_GPU_BLOCKS,
            max_num_seqs: DEFAULT_MAX_NUM_SEQS,
            max_num_batched_tokens: DEFAULT_MAX_NUM_BATCHED_TOKENS,
            max_model_len: DEFAULT_MAX_MODEL_LEN,
            speedup: DEFAULT_SPEEDUP,
            lease_ttl: Duration::from_secs(DEFAULT_LEASE_TTL_SECS),
            kv_bytes_per_token: DEFAULT_KV_BYTES_PER_TOKEN,
            kv_bandwidth_gbps: DEFAULT_KV_BANDWIDTH_GBPS,
            kv_setup_ms: DEFAULT_KV_SETUP_MS,
            error_rate: DEFAULT_ERROR_RATE,
            error_status: DEFAULT_ERROR_STATUS,
            abort_rate: DEFAULT_ABORT_RATE,
            slow_start: Duration::from_millis(DEFAULT_SLOW_START_MS),
            advertise_host: None,
            encode_ms_per_item: DEFAULT_ENCODE_MS_PER_ITEM,
            ec_lease_ttl: None,
            kv_events: None,
            kv_events_encoding: KvEventEncoding::Tagged,
            kv_transfer: None,
            ec_transfer: None,
            record_responses: DEFAULT_RECORD_RESPONSES,
        }
    }
}

impl SimConfig {
    /// Checks ranges; the message names the setting at fault.
    pub fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(!self.model.is_empty(), "--model must not be empty");
        anyhow::ensure!(self.block_size > 0, "--block-size must be at least 1");
        anyhow::ensure!(
            self.num_gpu_blocks > 0,
            "--num-gpu-blocks must be at least 1"
        );
        anyhow::ensure!(self.max_num_seqs > 0, "--max-num-seqs must be at least 1");
        anyhow::ensure!(
            self.max_num_batched_tokens > 0,
            "--max-num-batched-tokens must be at least 1"
        );
        anyhow::ensure!(self.max_model_len > 0, "--max-model-len must be at least 1");
        anyhow::ensure!(
            self.speedup.is_finite() && self.speedup > 0.0,
            "--speedup must be a positive number"
        );
        anyhow::ensure!(
            self.kv_bandwidth_gbps.is_finite() && self.kv_bandwidth_gbps > 0.0,
            "--kv-bandwidth-gbps must be a positive number"
        );
        anyhow::ensure!(
            self.kv_setup_ms.is_finite() && self.kv_setup_ms >= 0.0,
            "--kv-setup-ms must be zero or more"
        );
        anyhow::ensure!(
            (0.0..=1.0).contains(&self.error_rate),
            "--error-rate must be within 0..1"
        );
        anyhow::ensure!(
            (0.0..=1.0).contains(&self.abort_rate),
            "--abort-rate must be within 0..1"
        );
        anyhow::ensure!(
            !self.lease_ttl.is_zero(),
            "--lease-ttl-secs must be at least 1 (a lease that expires at once can never be pulled)"
        );
        anyhow::ensure!(
            self.encode_ms_per_item.is_finite() && self.encode_ms_per_item >= 0.0,
            "--encode-ms-per-item must be zero or more"
        );
        anyhow::ensure!(
            self.ec_lease_ttl != Some(Duration::ZERO),
            "--ec-lease-ttl-secs must be at least 1 (a lease that expires at once can never be pulled)"
        );
        anyhow::ensure!(
            (400..=599).contains(&self.error_status),
            "--error-status must be an HTTP error status (400..=599)"
        );
        if let Some(k) = &self.kv_events {
            k.validate()?;
        }
        Ok(())
    }

    /// These settings as worker `index` of a fleet uses them: the KV-event endpoints shifted by
    /// `index` ports (vLLM's DP-rank rule). Errors when a shifted port is over 65535.
    pub fn for_worker(&self, index: usize) -> anyhow::Result<SimConfig> {
        Ok(SimConfig {
            kv_events: match &self.kv_events {
                Some(k) => Some(k.for_worker(index)?),
                None => None,
            },
            ..self.clone()
        })
    }

    /// Whether the engines record and publish KV events.
    pub fn kv_events_enabled(&self) -> bool {
        self.kv_events
            .as_ref()
            .is_some_and(KvEventsConfig::publishes)
    }

    /// The KV shared-storage directory (`ExampleConnector`), else `None` (NIXL).
    pub fn kv_shared_storage(&self) -> Option<&Path> {
        self.kv_transfer
            .as_ref()
            .and_then(KvTransferConfig::shared_storage_path)
    }

    /// Lifetime of an encoder-cache lease: `ec_lease_ttl`, else the KV `lease_ttl`.
    pub fn ec_ttl(&self) -> Duration {
        self.ec_lease_ttl.unwrap_or(self.lease_ttl)
    }

    /// Simulated duration of `ms` milliseconds, divided by `speedup`.
    pub fn scaled(&self, ms: f64) -> Duration {
        Duration::from_secs_f64((ms.max(0.0) / 1000.0) / self.speedup)
    }
}

/// Identity of one simulated worker (one engine, one HTTP port).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct WorkerSpec {
    /// Worker name, reported in `x-sim-worker` and used in engine ids.
    pub name: String,
    /// Role label: `prefill`, `decode`, `prefill-decode` (alias `both`), `encode` (serves only
    /// encode legs, see README "Encode role"), `encode-prefill` or `encode-prefill-decode` (which
    /// behave as `prefill` and `prefill-decode`).
    pub role: String,
    /// Revision label; workers of different revisions refuse to hand KV or encoder output over.
    pub revision: Option<String>,
    /// Other labels, reported by `GET /sim/info`.
    pub labels: BTreeMap<String, String>,
}

impl WorkerSpec {
    /// A worker with no revision and no labels.
    pub fn new(name: impl Into<String>, role: impl Into<String>) -> Self {
        WorkerSpec {
            name: name.into(),
            role: role.into(),
            revision: None,
            labels: BTreeMap::new(),
        }
    }

    /// Sets the revision.
    pub fn with_revision(mut self, revision: impl Into<String>) -> Self {
        self.revision = Some(revision.into());
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn injected_error_status_must_be_a_4xx_or_5xx() {
        for (status, ok) in [
            (200, false),
            (399, false),
            (400, true),
            (599, true),
            (600, false),
            (999, false),
        ] {
            let cfg = SimConfig {
                error_status: status,
                ..SimConfig::default()
            };
            assert_eq!(cfg.validate().is_ok(), ok, "status {status}");
        }
        let cfg = SimConfig {
            error_status: 999,
            ..SimConfig::default()
        };
        assert_eq!(
            cfg.validate().unwrap_err().to_string(),
            "--error-status must be an HTTP error status (400..=599)"
        );
        let cfg = SimConfig {
            lease_ttl: Duration::ZERO,
            ..SimConfig::default()
        };
        assert_eq!(
            cfg.validate().unwrap_err().to_string(),
            "--lease-ttl-secs must be at least 1 (a lease that expires at once can never be pulled)"
        );
    }
}
