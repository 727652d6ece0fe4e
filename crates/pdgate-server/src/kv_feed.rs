//! The KV-event feed: for every precise prefix index (`precise-prefix-cache-producer`), one
//! ZMQ subscription per discovered endpoint, whose batches are applied to that index.
//!
//! **Addresses.** An endpoint at `HOST:PORT` with DP rank *r* (0 when it has none) is
//! subscribed at `tcp://HOST:{socketPort + r}` (`kvEventsConfig.podDiscoveryConfig.socketPort`,
//! default 5557, as vLLM's DP ranks publish on consecutive ports), with replay at
//! `tcp://HOST:{replaySocketPort + r}` when `replaySocketPort` is set. The endpoint's labels
//! [`PORT_LABEL`] / [`REPLAY_PORT_LABEL`] override both for that endpoint (an endpoints-file
//! entry or a pod label), e.g. when engines on one host publish on unrelated ports.
//! Per-endpoint sockets subscribe to every topic: each socket carries one engine, so
//! `topicFilter` is not needed to tell engines apart (and vLLM's default topic is empty).
//!
//! **Lifecycle.** The subscriptions follow the registry: an endpoint that appears is
//! subscribed once its model is known (its first `/v1/models` scrape: a prompt's first
//! block is keyed by the model, so events applied before would be skipped as
//! `model_unknown`, the replayed history of a late subscriber included; checked on every
//! registry change and once a second), one that leaves is unsubscribed and its entries cleared, one whose address
//! changes is re-subscribed from scratch. Restarts, sequence gaps and queue drops are the
//! subscriber's ([`pdgate_kvevents::subscriber`]): the index is cleared rather than kept
//! silently wrong. Speculative credits are expired once a second.
//!
//! **Not supported:** llm-d's global-socket mode (`kvEventsConfig.zmqEndpoint`: the router
//! binds one socket all engines connect to) and `discoverPods: false`; both are logged at
//! start and no subscription is made.

use pdgate_fleet::EndpointRegistry;
use pdgate_kvevents::{
    ClearReason, EventBatch, KvEventMetrics, KvEventSink, Subscription, SubscriptionManager,
};
use pdgate_scheduler::prefix::PreciseIndex;
use pdgate_scheduler::{monotonic_ms, Scheduler, Snapshot};
use std::sync::Arc;
use std::time::Duration;

/// Endpoint label overriding the KV-event publish port (decimal).
pub const PORT_LABEL: &str = "pdgate.io/kv-events-port";
/// Endpoint label overriding the KV-event replay port (decimal).
pub const REPLAY_PORT_LABEL: &str = "pdgate.io/kv-events-replay-port";

/// The running feed of one front end: its subscriptions and the ingestion counters.
pub struct KvFeed {
    feeds: Vec<IndexFeed>,
    /// Counters of every subscriber (`pdgate_kv_events_*_total`).
    pub metrics: Arc<KvEventMetrics>,
}

struct IndexFeed {
    producer: String,
    index: Arc<PreciseIndex>,
    manager: SubscriptionManager,
}

/// Applies one index's batches, resolving the endpoint's current load cell by name.
struct IndexSink {
    index: Arc<PreciseIndex>,
    registry: Arc<EndpointRegistry>,
}

impl KvEventSink for IndexSink {
    fn apply(&self, endpoint: &str, batch: &EventBatch) {
        let snap = self.registry.snapshot();
        if let Some(state) = snap.get(endpoint) {
            self.index.apply(state, batch, monotonic_ms());
        }
    }

    fn clear(&self, endpoint: &str, reason: ClearReason) {
        if self.index.clear_endpoint(endpoint) {
            tracing::info!(
                endpoint,
                reason = reason.as_str(),
                "KV-event index entries of endpoint cleared"
            );
        }
    }
}

