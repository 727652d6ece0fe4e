//! What a data plane (or anyone reaching the EPP's ports) may hold of `pdgate epp` (issue 26):
//! the limits `pdgate serve` puts on its clients, applied to ext_proc streams, with the same
//! flags and defaults where an equivalent exists.
//!
//! | what | flag | default |
//! |---|---|---|
//! | first bytes of a connection (every port); first message of a stream; HTTP/1 headers and keep-alive idle on the metrics port | `--client-header-timeout-ms` | 60 s |
//! | a request body, from its headers to its end (then 408) | `--client-body-timeout-ms` | 60 s |
//! | ext_proc connections open at once | `--max-client-connections` | from `RLIMIT_NOFILE` |
//! | request body bytes buffered at once, all streams (then 429) | `--max-inflight-body-bytes` | 341 MiB (1 GiB of memory at ~3 bytes per body byte) |
//! | ext_proc streams open at once, all connections (then `RESOURCE_EXHAUSTED`) | `--max-ext-proc-streams` | 10,000 |
//! | ext_proc streams open at once on one connection (HTTP/2 `SETTINGS_MAX_CONCURRENT_STREAMS`) | `--max-ext-proc-streams-per-connection` | 1,000 |
//! | a stream's wait for the next message once its request went upstream | `--ext-proc-idle-timeout-ms` | 30 min |
//! | HTTP/2 keepalive ping interval / ack timeout (gRPC ports) | `--grpc-keepalive-interval-ms` / `--grpc-keepalive-timeout-ms` | 30 s / 20 s |
//! | connections on the health port, on the metrics port | — | 64 each |
//!
//! Request headers are bounded as `serve` bounds them ([`pdgate_core::front`]): at most
//! [`MAX_REQUEST_HEADERS`] fields and [`MAX_REQUEST_HEADER_BYTES`] (then 431), and one
//! request-headers message per stream (a second one: 400).

use pdgate_core::client_limits::{ClientLimits, ClientLimitsArgs};
pub use pdgate_core::front::{MAX_REQUEST_HEADERS, MAX_REQUEST_HEADER_BYTES};
use std::time::Duration;

/// Default [`EppLimits::max_streams`]: 10,000 ext_proc streams, one per HTTP request in flight
/// through the gateway. An idle stream costs about 21 KB (issue 26 measured 30,000 at
/// 633 MB), so the cap holds them to about 210 MB; 10,000 requests at once is 10 engines of
/// vLLM's largest `max_num_seqs` (1,024) with nothing queued, or 40 of its default 256. Raise
/// it for a larger pool per EPP replica.
pub const DEFAULT_MAX_EXT_PROC_STREAMS: usize = 10_000;

/// Default [`EppLimits::max_streams_per_connection`]: 1,000 streams on one HTTP/2 connection,
/// a tenth of the total, so one connection cannot take every stream. Envoy opens another
/// connection when its connection reaches the server's `SETTINGS_MAX_CONCURRENT_STREAMS`.
/// (tonic sets none by default: issue 26 held 30,000 streams on one connection.)
pub const DEFAULT_MAX_STREAMS_PER_CONNECTION: u32 = 1_000;

/// Default [`EppLimits::idle_timeout`], ms: 30 minutes, `serve`'s deadline for a non-streamed
/// leg (`timeouts::DEFAULT_LEG_DEADLINE_SECS`). Once a request went upstream, the next message
/// (the response headers of a non-streamed answer) may come only when generation ends; a
/// healthy engine is never cut off by it, and a stream a data plane forgot is ended (its
/// bookings released) after it.
pub const DEFAULT_EXT_PROC_IDLE_TIMEOUT_MS: u64 = 30 * 60 * 1000;

/// Default HTTP/2 keepalive ping interval on the gRPC ports, ms: a peer that vanished (no
/// FIN: a node lost, a partition) is noticed within interval + timeout (50 s) instead of
/// holding its connection and streams until TCP gives up (about 15 min). Envoy answers pings
/// (every HTTP/2 peer must).
pub const DEFAULT_GRPC_KEEPALIVE_INTERVAL_MS: u64 = 30_000;

/// Default time for a keepalive ping's acknowledgement, ms (tonic's and hyper's default).
pub const DEFAULT_GRPC_KEEPALIVE_TIMEOUT_MS: u64 = 20_000;

/// Connections open at once on the gRPC health port, and on the metrics port (each): the
/// kubelet's probes and a few Prometheus scrapers need a handful; 64 leaves room, and keeps a
/// flood on these ports (issue 26: 1,100 half-open connections to the metrics port took every
/// descriptor) from taking the descriptors the ext_proc port needs.
pub const MAX_SIDE_PORT_CONNECTIONS: usize = 64;

/// Most bytes of one ext_proc message the EPP decodes (tonic's and gRPC's default, 4 MiB):
/// Envoy's messages are a header list (at most [`MAX_REQUEST_HEADER_BYTES`] kept) or one body
/// chunk, far below it.
pub const MAX_MESSAGE_BYTES: usize = 4 << 20;

