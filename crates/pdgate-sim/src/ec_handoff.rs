//! The encoder-output handoff between an encode worker and a prefill (or aggregated) worker
//! (encoder disaggregation, vLLM "EPD"), over HTTP like the KV handoff ([`crate::handoff`]).
//!
//! An encode worker answers one `ec_transfer_params` entry per media item
//! ([`pdgate_api::media::EcTransferEntry`]); the prefill worker POSTs an [`EcPullRequest`] per
//! entry to `http://{remote_host}:{remote_port}/ec/pull`; the encoder checks it against its
//! encoder-cache leases and answers an [`EcPullGrant`] or an [`EcRejection`] (status,
//! `ErrorBody`, and the reason label in `x-sim-ec-reject`). The prefill worker answers its
//! client with the same status and `"ec_transfer_params rejected: " + reason`.

use crate::handoff::{error_chain, join_host_port};
use pdgate_api::media::{EcTransferEntry, MediaKind};
use pdgate_api::ErrorBody;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::time::Duration;

/// Path of the encoder's side channel.
pub const EC_PULL_PATH: &str = "/ec/pull";
/// Response header naming the rejection reason of an encoder pull.
pub const EC_REJECT_HEADER: &str = "x-sim-ec-reject";
/// Prefix of every rejection message a prefill client sees.
pub const EC_REJECTED_PREFIX: &str = "ec_transfer_params rejected: ";

/// Body of `POST /ec/pull`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EcPullRequest {
    /// Engine id the prefill was told to pull from (`encoder_engine_id`).
    pub engine_id: String,
    /// Lease id (`lease_id`).
    pub lease_id: String,
    /// Content hash the prefill expects (`mm_hash`); must be the lease's.
    pub mm_hash: String,
    /// The puller's revision; must equal the encoder's (both null is equal).
    pub revision: Option<String>,
}

/// Answer to a successful encoder pull: the lease is released.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EcPullGrant {
    /// Content hash of the transferred item.
    pub mm_hash: String,
    /// Image, audio or video.
    pub kind: MediaKind,
}

/// Why an encoder handoff failed. Statuses: 400 malformed params, missing entry, hash
/// mismatch; 404 unknown engine, unknown lease, unreachable encoder; 409 expired, consumed,
/// other revision.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EcRejection {
    /// `ec_transfer_params` is not an array of complete entries, or an entry matches no item.
    #[error("{0}")]
    Malformed(String),
    /// A media item of the request has no entry with its hash.
    #[error("no entry for mm_hash {hash} (media item {index})")]
    MissingEntry {
        /// The item's content hash.
        hash: String,
        /// The item's index among the request's media items.
        index: usize,
    },
    /// The worker at the address is another engine.
    #[error("engine {asked} is not served at {addr} (engine {actual} is)")]
    UnknownEngine {
        /// Engine id in the entry.
        asked: String,
        /// Address pulled from.
        addr: String,
        /// Engine id found there.
        actual: String,
    },
    /// No such lease, live or recently ended.
    #[error("engine {engine} holds no lease {lease}")]
    UnknownLease {
        /// Encoder engine id.
        engine: String,
        /// Lease id.
        lease: String,
    },
    /// The lease's TTL ran out.
    #[error("lease {lease} on engine {engine} expired")]
    Expired {
        /// Encoder engine id.
        engine: String,
        /// Lease id.
        lease: String,
    },
    /// The lease was already pulled (single consumer).
    #[error("lease {lease} on engine {engine} was already consumed")]
    Consumed {
        /// Encoder engine id.
        engine: String,
        /// Lease id.
        lease: String,
    },
    /// Encoder and puller belong to different revisions (incompatible embeddings).
    #[error("engine {engine} (revision {}) cannot hand encoder output to revision {}", show(.own), show(.asked))]
    RevisionMismatch {
        /// Encoder engine id.
        engine: String,
        /// Encoder's revision.
        own: Option<String>,
        /// Puller's revision.
        asked: Option<String>,
    },
    /// The lease holds another item than the entry names.
    #[error("lease {lease} holds mm_hash {held}, not {asked}")]
    HashMismatch {
        /// Lease id.
        lease: String,
        /// Hash the lease holds.
        held: String,
        /// Hash in the pull.
        asked: String,
    },
    /// The pull itself failed (connect error, timeout, unexpected answer).
    #[error("engine {engine} at {addr} is unreachable: {error}")]
    Unreachable {
        /// Encoder engine id.
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

impl EcRejection {
    /// The HTTP status for this rejection.
    pub fn status(&self) -> u16 {
        match self {
            EcRejection::Malformed(_)
            | EcRejection::MissingEntry { .. }
            | EcRejection::HashMismatch { .. } => 400,
            EcRejection::UnknownEngine { .. }
            | EcRejection::UnknownLease { .. }
            | EcRejection::Unreachable { .. } => 404,
            EcRejection::Expired { .. }
            | EcRejection::Consumed { .. }
            | EcRejection::RevisionMismatch { .. } => 409,
        }
    }

    /// Metric / stats label.
    pub fn label(&self) -> &'static str {
        match self {
            EcRejection::Malformed(_) => "malformed",
            EcRejection::MissingEntry { .. } => "missing_entry",
            EcRejection::UnknownEngine { .. } => "unknown_engine",
            EcRejection::UnknownLease { .. } => "unknown_lease",
            EcRejection::Expired { .. } => "expired",
            EcRejection::Consumed { .. } => "consumed",
            EcRejection::RevisionMismatch { .. } => "revision_mismatch",
            EcRejection::HashMismatch { .. } => "hash_mismatch",
            EcRejection::Unreachable { .. } => "unreachable",
        }
    }
}

