//! The KV handoff between a prefill and a decode worker (vLLM NIXL contract, design.md §5.2),
//! over HTTP so it works across processes.
//!
//! The decode worker POSTs a [`PullRequest`] to `http://{remote_host}:{remote_port}/kv/pull`;
//! the prefill worker checks it against its leases and answers a [`PullGrant`] or a
//! [`Rejection`] (status, `ErrorBody`, and the reason label in `x-sim-kv-reject`). The decode
//! worker answers its client with the same status and `"kv_transfer_params rejected: " +
//! reason`.

use pdgate_api::{ErrorBody, KvTransferParams};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Path of the internal side channel.
pub const PULL_PATH: &str = "/kv/pull";
/// Response header naming the rejection reason of a pull.
pub const REJECT_HEADER: &str = "x-sim-kv-reject";
/// Prefix of every rejection message a decode client sees.
pub const REJECTED_PREFIX: &str = "kv_transfer_params rejected: ";

/// Body of `POST /kv/pull`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PullRequest {
    /// Engine id the decode was told to pull from (`remote_engine_id`).
    pub engine_id: String,
    /// Lease id (`remote_request_id`).
    pub request_id: String,
    /// Block ids (`remote_block_ids`); must match the lease when given.
    #[serde(default)]
    pub block_ids: Option<Vec<u64>>,
    /// The decode worker's revision; must equal the prefill worker's (both null is equal).
    pub revision: Option<String>,
    /// The decode request's prompt length; must equal the lease's.
    pub num_tokens: usize,
    /// Fingerprint of the decode request's prompt; when given, must equal the lease's (the
    /// same length is not the same prompt).
    #[serde(default)]
    pub prompt_fingerprint: Option<u64>,
    /// Leading prompt tokens the decode worker already holds (not transferred).
    #[serde(default)]
    pub skip_tokens: usize,
}

/// Answer to a successful pull: the lease is released.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PullGrant {
    /// Tokens whose KV was transferred (`num_tokens − skip_tokens`).
    pub transferred_tokens: usize,
    /// Prompt tokens the prefill had found in its own cache.
    pub cached_tokens: usize,
    /// Prompt length held by the lease.
    pub prompt_tokens: usize,
}

/// Why a handoff failed. Statuses: 400 malformed params; 404 unknown engine, unknown lease,
/// unreachable engine; 409 expired, consumed, other revision, prompt or block mismatch.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Rejection {
    /// `kv_transfer_params` lacks a field or has a bad value.
    #[error("{0}")]
    Malformed(String),
    /// The worker at the address is another engine.
    #[error("engine {asked} is not served at {addr} (engine {actual} is)")]
    UnknownEngine {
        /// Engine id in the params.
        asked: String,
        /// Address pulled from.
        addr: String,
        /// Engine id found there.
        actual: String,
    },
    /// No such lease, live or recently ended.
    #[error("engine {engine} holds no lease {lease}")]
    UnknownLease {
        /// Engine id.
        engine: String,
        /// Lease id.
        lease: String,
    },
    /// The lease's TTL ran out; its blocks were released.
    #[error("lease {lease} on engine {engine} expired")]
    Expired {
        /// Engine id.
        engine: String,
        /// Lease id.
        lease: String,
    },
    /// The lease was already pulled (single consumer).
    #[error("lease {lease} on engine {engine} was already consumed")]
    Consumed {
        /// Engine id.
        engine: String,
        /// Lease id.
        lease: String,
    },
    /// Prefill and decode belong to different revisions (incompatible KV formats).
    #[error("engine {engine} (revision {}) cannot hand KV to revision {}", show(.own), show(.asked))]
    RevisionMismatch {
        /// Prefill engine id.
        engine: String,
        /// Prefill worker's revision.
        own: Option<String>,
        /// Decode worker's revision.
        asked: Option<String>,
    },
    /// The decode's prompt is not the one the lease holds.
    #[error("lease {lease} holds another prompt ({held} tokens) than the decode request ({asked} tokens)")]
    PromptMismatch {
        /// Lease id.
        lease: String,
        /// Prompt tokens held.
        held: usize,
        /// Prompt tokens of the decode request.
        asked: usize,
    },
    /// `remote_block_ids` are not the lease's blocks.
    #[error("remote_block_ids do not match the blocks of lease {lease}")]
    BlockMismatch {
        /// Lease id.
        lease: String,
    },
    /// The pull itself failed (connect error, timeout, unexpected answer).
    #[error("engine {engine} at {addr} is unreachable: {error}")]
    Unreachable {
        /// Engine id.
        engine: String,
        /// Address pulled from.
        addr: String,
        /// Transport error.
        error: String,
    },
}

fn show(r: &Option<String>) -> &str {
    r.as_deref().unwrap_or("none")
}

impl Rejection {
    /// The HTTP status for this rejection.
    pub fn status(&self) -> u16 {
        match self {
            Rejection::Malformed(_) => 400,
            Rejection::UnknownEngine { .. }
            | Rejection::UnknownLease { .. }
            | Rejection::Unreachable { .. } => 404,
            Rejection::Expired { .. }
            | Rejection::Consumed { .. }
            | Rejection::RevisionMismatch { .. }
            | Rejection::PromptMismatch { .. }
            | Rejection::BlockMismatch { .. } => 409,
        }
    }