impl KvFeed {
    /// Starts the feed on the current tokio runtime when `scheduler` has a precise index;
    /// `None` otherwise. Subscriptions are made now for the current snapshot and on every
    /// registry change.
    pub fn start(registry: &Arc<EndpointRegistry>, scheduler: &Scheduler) -> Option<Arc<KvFeed>> {
        let indexes = scheduler.kv_event_indexes();
        if indexes.is_empty() {
            return None;
        }
        let metrics = Arc::new(KvEventMetrics::default());
        let mut feeds = Vec::new();
        for ix in indexes {
            let cfg = ix.index.events();
            if cfg.zmq_endpoint.is_some() || !cfg.discover_pods {
                tracing::warn!(
                    producer = %ix.producer,
                    "kvEventsConfig: only per-endpoint subscriptions (discoverPods: true, no \
                     zmqEndpoint) are supported; this index receives no events"
                );
                continue;
            }
            let sink = Arc::new(IndexSink {
                index: ix.index.clone(),
                registry: registry.clone(),
            });
            feeds.push(IndexFeed {
                producer: ix.producer,
                index: ix.index,
                manager: SubscriptionManager::new(sink, metrics.clone()),
            });
        }
        let feed = Arc::new(KvFeed { feeds, metrics });
        feed.sync(&registry.snapshot());
        let weak = Arc::downgrade(&feed);
        registry.on_change(Box::new(move |snap| {
            if let Some(feed) = weak.upgrade() {
                feed.sync(snap);
            }
        }));
        let weak = Arc::downgrade(&feed);
        let weak_registry = Arc::downgrade(registry);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            loop {
                tick.tick().await;
                let Some(feed) = weak.upgrade() else { return };
                for f in &feed.feeds {
                    f.index.expire(monotonic_ms());
                }
                // Endpoints whose model became known since the last change.
                if let Some(registry) = weak_registry.upgrade() {
                    feed.sync(&registry.snapshot());
                }
            }
        });
        Some(feed)
    }

    /// Makes every index's subscriptions those of `snap`'s endpoints whose model is known
    /// (or that are subscribed already: a subscription is not dropped for it).
    fn sync(&self, snap: &Snapshot) {
        for f in &self.feeds {
            let pod = &f.index.events().pod_discovery_config;
            let running = f.manager.endpoints();
            let wanted = snap
                .endpoints
                .iter()
                .filter(|e| {
                    e.load.models().is_some() || running.binary_search(&e.endpoint.name).is_ok()
                })
                .filter_map(|e| subscription(&e.endpoint, pod.socket_port, pod.replay_socket_port))
                .collect();
            f.manager.sync(wanted);
        }
    }

    /// `(producer, index)` of each fed index.
    pub fn indexes(&self) -> impl Iterator<Item = (&str, &Arc<PreciseIndex>)> {
        self.feeds.iter().map(|f| (f.producer.as_str(), &f.index))
    }

    /// Appends the feed's Prometheus series (text format 0.0.4) to `out`: the subscribers'
    /// counters (`pdgate_kv_events_*_total`), each index's totals
    /// (`pdgate_kv_index_<count>_total{producer}`, the fields of
    /// [`pdgate_scheduler::prefix::precise::stats::KvEventCounts`]) and the canonical blocks
    /// held per endpoint (`pdgate_kv_index_blocks{producer,endpoint}`).
    pub fn render_metrics(&self, out: &mut Vec<u8>) {
        use std::io::Write;
        for (name, v) in self.metrics.snapshot().series() {
            let _ = writeln!(out, "# TYPE {name} counter\n{name} {v}");
        }
        let dumps: Vec<_> = self
            .feeds
            .iter()
            .map(|f| (&f.producer, f.index.dump(0)))
            .collect();
        let counts: Vec<_> = dumps.iter().map(|(p, d)| (p, d.counts.fields())).collect();
        if let Some((_, first)) = counts.first() {
            for (i, (key, _)) in first.iter().enumerate() {
                let _ = writeln!(out, "# TYPE pdgate_kv_index_{key}_total counter");
                for (p, fields) in &counts {
                    let v = fields[i].1;
                    let _ = writeln!(out, "pdgate_kv_index_{key}_total{{producer=\"{p}\"}} {v}");
                }
            }
        }
        let _ = writeln!(out, "# TYPE pdgate_kv_index_blocks gauge");
        for (p, d) in &dumps {
            for e in &d.endpoints {
                let _ = writeln!(
                    out,
                    "pdgate_kv_index_blocks{{producer=\"{p}\",endpoint=\"{}\"}} {}",
                    e.name, e.blocks_held
                );
            }
        }
    }

    /// The debug dump: per index, its settings, totals and per-endpoint holdings with up
    /// to `sample` hashes each (`GET /debug/kv-index?sample=N`).
    pub fn dump(&self, sample: usize) -> serde_json::Value {
        let indexes: Vec<_> = (self.feeds.iter())
            .map(|f| serde_json::json!({"producer": f.producer, "index": f.index.dump(sample)}))
            .collect();
        serde_json::json!({"subscriptions": self.metrics.snapshot().series().into_iter().collect::<std::collections::BTreeMap<_, _>>(), "indexes": indexes})
    }
}

