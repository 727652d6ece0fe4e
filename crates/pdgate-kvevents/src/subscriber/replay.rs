//! Fetching missed batches from vLLM's replay socket (a ROUTER): a DEALER sends
//! `["", start_seq (8-byte big-endian)]`; the replies are `["", seq, payload]` for every
//! buffered message from `start_seq`, then `["", -1, ""]` (an empty payload ends it).
//! Source: `ZmqEventPublisher._service_replay` in `vllm/distributed/kv_events.py`.
//!
//! A reply of a missed seq larger than [`SubscriberConfig::max_message_bytes`] is dropped
//! undecoded and counted, as on the SUB socket (only its 8-byte seq frame is read first, to
//! leave replies outside the range alone): a gap's replay ([`Need::All`]) fails at once;
//! a history replay ([`Need::Tail`]) forgets the batches before it (they no longer end in a
//! contiguous run) and goes on.

use super::{message_bytes, SubscriberConfig};
use crate::log_limit::LogLimit;
use crate::metrics::KvEventMetrics;
use crate::wire;
use bytes::Bytes;
use pdgate_api::kv_events::EventBatch;
use std::ops::Range;
use std::time::Duration;
use zeromq::{DealerSocket, Socket, SocketRecv, SocketSend, ZmqMessage};

/// Why a replay did not deliver the missed batches.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ReplayError {
    #[error("timed out after {0:?}")]
    Timeout(Duration),
    #[error("zmq: {0}")]
    Zmq(#[from] zeromq::ZmqError),
    #[error("reply is not [\"\", seq, payload] ({0} frames)")]
    Shape(usize),
    #[error("reply: {0}")]
    Wire(#[from] wire::WireError),
    #[error("incomplete: got {got} of the {wanted} missed batches (the engine's buffer no longer holds them)")]
    Incomplete { got: usize, wanted: usize },
    #[error(
        "the reply of seq {seq} is {bytes} bytes, over the {cap}-byte cap (dropped undecoded)"
    )]
    Oversize { seq: u64, bytes: usize, cap: usize },
}

/// How much of the asked range a replay must deliver.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Need {
    /// Every seq of the range (a gap: anything less leaves a hole in the index).
    All,
    /// A contiguous run ending at the range's last seq, starting wherever the engine's
    /// buffer starts (a warm start: blocks whose parents precede the run are orphans,
    /// skipped, so a partial history is still exact).
    Tail,
}

/// The batches of `missing` (in order, as `need` requires) from the replay socket at
/// `addr`, within `config.replay_timeout`, each reply at most `config.max_message_bytes`.
/// `oversize_warn` rate-limits the warning of an over-size reply a history replay skips.
pub(crate) async fn fetch(
    addr: &str,
    missing: Range<u64>,
    need: Need,
    config: &SubscriberConfig,
    metrics: &KvEventMetrics,
    oversize_warn: &mut LogLimit,
) -> Result<Vec<EventBatch>, ReplayError> {
    let deadline = config.replay_timeout;
    let exchange = exchange(addr, missing, need, config, metrics, oversize_warn);
    tokio::time::timeout(deadline, exchange)
        .await
        .map_err(|_| ReplayError::Timeout(deadline))?
}

async fn exchange(
    addr: &str,
    missing: Range<u64>,
    need: Need,
    config: &SubscriberConfig,
    metrics: &KvEventMetrics,
    oversize_warn: &mut LogLimit,
) -> Result<Vec<EventBatch>, ReplayError> {
    let mut dealer = DealerSocket::new();
    dealer.connect(addr).await?;
    let request = vec![
        Bytes::new(),
        Bytes::copy_from_slice(&wire::seq_bytes(missing.start)),
    ];
    dealer
        .send(ZmqMessage::try_from(request).map_err(|_| ReplayError::Shape(0))?)
        .await?;
    let mut out = Vec::new();
    loop {
        let reply = dealer.recv().await?;
        let frames: Vec<&[u8]> = reply.iter().map(|f| f.as_ref()).collect();
        let [_, seq, payload] = frames.as_slice() else {
            return Err(ReplayError::Shape(frames.len()));
        };
        if payload.is_empty() {
            break;
        }
        let seq = wire::parse_seq(seq)?;
        // Messages past the gap arrive (or arrived) live; before it we already have.
        if !missing.contains(&seq) {
            continue;
        }
        let bytes = message_bytes(&reply);
        let cap = config.max_message_bytes;
        if bytes > cap {
            drop(frames);
            drop(reply);
            KvEventMetrics::inc(&metrics.pdgate_kv_events_oversize_dropped_total);
            match need {
                Need::All => return Err(ReplayError::Oversize { seq, bytes, cap }),
                Need::Tail => {
                    if let Some(n) = oversize_warn.allow() {
                        let endpoint = config.endpoint.as_str();
                        tracing::warn!(endpoint, seq, bytes, cap, suppressed = n, "kv-events: replay reply over the size cap dropped undecoded; the history starts after it");
                    }
                    out.clear();
                    continue;
                }
            }
        }
        let decoded = wire::decode_payload(seq, payload)?;
        KvEventMetrics::add(
            &metrics.pdgate_kv_events_unknown_events_total,
            u64::from(decoded.unknown_events),
        );
        out.push(decoded.batch);
    }
    let wanted = (missing.end - missing.start) as usize;
    let first = match need {
        Need::All => missing.start,
        Need::Tail => missing.end - out.len() as u64,
    };
    let contiguous = out.iter().zip(first..).all(|(b, seq)| b.seq == seq);
    let enough = match need {
        Need::All => out.len() == wanted,
        Need::Tail => true,
    };
    if !enough || !contiguous {
        return Err(ReplayError::Incomplete {
            got: out.len(),
            wanted,
        });
    }
    Ok(out)
}
