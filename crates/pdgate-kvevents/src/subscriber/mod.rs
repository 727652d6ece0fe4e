//! One subscriber per publisher (an engine, or one DP rank of it): a receive task reading
//! the ZMQ SUB socket and decoding, a bounded queue, and an apply task that checks seqs,
//! replays gaps, and feeds the [`KvEventSink`].
//!
//! Rules (one place):
//! - a message larger than [`SubscriberConfig::max_message_bytes`] (the sum of its frames'
//!   lengths) is dropped as soon as it is received, before its seq is read or its payload
//!   decoded, and counted (`pdgate_kv_events_oversize_dropped_total`); it then shows up as a
//!   seq gap like any other lost message. When one of its frames alone is over the cap, the
//!   subscriber also reconnects (handled as a disconnect, below): the zeromq crate keeps a
//!   connection's read buffer as large as the largest frame it read until the socket closes.
//!   A replay reply over the cap is dropped the same way: a gap's replay then fails
//!   (→ `clear(Gap)`), a history replay keeps only the run after it. The cap applies after
//!   receipt (see [`DEFAULT_MAX_MESSAGE_BYTES`]); a socket reads its next message only after
//!   the current one is dropped, so at most one over-size message is alive per socket (the
//!   SUB socket, and a replay in progress, whose socket lives for that replay only);
//! - the queue holds at most [`SubscriberConfig::queue_capacity`] batches; when it is full
//!   the newest batch is dropped and counted. Seqs are checked after the queue, so a drop
//!   (or an undecodable message) shows up as a seq gap at the next batch and is handled as
//!   one: replay when a replay address is configured, else `clear(Gap)`;
//! - a gap is replayed from the replay socket (vLLM's ROUTER: send `["", start_seq]`, read
//!   `["", seq, payload]` until an empty payload) within
//!   [`SubscriberConfig::replay_timeout`]; the missed batches are applied in order, then the
//!   current one. If the replay fails, times out or lacks any missed seq → `clear(Gap)`;
//! - a seq that goes backwards or repeats → `clear(Restart)`, then apply;
//! - the connection to the publisher dropping → `clear(Disconnected)` (the engine may be gone
//!   or restarting); the subscriber reconnects every [`SubscriberConfig::reconnect_interval`]
//!   (its own fixed pace, not the ZMQ library's backoff, which grows to 30 s), and the next
//!   batch starts a new seq stream;
//! - the first batch of a stream with seq N > 0 (the engine ran before we listened) →
//!   with a replay socket, the engine's buffered history `..N` is applied first (a
//!   contiguous run ending at N − 1, as far back as the engine's buffer goes), so blocks
//!   stored before the subscription are known.
//!
//! The subscriber never keeps state it knows to be incomplete: every doubt is a `clear`.

mod apply;
mod replay;

use crate::metrics::KvEventMetrics;
use crate::sink::KvEventSink;
use crate::wire;
use apply::Item;
use futures_util::StreamExt;
use parking_lot::Mutex;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use zeromq::{Socket, SocketEvent, SocketOptions, SocketRecv, SubSocket, ZmqMessage};

/// Batches a publisher's queue holds before dropping (about a second of a busy engine's
/// steps).
pub const DEFAULT_QUEUE_CAPACITY: usize = 1024;
/// Largest KV-event message a subscriber keeps by default, in bytes (16 MiB), counting every
/// frame of the message (topic, seq, payload). vLLM publishes one message per engine step;
/// the batches of a real vLLM 0.32 (`shared/fixtures/vllm-0.32-cpu/kv-events.raw.jsonl`)
/// are 76–290 bytes, about 9 bytes per stored token (a 32-token `BlockStored` is ~290 bytes),
/// at most ~16 with 16-token blocks and a vocabulary past 65,535 (5-byte token ids). 16 MiB
/// holds a step that stores a million tokens at that rate, far past any
/// `max_num_batched_tokens` in use, while bounding what one message costs the router
/// (decoding a 171 MB message peaked at 600 MB, ~3.5×: ~60 MB at this cap).
///
/// Enforced after receipt, not before allocation: the zeromq crate (0.7) reads a whole
/// message before handing it over and has no frame or message size option (its
/// `SocketOptions::read_buffer` sizes read chunks, and is documented as not a memory limit).
/// So an over-size message is held whole once, then dropped before any decode or copy; and
/// its read buffer, which the crate keeps at the largest frame's size while the connection
/// lasts (measured: a dropped 256 MiB message left 260 MiB resident, and a second one peaked
/// at 517 MiB), is freed by reconnecting when a frame alone is over the cap. Out of this
/// cap's reach: the crate reserves a frame's announced length as soon as it reads the frame
/// header, so a header announcing more than the machine can allocate (2^62 bytes, in a
/// 22-byte message) aborts the process inside the crate before pdgate sees a message.
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 16 * 1024 * 1024;
/// How long a replay may take before the endpoint is cleared instead.
pub const DEFAULT_REPLAY_TIMEOUT: Duration = Duration::from_secs(2);
/// Pause between attempts to (re)connect to a publisher that is not there.
pub const DEFAULT_RECONNECT_INTERVAL: Duration = Duration::from_secs(1);
/// How long one connect attempt may retry a refused connection (the ZMQ library's own
/// backoff, 50 ms doubling) before the subscriber pauses and starts over.
pub const CONNECT_ATTEMPT: Duration = Duration::from_secs(2);

