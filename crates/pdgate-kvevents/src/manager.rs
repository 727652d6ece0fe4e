//! Keeps one subscriber running per wanted publisher, following discovery.

use crate::metrics::KvEventMetrics;
use crate::sink::{ClearReason, KvEventSink};
use crate::subscriber::{self, SubscriberConfig, SubscriberHandle};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

/// One publisher to follow: an endpoint (or one DP rank of it, with its own name).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subscription {
    /// The endpoint's name (the sink's key); unique in a [`SubscriptionManager::sync`] list.
    pub endpoint: String,
    /// The PUB address, `tcp://HOST:PORT` (vLLM: the `endpoint` of `--kv-events-config`,
    /// port + DP rank).
    pub publish: String,
    /// The replay ROUTER address, `tcp://HOST:PORT`, when the engine has one
    /// (`replay_endpoint`).
    pub replay: Option<String>,
}

/// The running subscribers, keyed by endpoint name. Dropping the manager stops them all
/// (without clearing the sink).
pub struct SubscriptionManager {
    sink: Arc<dyn KvEventSink>,
    metrics: Arc<KvEventMetrics>,
    queue_capacity: usize,
    replay_timeout: Duration,
    max_message_bytes: usize,
    running: Mutex<HashMap<String, (Subscription, SubscriberHandle)>>,
}

impl SubscriptionManager {
    /// A manager feeding `sink` and counting into `metrics`, with the subscriber defaults
    /// ([`subscriber::DEFAULT_QUEUE_CAPACITY`], [`subscriber::DEFAULT_REPLAY_TIMEOUT`],
    /// [`subscriber::DEFAULT_MAX_MESSAGE_BYTES`]).
    pub fn new(sink: Arc<dyn KvEventSink>, metrics: Arc<KvEventMetrics>) -> Self {
        Self {
            sink,
            metrics,
            queue_capacity: subscriber::DEFAULT_QUEUE_CAPACITY,
            replay_timeout: subscriber::DEFAULT_REPLAY_TIMEOUT,
            max_message_bytes: subscriber::DEFAULT_MAX_MESSAGE_BYTES,
            running: Mutex::new(HashMap::new()),
        }
    }

    /// Sets the per-publisher queue length (batches) of subscribers started from now on.
    pub fn with_queue_capacity(mut self, batches: usize) -> Self {
        self.queue_capacity = batches;
        self
    }

    /// Sets the replay deadline of subscribers started from now on.
    pub fn with_replay_timeout(mut self, timeout: Duration) -> Self {
        self.replay_timeout = timeout;
        self
    }

    /// Sets the largest message (bytes, all frames) subscribers started from now on keep;
    /// larger ones are dropped undecoded and counted
    /// ([`crate::SubscriberConfig::max_message_bytes`]).
    pub fn with_max_message_bytes(mut self, bytes: usize) -> Self {
        self.max_message_bytes = bytes;
        self
    }

    /// Makes the running subscribers equal `wanted`: starts the new ones; stops those no
    /// longer wanted and clears them in the sink (`Unsubscribed`); restarts (stop, clear,
    /// start) those whose addresses changed. A name listed twice keeps its first entry
    /// (logged). Must be called within a tokio runtime.
    pub fn sync(&self, wanted: Vec<Subscription>) {
        let mut wanted_by_name: HashMap<String, Subscription> = HashMap::new();
        for s in wanted {
            if wanted_by_name.contains_key(&s.endpoint) {
                tracing::warn!(endpoint = %s.endpoint, "kv-events: endpoint listed twice; keeping the first");
                continue;
            }
            wanted_by_name.insert(s.endpoint.clone(), s);
        }
        let mut running = self.running.lock();
        let stale: Vec<String> = running
            .iter()
            .filter(|(name, (sub, _))| wanted_by_name.get(*name) != Some(sub))
            .map(|(name, _)| name.clone())
            .collect();
        for name in stale {
            if let Some((_, handle)) = running.remove(&name) {
                handle.stop();
            }
            tracing::info!(endpoint = %name, "kv-events: unsubscribed");
            self.sink.clear(&name, ClearReason::Unsubscribed);
            KvEventMetrics::inc(&self.metrics.pdgate_kv_events_clears_total);
        }
        for (name, sub) in wanted_by_name {
            if running.contains_key(&name) {
                continue;
            }
            let mut config = SubscriberConfig::new(&name, &sub.publish, sub.replay.clone());
            config.queue_capacity = self.queue_capacity;
            config.replay_timeout = self.replay_timeout;
            config.max_message_bytes = self.max_message_bytes;
            let handle = subscriber::spawn(config, self.sink.clone(), self.metrics.clone());
            running.insert(name, (sub, handle));
        }
    }

    /// The subscribed endpoint names, sorted.
    pub fn endpoints(&self) -> Vec<String> {
        let mut names: Vec<String> = self.running.lock().keys().cloned().collect();
        names.sort();
        names
    }
}
