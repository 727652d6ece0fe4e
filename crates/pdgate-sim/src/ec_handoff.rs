//! The encoder-output handoff between an encode worker and a prefill (or aggregated) worker
//! (encoder disaggregation, vLLM "EPD"), over HTTP like the KV handoff ([`crate::handoff`]).
//!
//! An encode worker answers one `ec_transfer_params` entry per media item
//! ([`pdgate_api::media::EcTransferEntry`]); the prefill worker POSTs an [`EcPullRequest`] per
//! entry to `http://{remote_host}:{remote_port}/ec/pull`; the encoder checks it against its
//! encoder-cache leases and answers an [`EcPullGrant`] or an [`EcRejection`] (status,
//! `ErrorBody`, and the reason label in `x-sim-ec-reject`). The prefill worker answers its
//! client with the same status and `"ec_transfer_params rejected: " + reason`. The mechanics it
//! shares with the KV handoff are in [`crate::pull`].

use crate::pull::{join_host_port, send, Claim, Failure, Pull, PullRejection, Refusal};
use pdgate_api::media::{EcTransferEntry, MediaKind};
use serde::{Deserialize, Serialize};
use serde_json::Value;

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
pub type EcRejection = PullRejection<EcRefusal>;

/// The refusals only the encoder handoff has.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EcRefusal {
    /// A media item of the request has no entry with its hash.
    #[error("no entry for mm_hash {hash} (media item {index})")]
    MissingEntry {
        /// The item's content hash.
        hash: String,
        /// The item's index among the request's media items.
        index: usize,
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
}

impl Refusal for EcRefusal {
    const HANDS: &'static str = "encoder output";
    const REJECTED_PREFIX: &'static str = EC_REJECTED_PREFIX;
    const LABELS: &'static [&'static str] = &["missing_entry", "hash_mismatch"];

    fn status(&self) -> u16 {
        400
    }

    fn label(&self) -> &'static str {
        match self {
            EcRefusal::MissingEntry { .. } => "missing_entry",
            EcRefusal::HashMismatch { .. } => "hash_mismatch",
        }
    }
}

/// A failed encoder handoff as the prefill worker reports it: status, label and reason (the
/// client sees [`EC_REJECTED_PREFIX`] + reason).
pub type EcFailure = Failure<EcRefusal>;

impl Pull for EcPullRequest {
    const PATH: &'static str = EC_PULL_PATH;
    const REJECT_HEADER: &'static str = EC_REJECT_HEADER;
    type Grant = EcPullGrant;
    type Refusal = EcRefusal;

    fn claim(&self) -> Claim<'_> {
        Claim {
            engine_id: &self.engine_id,
            lease_id: &self.lease_id,
            revision: &self.revision,
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
    let body = EcPullRequest {
        engine_id: entry.encoder_engine_id.clone(),
        lease_id: entry.lease_id.clone(),
        mm_hash: entry.mm_hash.clone(),
        revision,
    };
    let addr = join_host_port(&entry.remote_host, entry.remote_port);
    send(client, &addr, &body).await
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