/// One publisher to subscribe to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubscriberConfig {
    /// The endpoint's name: the key the sink is called with.
    pub endpoint: String,
    /// The PUB address, `tcp://HOST:PORT`.
    pub publish: String,
    /// The replay ROUTER address, `tcp://HOST:PORT`, when the engine has one.
    pub replay: Option<String>,
    /// Bounded queue length in batches ([`DEFAULT_QUEUE_CAPACITY`]).
    pub queue_capacity: usize,
    /// Replay deadline ([`DEFAULT_REPLAY_TIMEOUT`]).
    pub replay_timeout: Duration,
    /// Reconnect pause ([`DEFAULT_RECONNECT_INTERVAL`]).
    pub reconnect_interval: Duration,
    /// Largest message kept, in bytes: the sum of the lengths of all its frames (topic, seq,
    /// payload; a reply's too on the replay socket). A larger one is dropped undecoded and
    /// counted; a frame alone over it also makes the subscriber reconnect
    /// ([`DEFAULT_MAX_MESSAGE_BYTES`]; enforced after receipt, see there).
    pub max_message_bytes: usize,
}

impl SubscriberConfig {
    /// A config with the default queue, replay timeout, reconnect interval and message cap.
    pub fn new(
        endpoint: impl Into<String>,
        publish: impl Into<String>,
        replay: Option<String>,
    ) -> Self {
        Self {
            endpoint: endpoint.into(),
            publish: publish.into(),
            replay,
            queue_capacity: DEFAULT_QUEUE_CAPACITY,
            replay_timeout: DEFAULT_REPLAY_TIMEOUT,
            reconnect_interval: DEFAULT_RECONNECT_INTERVAL,
            max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
        }
    }
}

/// A running subscriber; dropping it (or [`SubscriberHandle::stop`]) stops both tasks. Once
/// stop returns, the subscriber makes no further sink call (a call in flight on another
/// thread is waited for), so a `clear` made afterwards is final. The sink is not cleared by
/// stopping (the [`crate::SubscriptionManager`] does that).
pub struct SubscriberHandle {
    receive: JoinHandle<()>,
    apply: JoinHandle<()>,
    live: Arc<Mutex<bool>>,
}

impl SubscriberHandle {
    /// Stops the subscriber.
    pub fn stop(self) {}
}

impl Drop for SubscriberHandle {
    fn drop(&mut self) {
        *self.live.lock() = false;
        self.receive.abort();
        self.apply.abort();
    }
}

/// Starts a subscriber for `config` on the current tokio runtime.
pub fn spawn(
    config: SubscriberConfig,
    sink: Arc<dyn KvEventSink>,
    metrics: Arc<KvEventMetrics>,
) -> SubscriberHandle {
    let (tx, rx) = mpsc::channel(config.queue_capacity.max(1));
    let config = Arc::new(config);
    let live = Arc::new(Mutex::new(true));
    let apply = tokio::spawn(apply::run(
        config.clone(),
        rx,
        sink,
        metrics.clone(),
        live.clone(),
    ));
    let receive = tokio::spawn(receive(config, tx, metrics));
    SubscriberHandle {
        receive,
        apply,
        live,
    }
}

/// The size of a message as the cap counts it: the sum of its frames' lengths, in bytes.
pub(crate) fn message_bytes(msg: &ZmqMessage) -> usize {
    msg.iter().map(|f| f.len()).sum()
}