/// The subscription of `endpoint` (see the module doc for the address rule); `None` when its
/// address has no host part or a port label is not a port number (logged).
pub fn subscription(
    endpoint: &pdgate_scheduler::Endpoint,
    socket_port: u16,
    replay_port: Option<u16>,
) -> Option<Subscription> {
    let host = match endpoint.address.rsplit_once(':') {
        Some((host, _)) if !host.is_empty() => host,
        _ => return None,
    };
    let rank = endpoint.dp_rank.unwrap_or(0);
    let port = |label: &str, base: Option<u16>| -> Result<Option<u16>, String> {
        match endpoint.labels.get(label) {
            Some(v) => v
                .parse::<u16>()
                .map(Some)
                .map_err(|_| format!("{label}={v}")),
            None => Ok(base.and_then(|b| u16::try_from(u32::from(b) + rank).ok())),
        }
    };
    let (publish, replay) = match (
        port(PORT_LABEL, Some(socket_port)),
        port(REPLAY_PORT_LABEL, replay_port),
    ) {
        (Ok(Some(p)), Ok(r)) => (p, r),
        (Err(bad), _) | (_, Err(bad)) => {
            tracing::warn!(endpoint = %endpoint.name, label = %bad, "KV-event port label is not a port number; endpoint not subscribed");
            return None;
        }
        _ => return None,
    };
    Some(Subscription {
        endpoint: endpoint.name.clone(),
        publish: format!("tcp://{host}:{publish}"),
        replay: replay.map(|r| format!("tcp://{host}:{r}")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use pdgate_scheduler::Endpoint;

    #[test]
    fn addresses_follow_rank_and_labels() {
        let mut e = Endpoint::new("a", "10.0.0.5:8000", Default::default());
        let s = subscription(&e, 5557, None).unwrap();
        assert_eq!(
            (s.publish.as_str(), s.replay),
            ("tcp://10.0.0.5:5557", None)
        );
        e.dp_rank = Some(3);
        let s = subscription(&e, 5557, Some(5600)).unwrap();
        assert_eq!(s.publish, "tcp://10.0.0.5:5560");
        assert_eq!(s.replay.as_deref(), Some("tcp://10.0.0.5:5603"));
        e.labels.insert(PORT_LABEL.into(), "7001".into());
        e.labels.insert(REPLAY_PORT_LABEL.into(), "7002".into());
        let s = subscription(&e, 5557, None).unwrap();
        assert_eq!(s.publish, "tcp://10.0.0.5:7001");
        assert_eq!(s.replay.as_deref(), Some("tcp://10.0.0.5:7002"));
        e.labels.insert(PORT_LABEL.into(), "x".into());
        assert!(subscription(&e, 5557, None).is_none());
        let v6 = Endpoint::new("b", "[::1]:8000", Default::default());
        assert_eq!(
            subscription(&v6, 5557, None).unwrap().publish,
            "tcp://[::1]:5557"
        );
    }
}
