//! The KV handoff between a prefill and a decode worker (vLLM NIXL contract, design.md §5.2),
//! over HTTP so it works across processes.
//!
//! The decode worker POSTs a [`PullRequest`] to `http://{remote_host}:{remote_port}/kv/pull`;
//! the prefill worker checks it against its leases and answers a [`PullGrant`] or a
//! [`Rejection`] (status, `ErrorBody`, and the reason label in `x-sim-kv-reject`). The decode
//! worker answers its client with the same status and `"kv_transfer_params rejected: " +
//! reason`. The mechanics it shares with the encoder handoff are in [`crate::pull`].

use crate::pull::{join_host_port, send, Claim, Failure, Pull, PullRejection, Refusal};
use pdgate_api::KvTransferParams;
use serde::{Deserialize, Serialize};

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
pub type Rejection = PullRejection<KvRefusal>;

/// The refusals only the KV handoff has.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KvRefusal {
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
}

impl Refusal for KvRefusal {
    const HANDS: &'static str = "KV";
    const REJECTED_PREFIX: &'static str = REJECTED_PREFIX;
    const LABELS: &'static [&'static str] = &["prompt_mismatch", "block_mismatch"];

    fn status(&self) -> u16 {
        409
    }

    fn label(&self) -> &'static str {
        match self {
            KvRefusal::PromptMismatch { .. } => "prompt_mismatch",
            KvRefusal::BlockMismatch { .. } => "block_mismatch",
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

/// A failed handoff as the decode worker reports it: status, label and reason (the client sees
/// [`REJECTED_PREFIX`] + reason).
pub type HandoffFailure = Failure<KvRefusal>;

impl Pull for PullRequest {
    const PATH: &'static str = PULL_PATH;
    const REJECT_HEADER: &'static str = REJECT_HEADER;
    type Grant = PullGrant;
    type Refusal = KvRefusal;

    fn claim(&self) -> Claim<'_> {
        Claim {
            engine_id: &self.engine_id,
            lease_id: &self.request_id,
            revision: &self.revision,
        }
    }
}

/// Pulls the lease named by `target`; `revision` is the decode worker's.
pub async fn pull(
    client: &reqwest::Client,
    target: &PullTarget,
    revision: Option<String>,
    num_tokens: usize,
    prompt_fingerprint: u64,
    skip_tokens: usize,
) -> Result<PullGrant, HandoffFailure> {
    let body = PullRequest {
        engine_id: target.engine_id.clone(),
        request_id: target.lease_id.clone(),
        block_ids: target.block_ids.clone(),
        revision,
        num_tokens,
        prompt_fingerprint: Some(prompt_fingerprint),
        skip_tokens,
    };
    send(client, &target.addr, &body).await
}
