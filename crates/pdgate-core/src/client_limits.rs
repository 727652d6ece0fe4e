//! What a client may hold of the router (issue 10): time to send headers and body, client
//! connections at once, and bytes of request bodies held at once. Each setting is a flag of
//! `pdgate serve` and a field of [`ClientLimits`], with its default defined here once.
//!
//! | setting | flag | default |
//! |---|---|---|
//! | header read, and keep-alive idle | `--client-header-timeout-ms` | 60 s |
//! | body read, once the headers are in | `--client-body-timeout-ms` | 60 s |
//! | client connections, whole process | `--max-client-connections` | from `RLIMIT_NOFILE` |
//! | request body bytes held at once | `--max-inflight-body-bytes` | 1 GiB |
//!
//! The header timeout is hyper's HTTP/1 header-read timer, which starts when a connection is
//! accepted and again when it falls idle after a response: so one setting closes both a
//! client that trickles its headers (slowloris) and a keep-alive connection left idle.
//! HTTP/2 connections keep hyper's limits (stream concurrency, frame and header sizes).

use std::time::Duration;

/// Default [`ClientLimits::header_timeout`], ms.
pub const DEFAULT_CLIENT_HEADER_TIMEOUT_MS: u64 = 60_000;
/// Default [`ClientLimits::body_timeout`], ms.
pub const DEFAULT_CLIENT_BODY_TIMEOUT_MS: u64 = 60_000;
/// The memory request bodies may take at once by default, bytes (1 GiB): the stated bound the
/// default body budget keeps under.
pub const BODY_MEMORY_BOUND: usize = 1 << 30;
/// Router memory per byte of a large request body held at once (measured, issue 26: six 60 MB
/// bodies at once took the process to 1.08 GB — the bytes as read, the parsed view and the
/// cleaned copy sent on).
pub const BODY_MEMORY_PER_BYTE: usize = 3;
/// Default [`ClientLimits::max_inflight_body_bytes`]: [`BODY_MEMORY_BOUND`] /
/// [`BODY_MEMORY_PER_BYTE`] (341 MiB), so concurrent large bodies are refused before their
/// memory passes the bound (five 60 MB bodies pass, the sixth is refused; a budget of the
/// bound itself admitted ~17, about 3 GB).
pub const DEFAULT_MAX_INFLIGHT_BODY_BYTES: usize = BODY_MEMORY_BOUND / BODY_MEMORY_PER_BYTE;
/// Descriptors kept for upstream connections, scrapes and files when the client connection
/// limit is derived from `RLIMIT_NOFILE`.
pub const RESERVED_DESCRIPTORS: u64 = 256;

/// Limits on what clients may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientLimits {
    /// Time for a client to send a request's headers, from accept or from the end of the
    /// previous response (so also the keep-alive idle timeout).
    pub header_timeout: Duration,
    /// Time for a client to send a whole request body once its headers are in.
    pub body_timeout: Duration,
    /// Client connections open at once, over every server thread; one more is answered 503
    /// and closed.
    pub max_connections: usize,
    /// Bytes of client request bodies held at once; a large body that would pass it is
    /// refused with 429 (bodies up to [`crate::body_budget::SMALL_BODY_BYTES`] always pass).
    pub max_inflight_body_bytes: usize,
}

impl Default for ClientLimits {
    fn default() -> Self {
        ClientLimits {
            header_timeout: Duration::from_millis(DEFAULT_CLIENT_HEADER_TIMEOUT_MS),
            body_timeout: Duration::from_millis(DEFAULT_CLIENT_BODY_TIMEOUT_MS),
            max_connections: default_max_connections(),
            max_inflight_body_bytes: DEFAULT_MAX_INFLIGHT_BODY_BYTES,
        }
    }
}

/// Half of what `RLIMIT_NOFILE` leaves after [`RESERVED_DESCRIPTORS`] (each proxied request
/// also needs an upstream connection), at least 16: 384 under a 1,024 limit.
pub fn default_max_connections() -> usize {
    let soft = nofile_limit().unwrap_or(1024);
    (soft.saturating_sub(RESERVED_DESCRIPTORS) / 2).max(16) as usize
}

/// The soft `RLIMIT_NOFILE`; `None` where it cannot be read.
pub fn nofile_limit() -> Option<u64> {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit into the struct it is given.
    let ok = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) } == 0;
    ok.then_some(r.rlim_cur)
}

/// Raises the soft `RLIMIT_NOFILE` to the hard limit (as Go's runtime does for llm-d's
/// router), and returns the soft limit in force afterwards.
pub fn raise_nofile_limit() -> Option<u64> {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit read and write one rlimit struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) != 0 {
            return None;
        }
        if r.rlim_cur < r.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: r.rlim_max,
                rlim_max: r.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                r.rlim_cur = r.rlim_max;
            }
        }
    }
    Some(r.rlim_cur)
}

/// The flags of [`ClientLimits`] (flattened into `pdgate serve`).
#[derive(Debug, Clone, clap::Args)]
pub struct ClientLimitsArgs {
    /// Time for a client to send a request's headers, ms, counted from accept or from the
    /// end of the previous response (so idle keep-alive connections close after it too).
    #[arg(long, default_value_t = DEFAULT_CLIENT_HEADER_TIMEOUT_MS,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub client_header_timeout_ms: u64,
    /// Time for a client to send a whole request body once its headers are in, ms; later →
    /// 408 and the connection closed.
    #[arg(long, default_value_t = DEFAULT_CLIENT_BODY_TIMEOUT_MS,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub client_body_timeout_ms: u64,
    /// Client connections open at once (all threads); more are answered 503 and closed.
    /// Default: half of RLIMIT_NOFILE less 256, after raising the soft limit to the hard one.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_client_connections: Option<u64>,
    /// Bytes of request bodies held at once; a body over 64 KiB that would pass it → 429.
    /// Default 341 MiB: each body byte takes about 3 bytes of router memory, so bodies stay
    /// under 1 GiB of memory.
    #[arg(long, default_value_t = DEFAULT_MAX_INFLIGHT_BODY_BYTES)]
    pub max_inflight_body_bytes: usize,
}

impl ClientLimitsArgs {
    /// The limits these flags give.
    pub fn limits(&self) -> ClientLimits {
        ClientLimits {
            header_timeout: Duration::from_millis(self.client_header_timeout_ms),
            body_timeout: Duration::from_millis(self.client_body_timeout_ms),
            max_connections: self
                .max_client_connections
                .map_or_else(default_max_connections, |n| n as usize),
            max_inflight_body_bytes: self.max_inflight_body_bytes,
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
        limits: ClientLimitsArgs,
    }

    #[test]
    fn flags_default_to_the_struct_defaults() {
        let cli = Cli::parse_from(["x"]);
        assert_eq!(cli.limits.limits(), ClientLimits::default());
        let cli = Cli::parse_from([
            "x",
            "--client-header-timeout-ms",
            "500",
            "--max-client-connections",
            "7",
        ]);
        let l = cli.limits.limits();
        assert_eq!(l.header_timeout, Duration::from_millis(500));
        assert_eq!(l.max_connections, 7);
        assert!(Cli::try_parse_from(["x", "--client-body-timeout-ms", "0"]).is_err());
    }

    #[test]
    fn the_connection_default_leaves_room_for_upstreams() {
        assert!(nofile_limit().is_some());
        let soft = nofile_limit().unwrap();
        assert_eq!(
            default_max_connections() as u64,
            (soft.saturating_sub(256) / 2).max(16)
        );
    }
}