    /// Metric / stats label.
    pub fn label(&self) -> &'static str {
        match self {
            Rejection::Malformed(_) => "malformed",
            Rejection::UnknownEngine { .. } => "unknown_engine",
            Rejection::UnknownLease { .. } => "unknown_lease",
            Rejection::Expired { .. } => "expired",
            Rejection::Consumed { .. } => "consumed",
            Rejection::RevisionMismatch { .. } => "revision_mismatch",
            Rejection::PromptMismatch { .. } => "prompt_mismatch",
            Rejection::BlockMismatch { .. } => "block_mismatch",
            Rejection::Unreachable { .. } => "unreachable",
        }
    }
}

/// Where and what to pull, validated from a decode leg's `kv_transfer_params`.
#[derive(Debug, Clone, PartialEq)]
pub struct PullTarget {
    /// `remote_engine_id`
    pub engine_id: String,
    /// `remote_host:remote_port`
    pub addr: String,
    /// `remote_request_id`
    pub lease_id: String,
    /// `remote_block_ids`
    pub block_ids: Option<Vec<u64>>,
}

impl PullTarget {
    /// Reads the fields a pull needs; a missing one is [`Rejection::Malformed`] naming it.
    pub fn from_params(p: &KvTransferParams) -> Result<Self, Rejection> {
        let missing =
            |f: &str| Rejection::Malformed(format!("kv_transfer_params.{f} is missing or null"));
        let engine_id = p
            .remote_engine_id
            .clone()
            .filter(|s| !s.is_empty())
            .ok_or_else(|| missing("remote_engine_id"))?;
        let host = p
            .remote_host
            .clone()
            .filter(|s| !s.is_empty())
            .ok_or_else(|| missing("remote_host"))?;
        let port = p.remote_port.ok_or_else(|| missing("remote_port"))?;
        let lease_id = p
            .remote_request_id
            .clone()
            .filter(|s| !s.is_empty())
            .ok_or_else(|| missing("remote_request_id"))?;
        let addr = join_host_port(&host, port);
        Ok(PullTarget {
            engine_id,
            addr,
            lease_id,
            block_ids: p.remote_block_ids.clone(),
        })
    }
}

/// A failed handoff as the decode worker reports it: status, label and reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HandoffFailure {
    /// HTTP status answered to the decode client.
    pub status: u16,
    /// Metric / stats label (see [`Rejection::label`]).
    pub label: &'static str,
    /// Why, without the [`REJECTED_PREFIX`].
    pub reason: String,
}

impl HandoffFailure {
    /// The message the decode client sees.
    pub fn message(&self) -> String {
        format!("{REJECTED_PREFIX}{}", self.reason)
    }
}

impl From<Rejection> for HandoffFailure {
    fn from(r: Rejection) -> Self {
        HandoffFailure {
            status: r.status(),
            label: r.label(),
            reason: r.to_string(),
        }
    }
}

const LABELS: &[&str] = &[
    "malformed",
    "unknown_engine",
    "unknown_lease",
    "expired",
    "consumed",
    "revision_mismatch",
    "prompt_mismatch",
    "block_mismatch",
    "unreachable",
];

/// Pulls the lease named by `target`; `revision` is the decode worker's.
pub async fn pull(
    client: &reqwest::Client,
    target: &PullTarget,
    revision: Option<String>,
    num_tokens: usize,
    prompt_fingerprint: u64,
    skip_tokens: usize,
) -> Result<PullGrant, HandoffFailure> {
    let unreachable = |error: String| -> HandoffFailure {
        Rejection::Unreachable {
            engine: target.engine_id.clone(),
            addr: target.addr.clone(),
            error,
        }
        .into()
    };
    let body = PullRequest {
        engine_id: target.engine_id.clone(),
        request_id: target.lease_id.clone(),
        block_ids: target.block_ids.clone(),
        revision,
        num_tokens,
        prompt_fingerprint: Some(prompt_fingerprint),
        skip_tokens,
    };
    let resp = client
        .post(format!("http://{}{}", target.addr, PULL_PATH))
        .timeout(Duration::from_secs(10))
        .json(&body)
        .send()
        .await
        .map_err(|e| unreachable(error_chain(&e)))?;
    let status = resp.status();
    let label = resp
        .headers()
        .get(REJECT_HEADER)
        .and_then(|v| v.to_str().ok())
        .and_then(|l| LABELS.iter().find(|k| **k == l).copied());
    let bytes = resp
        .bytes()
        .await
        .map_err(|e| unreachable(error_chain(&e)))?;
    if status.is_success() {
        return serde_json::from_slice(&bytes)
            .map_err(|e| unreachable(format!("unexpected pull answer: {e}")));
    }
    let message = serde_json::from_slice::<ErrorBody>(&bytes)
        .map(|b| b.error.message)
        .unwrap_or_else(|_| String::from_utf8_lossy(&bytes).into_owned());
    match label {
        // A simulator answered: relay its status and reason.
        Some(label) if status.is_client_error() => Err(HandoffFailure {
            status: status.as_u16(),
            label,
            reason: message,
        }),
        _ => Err(unreachable(format!("pull answered {status}: {message}"))),
    }
}

/// `host:port`, with an IPv6 host in brackets.
pub(crate) fn join_host_port(host: &str, port: u16) -> String {
    if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// An error and its sources, `: `-separated.
pub(crate) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(inner) = src {
        s.push_str(": ");
        s.push_str(&inner.to_string());
        src = inner.source();
    }
    s
}
