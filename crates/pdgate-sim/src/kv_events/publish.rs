//! A worker's KV-event output: the [`EventSink`] the engine loop hands each step's events to
//! (bounded; a full queue drops the batch and counts it, the engine never waits), and the
//! publisher task that numbers the batches and sends them over ZMQ.

use super::config::WorkerPublisher;
use super::KvEventEncoding;
use pdgate_api::kv_events::KvEvent;
use pdgate_kvevents::{Encoding, Publisher};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// The ports a worker's publisher bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvEventPorts {
    /// ZMQ PUB port.
    pub publish: u16,
    /// Replay (ROUTER) port, when a replay endpoint is configured.
    pub replay: Option<u16>,
}

/// A running publisher.
pub struct Started {
    /// The ports bound.
    pub ports: KvEventPorts,
    /// The task sending the batches; abort it to close the sockets.
    pub task: JoinHandle<()>,
}

/// Binds the publisher's sockets and starts the task that sends each batch of `rx` as one ZMQ
/// message `[topic, seq, payload]` (seq from 0, +1 per batch), encoded as `encoding`.
///
/// Errors: an endpoint cannot be bound (the message names it).
pub async fn start(
    settings: &WorkerPublisher,
    encoding: KvEventEncoding,
    rx: mpsc::Receiver<Vec<KvEvent>>,
) -> anyhow::Result<Started> {
    let wire = match encoding {
        KvEventEncoding::Tagged => Encoding::Tagged,
        KvEventEncoding::Positional => Encoding::Positional,
    };
    let bind_url = |e: &super::TcpEndpoint| format!("tcp://{}:{}", e.host, e.port);
    let replay = settings.replay.as_ref().map(bind_url);
    let publisher = Publisher::bind(
        &bind_url(&settings.endpoint),
        replay.as_deref(),
        wire,
        settings.buffer_steps,
        Some(0),
    )
    .await
    .map_err(|e| anyhow::anyhow!("KV event publisher: {e}"))?;
    let ports = KvEventPorts {
        publish: publisher.publish_port(),
        replay: publisher.replay_port(),
    };
    // The task owns the publisher: aborting it closes the sockets.
    let task = tokio::spawn(async move {
        let mut rx = rx;
        while let Some(events) = rx.recv().await {
            publisher.publish(events);
        }
    });
    Ok(Started { ports, task })
}

/// The engine's end of a worker's event queue.
#[derive(Debug, Clone)]
pub struct EventSink {
    tx: mpsc::Sender<Vec<KvEvent>>,
}

/// Why [`EventSink::send`] did not queue a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SendError {
    /// `max_queue_size` batches are waiting: this one is dropped.
    #[error("the KV event queue is full")]
    Full,
    /// The publisher stopped.
    #[error("the KV event publisher stopped")]
    Closed,
}

impl EventSink {
    /// A queue of at most `max_queue_size` batches and its receiving end.
    pub fn channel(max_queue_size: usize) -> (EventSink, mpsc::Receiver<Vec<KvEvent>>) {
        let (tx, rx) = mpsc::channel(max_queue_size.max(1));
        (EventSink { tx }, rx)
    }

    /// Queues one step's events (one batch); never waits.
    pub fn send(&self, events: Vec<KvEvent>) -> Result<(), SendError> {
        self.tx.try_send(events).map_err(|e| match e {
            mpsc::error::TrySendError::Full(_) => SendError::Full,
            mpsc::error::TrySendError::Closed(_) => SendError::Closed,
        })
    }
}

/// Label of an event in `pdgate_sim_kv_events_total{type}` (vLLM's type tag).
pub fn event_type(e: &KvEvent) -> &'static str {
    match e {
        KvEvent::BlockStored(_) => "BlockStored",
        KvEvent::BlockRemoved(_) => "BlockRemoved",
        KvEvent::AllBlocksCleared => "AllBlocksCleared",
    }
}
