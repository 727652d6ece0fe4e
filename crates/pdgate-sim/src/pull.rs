//! What the two pull side channels share: the KV handoff ([`crate::handoff`], `/kv/pull`) and
//! the encoder-output handoff ([`crate::ec_handoff`], `/ec/pull`) work alike.
//!
//! The puller POSTs a [`Pull`] body to the holder ([`send`]); the holder checks it against its
//! leases and answers the grant, or a [`PullRejection`] as its status, an `ErrorBody` and the
//! reason label in the channel's reject header. The puller relays the holder's refusal, or
//! reports its own transport failure, as a [`Failure`]: that status and the channel's
//! `"… rejected: " + reason`. What differs stays with each channel: paths, headers, body
//! fields, and the refusals only it has ([`Refusal`]).

use pdgate_api::ErrorBody;
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::fmt::{Debug, Display};
use std::marker::PhantomData;
use std::time::Duration;

/// A side channel's pull body, and the contract that comes with it.
pub trait Pull: Serialize + DeserializeOwned {
    /// Path of the side channel.
    const PATH: &'static str;
    /// Response header naming the rejection reason of a pull.
    const REJECT_HEADER: &'static str;
    /// Answer to a successful pull.
    type Grant: Serialize + DeserializeOwned;
    /// The refusals only this channel has.
    type Refusal: Refusal;
    /// The engine, lease and revision the pull names.
    fn claim(&self) -> Claim<'_>;
}

/// What a pull names; the holder checks it in this order.
#[derive(Debug, Clone, Copy)]
pub struct Claim<'a> {
    /// Engine id the puller was told to pull from.
    pub engine_id: &'a str,
    /// Lease id.
    pub lease_id: &'a str,
    /// The puller's revision; must equal the holder's (both null is equal).
    pub revision: &'a Option<String>,
}

/// The refusals only one side channel has, and the wording of its other rejections.
pub trait Refusal: Display + Debug + Clone + PartialEq + Eq {
    /// What the channel hands over, as a revision mismatch names it.
    const HANDS: &'static str;
    /// Prefix of every rejection message the puller's client sees.
    const REJECTED_PREFIX: &'static str;
    /// Labels of this channel's own refusals.
    const LABELS: &'static [&'static str];
    /// The HTTP status for this refusal.
    fn status(&self) -> u16;
    /// Metric / stats label.
    fn label(&self) -> &'static str;
}

/// Why a pull failed. Statuses: 400 malformed params; 404 unknown engine, unknown lease,
/// unreachable engine; 409 expired, consumed, other revision; the channel's own refusals
/// have theirs ([`Refusal::status`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PullRejection<R: Refusal> {
    /// The transfer params lack a field, have a bad value, or do not fit the request.
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
        /// Holder's engine id.
        engine: String,
        /// Lease id.
        lease: String,
    },
    /// The lease's TTL ran out.
    #[error("lease {lease} on engine {engine} expired")]
    Expired {
        /// Holder's engine id.
        engine: String,
        /// Lease id.
        lease: String,
    },
    /// The lease was already pulled (single consumer).
    #[error("lease {lease} on engine {engine} was already consumed")]
    Consumed {
        /// Holder's engine id.
        engine: String,
        /// Lease id.
        lease: String,
    },
    /// Holder and puller belong to different revisions (incompatible formats).
    #[error("engine {engine} (revision {}) cannot hand {} to revision {}", show(.own), R::HANDS, show(.asked))]
    RevisionMismatch {
        /// Holder's engine id.
        engine: String,
        /// Holder's revision.
        own: Option<String>,
        /// Puller's revision.
        asked: Option<String>,
    },
    /// A refusal only this channel has.
    #[error("{0}")]
    Channel(R),
    /// The pull itself failed (connect error, timeout, unexpected answer).
    #[error("engine {engine} at {addr} is unreachable: {error}")]
    Unreachable {
        /// Holder's engine id.
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

/// Labels of the rejections every channel has.
const LABELS: &[&str] = &[
    "malformed",
    "unknown_engine",
    "unknown_lease",
    "expired",
    "consumed",
    "revision_mismatch",
    "unreachable",
];

impl<R: Refusal> PullRejection<R> {
    /// The HTTP status for this rejection.
    pub fn status(&self) -> u16 {
        match self {
            PullRejection::Malformed(_) => 400,
            PullRejection::UnknownEngine { .. }
            | PullRejection::UnknownLease { .. }
            | PullRejection::Unreachable { .. } => 404,
            PullRejection::Expired { .. }
            | PullRejection::Consumed { .. }
            | PullRejection::RevisionMismatch { .. } => 409,
            PullRejection::Channel(r) => r.status(),
        }
    }

    /// Metric / stats label.
    pub fn label(&self) -> &'static str {
        match self {
            PullRejection::Malformed(_) => "malformed",
            PullRejection::UnknownEngine { .. } => "unknown_engine",
            PullRejection::UnknownLease { .. } => "unknown_lease",
            PullRejection::Expired { .. } => "expired",
            PullRejection::Consumed { .. } => "consumed",
            PullRejection::RevisionMismatch { .. } => "revision_mismatch",
            PullRejection::Channel(r) => r.label(),
            PullRejection::Unreachable { .. } => "unreachable",
        }
    }
}