/// Everything the EPP bounds (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EppLimits {
    /// `serve`'s client limits: header timeout, body timeout, connections (the ext_proc
    /// port), request body bytes in flight.
    pub client: ClientLimits,
    /// ext_proc streams open at once over every connection; one more is answered
    /// `RESOURCE_EXHAUSTED` at once.
    pub max_streams: usize,
    /// ext_proc streams open at once on one connection (HTTP/2
    /// `SETTINGS_MAX_CONCURRENT_STREAMS`; more are refused by HTTP/2 itself).
    pub max_streams_per_connection: u32,
    /// Longest wait for a stream's next message once its request went upstream (or the
    /// stream was answered); then the stream is ended and its bookings released.
    pub idle_timeout: Duration,
    /// HTTP/2 keepalive ping interval on the gRPC ports.
    pub keepalive_interval: Duration,
    /// Time for a ping's acknowledgement; then the connection is closed.
    pub keepalive_timeout: Duration,
}

impl Default for EppLimits {
    fn default() -> Self {
        EppLimits {
            client: ClientLimits::default(),
            max_streams: DEFAULT_MAX_EXT_PROC_STREAMS,
            max_streams_per_connection: DEFAULT_MAX_STREAMS_PER_CONNECTION,
            idle_timeout: Duration::from_millis(DEFAULT_EXT_PROC_IDLE_TIMEOUT_MS),
            keepalive_interval: Duration::from_millis(DEFAULT_GRPC_KEEPALIVE_INTERVAL_MS),
            keepalive_timeout: Duration::from_millis(DEFAULT_GRPC_KEEPALIVE_TIMEOUT_MS),
        }
    }
}

/// The flags of [`EppLimits`] (flattened into `pdgate epp`): `serve`'s client-limit flags,
/// then the stream limits.
#[derive(Debug, Clone, clap::Args)]
pub struct EppLimitsArgs {
    /// `serve`'s client-limit flags, with their meaning for the EPP (module docs).
    #[command(flatten)]
    pub client: ClientLimitsArgs,
    /// ext_proc streams open at once over every connection; more are answered
    /// RESOURCE_EXHAUSTED.
    #[arg(long, default_value_t = DEFAULT_MAX_EXT_PROC_STREAMS,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub max_ext_proc_streams: usize,
    /// ext_proc streams open at once on one HTTP/2 connection.
    #[arg(long, default_value_t = DEFAULT_MAX_STREAMS_PER_CONNECTION,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub max_ext_proc_streams_per_connection: u32,
    /// Longest wait for a stream's next message once its request went upstream, ms; then the
    /// stream is ended and its bookings released.
    #[arg(long, default_value_t = DEFAULT_EXT_PROC_IDLE_TIMEOUT_MS,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub ext_proc_idle_timeout_ms: u64,
    /// HTTP/2 keepalive ping interval on the gRPC ports, ms.
    #[arg(long, default_value_t = DEFAULT_GRPC_KEEPALIVE_INTERVAL_MS,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub grpc_keepalive_interval_ms: u64,
    /// Time for a keepalive ping's acknowledgement, ms; then the connection is closed.
    #[arg(long, default_value_t = DEFAULT_GRPC_KEEPALIVE_TIMEOUT_MS,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub grpc_keepalive_timeout_ms: u64,
}

impl EppLimitsArgs {
    /// The limits these flags give.
    pub fn limits(&self) -> EppLimits {
        EppLimits {
            client: self.client.limits(),
            max_streams: self.max_ext_proc_streams,
            max_streams_per_connection: self.max_ext_proc_streams_per_connection,
            idle_timeout: Duration::from_millis(self.ext_proc_idle_timeout_ms),
            keepalive_interval: Duration::from_millis(self.grpc_keepalive_interval_ms),
            keepalive_timeout: Duration::from_millis(self.grpc_keepalive_timeout_ms),
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
        limits: EppLimitsArgs,
    }

    #[test]
    fn flags_default_to_the_struct_defaults_and_take_serves_names() {
        let cli = Cli::parse_from(["x"]);
        assert_eq!(cli.limits.limits(), EppLimits::default());
        let cli = Cli::parse_from([
            "x",
            "--max-inflight-body-bytes",
            "1000",
            "--client-header-timeout-ms",
            "500",
            "--max-ext-proc-streams",
            "7",
            "--ext-proc-idle-timeout-ms",
            "900",
        ]);
        let l = cli.limits.limits();
        assert_eq!(l.client.max_inflight_body_bytes, 1000);
        assert_eq!(l.client.header_timeout, Duration::from_millis(500));
        assert_eq!(l.max_streams, 7);
        assert_eq!(l.idle_timeout, Duration::from_millis(900));
        assert!(Cli::try_parse_from(["x", "--max-ext-proc-streams", "0"]).is_err());
        assert!(Cli::try_parse_from(["x", "--ext-proc-idle-timeout-ms", "0"]).is_err());
    }
}