/// Connects (retrying), reads, decodes and queues; reconnects from scratch after a receive
/// error; reports disconnects to the apply task.
async fn receive(
    config: Arc<SubscriberConfig>,
    tx: mpsc::Sender<Item>,
    metrics: Arc<KvEventMetrics>,
) {
    let endpoint = config.endpoint.as_str();
    let connect_warn = crate::log_limit::warn_limit();
    let drop_warn = crate::log_limit::warn_limit();
    let decode_warn = crate::log_limit::warn_limit();
    let oversize_warn = crate::log_limit::warn_limit();
    loop {
        let mut options = SocketOptions::default();
        options.connect_timeout(CONNECT_ATTEMPT);
        let mut sub = SubSocket::with_options(options);
        let mut monitor = sub.monitor();
        if let Err(e) = sub.connect(&config.publish).await {
            if let Some(n) = connect_warn.allow() {
                tracing::warn!(endpoint, publish = %config.publish, error = %e, suppressed = n, "kv-events: cannot connect to the publisher; retrying");
            }
            tokio::time::sleep(config.reconnect_interval).await;
            continue;
        }
        if let Err(e) = sub.subscribe("").await {
            tracing::warn!(endpoint, error = %e, "kv-events: subscribe failed; reconnecting");
            tokio::time::sleep(config.reconnect_interval).await;
            continue;
        }
        tracing::info!(endpoint, publish = %config.publish, "kv-events: subscribed");
        let mut monitor_open = true;
        loop {
            tokio::select! {
                msg = sub.recv() => {
                    let msg = match msg {
                        Ok(msg) => msg,
                        Err(e) => {
                            tracing::info!(endpoint, error = %e, "kv-events: publisher connection lost; reconnecting");
                            break;
                        }
                    };
                    KvEventMetrics::inc(&metrics.pdgate_kv_events_received_total);
                    let bytes = message_bytes(&msg);
                    let cap = config.max_message_bytes;
                    if bytes > cap {
                        let largest_frame = msg.iter().map(|f| f.len()).max().unwrap_or(0);
                        // Free it before anything else: the next message is read only
                        // after this one is gone.
                        drop(msg);
                        KvEventMetrics::inc(&metrics.pdgate_kv_events_oversize_dropped_total);
                        // The connection's read buffer stays as large as that frame until
                        // the socket closes: reconnect to free it.
                        let reconnect = largest_frame > cap;
                        if let Some(n) = oversize_warn.allow() {
                            if reconnect {
                                tracing::warn!(endpoint, bytes, cap, suppressed = n, "kv-events: message over the size cap dropped undecoded; reconnecting to free its read buffer");
                            } else {
                                tracing::warn!(endpoint, bytes, cap, suppressed = n, "kv-events: message over the size cap dropped undecoded (seen as a gap)");
                            }
                        }
                        if reconnect {
                            break;
                        }
                        continue;
                    }
                    let frames: Vec<&[u8]> = msg.iter().map(|f| f.as_ref()).collect();
                    let decoded = match wire::decode_counted(&frames) {
                        Ok(d) => d,
                        Err(e) => {
                            KvEventMetrics::inc(&metrics.pdgate_kv_events_decode_errors_total);
                            if let Some(n) = decode_warn.allow() {
                                tracing::warn!(endpoint, error = %e, suppressed = n, "kv-events: undecodable message dropped (seen as a gap)");
                            }
                            continue;
                        }
                    };
                    KvEventMetrics::add(&metrics.pdgate_kv_events_unknown_events_total, u64::from(decoded.unknown_events));
                    match tx.try_send(Item::Batch(decoded.batch)) {
                        Ok(()) => {}
                        Err(mpsc::error::TrySendError::Full(_)) => {
                            KvEventMetrics::inc(&metrics.pdgate_kv_events_dropped_total);
                            if let Some(n) = drop_warn.allow() {
                                tracing::warn!(endpoint, capacity = config.queue_capacity, suppressed = n, "kv-events: queue full, batch dropped (seen as a gap)");
                            }
                        }
                        Err(mpsc::error::TrySendError::Closed(_)) => return,
                    }
                }
                event = monitor.next(), if monitor_open => {
                    monitor_open = event.is_some();
                    if let Some(SocketEvent::Disconnected(_)) = event {
                        // Reconnect at our own pace: the socket's own reconnect backs
                        // off to 30 s, and a restarted engine's first events would be lost.
                        tracing::info!(endpoint, "kv-events: publisher disconnected; reconnecting");
                        break;
                    }
                }
            }
        }
        // Closes the connection (and frees its read buffer) before the pause.
        drop(monitor);
        drop(sub);
        if tx.send(Item::Disconnected).await.is_err() {
            return;
        }
        tokio::time::sleep(config.reconnect_interval).await;
    }
}