impl<R: Refusal> From<R> for PullRejection<R> {
    fn from(r: R) -> Self {
        PullRejection::Channel(r)
    }
}

/// A failed pull as the puller reports it: status, label and reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure<R> {
    /// HTTP status answered to the puller's client.
    pub status: u16,
    /// Metric / stats label (see [`PullRejection::label`]).
    pub label: &'static str,
    /// Why, without the channel's [`Refusal::REJECTED_PREFIX`].
    pub reason: String,
    channel: PhantomData<R>,
}

impl<R: Refusal> Failure<R> {
    /// The message the puller's client sees.
    pub fn message(&self) -> String {
        format!("{}{}", R::REJECTED_PREFIX, self.reason)
    }
}

impl<R: Refusal> From<PullRejection<R>> for Failure<R> {
    fn from(r: PullRejection<R>) -> Self {
        Failure {
            status: r.status(),
            label: r.label(),
            reason: r.to_string(),
            channel: PhantomData,
        }
    }
}

/// POSTs `body` to the holder at `addr` (`host:port`). A refusal the holder labels is relayed
/// with its status and reason; any other answer or error is [`PullRejection::Unreachable`].
pub async fn send<P: Pull>(
    client: &reqwest::Client,
    addr: &str,
    body: &P,
) -> Result<P::Grant, Failure<P::Refusal>> {
    let unreachable = |error: String| -> Failure<P::Refusal> {
        PullRejection::Unreachable {
            engine: body.claim().engine_id.to_string(),
            addr: addr.to_string(),
            error,
        }
        .into()
    };
    let resp = client
        .post(format!("http://{addr}{}", P::PATH))
        .timeout(Duration::from_secs(10))
        .json(body)
        .send()
        .await
        .map_err(|e| unreachable(error_chain(&e)))?;
    let status = resp.status();
    let label = resp
        .headers()
        .get(P::REJECT_HEADER)
        .and_then(|v| v.to_str().ok())
        .and_then(|l| {
            LABELS
                .iter()
                .chain(P::Refusal::LABELS)
                .find(|k| **k == l)
                .copied()
        });
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
        Some(label) if status.is_client_error() => Err(Failure {
            status: status.as_u16(),
            label,
            reason: message,
            channel: PhantomData,
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
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(inner) = src {
        s.push_str(": ");
        s.push_str(&inner.to_string());
        src = inner.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use crate::ec_handoff::{EcFailure, EcRefusal, EcRejection};
    use crate::handoff::{HandoffFailure, KvRefusal, Rejection};

    #[test]
    fn each_channel_keeps_its_statuses_labels_and_wording() {
        let lease = || "l".to_string();
        let kv: Rejection = KvRefusal::BlockMismatch { lease: lease() }.into();
        let ec: EcRejection = EcRefusal::MissingEntry {
            hash: "h".into(),
            index: 1,
        }
        .into();
        assert_eq!((kv.status(), kv.label()), (409, "block_mismatch"));
        assert_eq!((ec.status(), ec.label()), (400, "missing_entry"));
        let expired = Rejection::Expired {
            engine: "p".into(),
            lease: lease(),
        };
        assert_eq!((expired.status(), expired.label()), (409, "expired"));
        let f = HandoffFailure::from(expired);
        assert_eq!(
            f.message(),
            "kv_transfer_params rejected: lease l on engine p expired"
        );
        let f = EcFailure::from(ec);
        assert_eq!(
            f.message(),
            "ec_transfer_params rejected: no entry for mm_hash h (media item 1)"
        );
        let revision = Rejection::RevisionMismatch {
            engine: "p".into(),
            own: Some("a".into()),
            asked: None,
        };
        assert_eq!(
            revision.to_string(),
            "engine p (revision a) cannot hand KV to revision none"
        );
    }
}
