//! Fetching missed batches from vLLM's replay socket (a ROUTER): a DEALER sends
//! `["", start_seq (8-byte big-endian)]`; the replies are `["", seq, payload]` for every
//! buffered message from `start_seq`, then `["", -1, ""]` (an empty payload ends it).
//! Source: `ZmqEventPublisher._service_replay` in `vllm/distributed/kv_events.py`.

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
/// `addr`, within `deadline`.
pub(crate) async fn fetch(
    addr: &str,
    missing: Range<u64>,
    need: Need,
    deadline: Duration,
    metrics: &KvEventMetrics,
) -> Result<Vec<EventBatch>, ReplayError> {
    tokio::time::timeout(deadline, exchange(addr, missing, need, metrics))
        .await
        .map_err(|_| ReplayError::Timeout(deadline))?
}

async fn exchange(
    addr: &str,
    missing: Range<u64>,
    need: Need,
    metrics: &KvEventMetrics,
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
