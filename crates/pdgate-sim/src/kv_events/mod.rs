//! KV events of the simulated engines as vLLM publishes them: the `--kv-events-config` flag
//! ([`config`]) and the per-worker publisher ([`publish`]).

pub mod config;
pub mod publish;

pub use config::{KvEventsConfig, TcpEndpoint, WorkerPublisher};

/// How a worker encodes its events (a pdgate-sim extension; vLLM 0.32 sends tagged maps).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum KvEventEncoding {
    /// Each event a msgpack map tagged by `"type"` (vLLM 0.32).
    #[default]
    Tagged,
    /// Each event a positional msgpack array (older vLLM and other engines).
    Positional,
}