const LABELS: &[&str] = &[
    "malformed",
    "missing_entry",
    "unknown_engine",
    "unknown_lease",
    "expired",
    "consumed",
    "revision_mismatch",
    "hash_mismatch",
    "unreachable",
];

/// A failed encoder handoff as the prefill worker reports it: status, label and reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EcFailure {
    /// HTTP status answered to the prefill client.
    pub status: u16,
    /// Metric / stats label (see [`EcRejection::label`]).
    pub label: &'static str,
    /// Why, without the [`EC_REJECTED_PREFIX`].
    pub reason: String,
}

impl EcFailure {
    /// The message the prefill client sees.
    pub fn message(&self) -> String {
        format!("{EC_REJECTED_PREFIX}{}", self.reason)
    }
}

impl From<EcRejection> for EcFailure {
    fn from(r: EcRejection) -> Self {
        EcFailure {
            status: r.status(),
            label: r.label(),
            reason: r.to_string(),
        }
    }
}

/// Reads `ec_transfer_params` (an array of entries); a missing field is
/// [`EcRejection::Malformed`] naming it, e.g. `ec_transfer_params[1].remote_port is missing or
/// null`.
pub fn parse_entries(v: &Value) -> Result<Vec<EcTransferEntry>, EcRejection> {
    const FIELDS: &[&str] = &[
        "mm_hash",
        "encoder_engine_id",
        "lease_id",
        "remote_host",
        "remote_port",
    ];
    let Some(items) = v.as_array() else {
        return Err(EcRejection::Malformed(
            "ec_transfer_params must be an array of objects".into(),
        ));
    };
    let mut out = Vec::with_capacity(items.len());
    for (i, e) in items.iter().enumerate() {
        if !e.is_object() {
            return Err(EcRejection::Malformed(format!(
                "ec_transfer_params[{i}] must be an object"
            )));
        }
        for f in FIELDS {
            if e.get(*f).is_none_or(|x| x.is_null() || x == "") {
                return Err(EcRejection::Malformed(format!(
                    "ec_transfer_params[{i}].{f} is missing or null"
                )));
            }
        }
        let entry = serde_json::from_value::<EcTransferEntry>(e.clone()).map_err(|err| {
            EcRejection::Malformed(format!("ec_transfer_params[{i}] is invalid: {err}"))
        })?;
        out.push(entry);
    }
    Ok(out)
}

/// Pulls the item named by `entry`; `revision` is the puller's.
pub async fn pull(
    client: &reqwest::Client,
    entry: &EcTransferEntry,
    revision: Option<String>,
) -> Result<EcPullGrant, EcFailure> {
    let addr = join_host_port(&entry.remote_host, entry.remote_port);
    let unreachable = |error: String| -> EcFailure {
        EcRejection::Unreachable {
            engine: entry.encoder_engine_id.clone(),
            addr: addr.clone(),
            error,
        }
        .into()
    };
    let body = EcPullRequest {
        engine_id: entry.encoder_engine_id.clone(),
        lease_id: entry.lease_id.clone(),
        mm_hash: entry.mm_hash.clone(),
        revision,
    };
    let resp = client
        .post(format!("http://{addr}{EC_PULL_PATH}"))
        .timeout(Duration::from_secs(10))
        .json(&body)
        .send()
        .await
        .map_err(|e| unreachable(error_chain(&e)))?;
    let status = resp.status();
    let label = resp
        .headers()
        .get(EC_REJECT_HEADER)
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
        Some(label) if status.is_client_error() => Err(EcFailure {
            status: status.as_u16(),
            label,
            reason: message,
        }),
        _ => Err(unreachable(format!("pull answered {status}: {message}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn entries_name_the_missing_field() {
        let ok = json!({"mm_hash": "h", "encoder_engine_id": "e", "lease_id": "l",
                        "remote_host": "127.0.0.1", "remote_port": 1});
        assert_eq!(parse_entries(&json!([ok])).unwrap()[0].lease_id, "l");
        let mut bad = ok.clone();
        bad["remote_port"] = Value::Null;
        let e = |v: Value| parse_entries(&v).unwrap_err().to_string();
        assert_eq!(
            e(json!([ok, bad])),
            "ec_transfer_params[1].remote_port is missing or null"
        );
        assert_eq!(
            e(json!({"mm_hash": "h"})),
            "ec_transfer_params must be an array of objects"
        );
        let mut bad = ok.clone();
        bad["remote_port"] = json!("x");
        assert!(e(json!([bad])).starts_with("ec_transfer_params[0] is invalid: "));
        assert_eq!(
            EcRejection::RevisionMismatch {
                engine: "enc".into(),
                own: None,
                asked: Some("b".into())
            }
            .to_string(),
            "engine enc (revision none) cannot hand encoder output to revision b"
        );
    }
}
