//! One subscriber per publisher (an engine, or one DP rank of it): a receive task reading
//! the ZMQ SUB socket and decoding, a bounded queue, and an apply task that checks seqs,
//! replays gaps, and feeds the [`KvEventSink`].
//!
//! Rules (one place):
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

use crate::log_limit::LogLimit;
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
use zeromq::{Socket, SocketEvent, SocketOptions, SocketRecv, SubSocket};

/// Batches a publisher's queue holds before dropping (about a second of a busy engine's
/// steps).
pub const DEFAULT_QUEUE_CAPACITY: usize = 1024;
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
}

impl SubscriberConfig {
    /// A config with the default queue, replay timeout and reconnect interval.
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

/// Connects (retrying), reads, decodes and queues; reconnects from scratch after a receive
/// error; reports disconnects to the apply task.
async fn receive(
    config: Arc<SubscriberConfig>,
    tx: mpsc::Sender<Item>,
    metrics: Arc<KvEventMetrics>,
) {
    let endpoint = config.endpoint.as_str();
    let mut connect_warn = LogLimit::default();
    let mut drop_warn = LogLimit::default();
    let mut decode_warn = LogLimit::default();
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
        if tx.send(Item::Disconnected).await.is_err() {
            return;
        }
        tokio::time::sleep(config.reconnect_interval).await;
    }
}
