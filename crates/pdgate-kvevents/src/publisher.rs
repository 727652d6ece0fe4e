//! The publishing side, as vLLM's `ZmqEventPublisher` (`vllm/distributed/kv_events.py`):
//! a PUB socket sending `[topic, seq, payload]` with seq +1 per message from 0, and an
//! optional ROUTER replay socket that keeps the last `buffer_steps` messages. A replay
//! request is `[identity, "", start_seq (8-byte big-endian)]` on the ROUTER (a DEALER sends
//! `["", start_seq]`); the answer is `["", seq, payload]` for every buffered message with
//! `seq >= start_seq`, in order, then the end marker `["", -1 as 8 bytes, ""]`.
//! Used by the simulator; the router never publishes.

use crate::wire::{self, Encoding};
use bytes::Bytes;
use pdgate_api::kv_events::{EventBatch, KvEvent};
use std::collections::VecDeque;
use std::time::{SystemTime, UNIX_EPOCH};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use zeromq::{PubSocket, RouterSocket, Socket, SocketRecv, SocketSend, ZmqMessage};

/// The seq frame that ends a replay: -1 as a signed 8-byte big-endian integer.
pub const REPLAY_END_SEQ: [u8; 8] = [0xff; 8];

/// Why a [`Publisher`] could not start.
#[derive(Debug, thiserror::Error)]
pub enum PublisherError {
    /// Binding a socket failed (bad address, port in use).
    #[error("cannot bind {addr}: {reason}")]
    Bind {
        /// The address as given.
        addr: String,
        /// The ZMQ error.
        reason: String,
    },
}

/// A running publisher: a task owning the PUB (and replay ROUTER) sockets, fed through an
/// unbounded channel so [`Publisher::publish`] never blocks. Dropping it stops the task and
/// closes the sockets.
pub struct Publisher {
    tx: mpsc::UnboundedSender<Vec<KvEvent>>,
    publish_port: u16,
    replay_port: Option<u16>,
    task: JoinHandle<()>,
}

impl Publisher {
    /// Binds the PUB socket on `publish` (`tcp://HOST:PORT`; `*` means every interface, as
    /// in vLLM's `tcp://*:5557`; port 0 picks a free port) and, when given, the replay
    /// ROUTER on `replay`. Events are written in `encoding`; the last `buffer_steps`
    /// messages (vLLM's default: 10,000) are kept for replay; `dp_rank` is written as the
    /// batch's third element when set. Needs a tokio runtime. Errors: an address that does
    /// not parse or cannot be bound.
    pub async fn bind(
        publish: &str,
        replay: Option<&str>,
        encoding: Encoding,
        buffer_steps: usize,
        dp_rank: Option<u32>,
    ) -> Result<Publisher, PublisherError> {
        let mut pub_socket = PubSocket::new();
        let publish_port = bind(&mut pub_socket, publish).await?;
        let (router, replay_port) = match replay {
            Some(addr) => {
                let mut router = RouterSocket::new();
                let port = bind(&mut router, addr).await?;
                (Some(router), Some(port))
            }
            None => (None, None),
        };
        let (tx, rx) = mpsc::unbounded_channel();
        let state = PublisherTask {
            pub_socket,
            router,
            rx,
            encoding,
            dp_rank,
            buffer_steps,
            buffer: VecDeque::new(),
            next_seq: 0,
        };
        let task = tokio::spawn(state.run());
        Ok(Publisher {
            tx,
            publish_port,
            replay_port,
            task,
        })
    }

    /// The bound PUB port.
    pub fn publish_port(&self) -> u16 {
        self.publish_port
    }

    /// The bound replay port, when a replay socket was asked for.
    pub fn replay_port(&self) -> Option<u16> {
        self.replay_port
    }

    /// Queues one batch: it gets the next seq (from 0) and `ts` = now (seconds since the
    /// epoch) when the task sends it. Never blocks; an empty batch is still a message (vLLM
    /// does not send empty batches: the caller decides).
    pub fn publish(&self, events: Vec<KvEvent>) {
        // The task only ends when the Publisher is dropped, so a send cannot fail while
        // `self` is alive.
        let _ = self.tx.send(events);
    }
}

impl Drop for Publisher {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// `tcp://*:P` → `tcp://0.0.0.0:P`, then binds; the bound port.
async fn bind(socket: &mut impl Socket, addr: &str) -> Result<u16, PublisherError> {
    let fail = |reason: String| PublisherError::Bind {
        addr: addr.to_string(),
        reason,
    };
    let resolved = addr.replacen("//*:", "//0.0.0.0:", 1);
    match socket.bind(&resolved).await {
        Ok(zeromq::Endpoint::Tcp(_, port)) => Ok(port),
        Ok(other) => Err(fail(format!("not a TCP endpoint: {other}"))),
        Err(e) => Err(fail(e.to_string())),
    }
}

struct PublisherTask {
    pub_socket: PubSocket,
    router: Option<RouterSocket>,
    rx: mpsc::UnboundedReceiver<Vec<KvEvent>>,
    encoding: Encoding,
    dp_rank: Option<u32>,
    buffer_steps: usize,
    buffer: VecDeque<(u64, Bytes)>,
    next_seq: u64,
}

impl PublisherTask {
    async fn run(mut self) {
        loop {
            let request = async {
                match self.router.as_mut() {
                    Some(r) => r.recv().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                events = self.rx.recv() => match events {
                    Some(events) => self.send(events).await,
                    None => return,
                },
                request = request => match request {
                    Ok(msg) => self.replay(msg).await,
                    Err(e) => tracing::warn!(error = %e, "kv-events publisher: replay socket receive failed"),
                },
            }
        }
    }

    async fn send(&mut self, events: Vec<KvEvent>) {
        let batch = EventBatch {
            seq: self.next_seq,
            ts: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64()),
            dp_rank: self.dp_rank,
            events,
        };
        self.next_seq += 1;
        let payload = Bytes::from(wire::encode_payload(&batch, self.encoding));
        let frames = vec![
            Bytes::new(),
            Bytes::copy_from_slice(&wire::seq_bytes(batch.seq)),
            payload.clone(),
        ];
        if let Ok(msg) = ZmqMessage::try_from(frames) {
            if let Err(e) = self.pub_socket.send(msg).await {
                tracing::warn!(seq = batch.seq, error = %e, "kv-events publisher: send failed");
            }
        }
        if self.buffer_steps > 0 {
            if self.buffer.len() == self.buffer_steps {
                self.buffer.pop_front();
            }
            self.buffer.push_back((batch.seq, payload));
        }
    }

    /// Answers `[identity, "", start_seq]` with every buffered message from `start_seq`,
    /// then the end marker.
    async fn replay(&mut self, request: ZmqMessage) {
        let frames = request.into_vec();
        let [identity, _, start] = frames.as_slice() else {
            tracing::warn!(
                frames = frames.len(),
                "kv-events publisher: replay request is not [identity, \"\", seq]"
            );
            return;
        };
        let Ok(start) = wire::parse_seq(start) else {
            tracing::warn!(
                len = start.len(),
                "kv-events publisher: replay seq frame is not 8 bytes"
            );
            return;
        };
        let Some(router) = self.router.as_mut() else {
            return;
        };
        let replies = self
            .buffer
            .iter()
            .filter(|(seq, _)| *seq >= start)
            .map(|(seq, payload)| {
                (
                    Bytes::copy_from_slice(&wire::seq_bytes(*seq)),
                    payload.clone(),
                )
            })
            .chain(std::iter::once((
                Bytes::from_static(&REPLAY_END_SEQ),
                Bytes::new(),
            )));
        for (seq, payload) in replies {
            let msg = ZmqMessage::try_from(vec![identity.clone(), Bytes::new(), seq, payload]);
            if let Ok(msg) = msg {
                if let Err(e) = router.send(msg).await {
                    tracing::warn!(error = %e, "kv-events publisher: replay send failed");
                    return;
                }
            }
        }
    }
}
