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
//! A port label without the other: [`PORT_LABEL`] alone means no replay (the config's
//! `replaySocketPort` belongs to the config's scheme, not to a port set by hand); port 0 is
//! not a port. Endpoints whose subscriptions would share one publish address (e.g. every
//! worker of a multi-worker host on the same `socketPort`) cannot be told apart: none of
//! them is subscribed, and that is logged.
//!
//! **Lifecycle.** The subscriptions follow the registry: an endpoint that appears is
//! subscribed (batches that arrive before its model is known wait in [`sink`]), one that leaves is unsubscribed and its entries cleared, one whose address
//! changes is re-subscribed from scratch. Restarts, sequence gaps and queue drops are the
//! subscriber's ([`pdgate_kvevents::subscriber`]): the index is cleared rather than kept
//! silently wrong. Speculative credits are expired once a second.
//!
//! **Not supported:** llm-d's global-socket mode (`kvEventsConfig.zmqEndpoint`: the router
//! binds one socket all engines connect to) and `discoverPods: false`; both are logged at
//! start and no subscription is made.

mod sink;

use pdgate_fleet::EndpointRegistry;
use pdgate_kvevents::{KvEventMetrics, Subscription, SubscriptionManager};
use pdgate_scheduler::prefix::PreciseIndex;
use pdgate_scheduler::{monotonic_ms, Scheduler, Snapshot};
use sink::IndexSink;
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
    sink: Arc<IndexSink>,
    manager: SubscriptionManager,
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
            let sink = Arc::new(IndexSink::new(ix.index.clone(), registry.clone()));
            feeds.push(IndexFeed {
                producer: ix.producer,
                index: ix.index,
                manager: SubscriptionManager::new(sink.clone(), metrics.clone()),
                sink,
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
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            loop {
                tick.tick().await;
                let Some(feed) = weak.upgrade() else { return };
                for f in &feed.feeds {
                    f.index.expire(monotonic_ms());
                    // Batches of endpoints whose model became known since.
                    f.sink.flush();
                }
            }
        });
        Some(feed)
    }

    /// Makes every index's subscriptions those of `snap`'s endpoints.
    fn sync(&self, snap: &Snapshot) {
        for f in &self.feeds {
            let pod = &f.index.events().pod_discovery_config;
            let wanted = snap
                .endpoints
                .iter()
                .filter_map(|e| subscription(&e.endpoint, pod.socket_port, pod.replay_socket_port))
                .collect();
            f.manager.sync(distinct_publishers(wanted));
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
            Some(v) => match v.parse::<u16>() {
                Ok(p) if p > 0 => Ok(Some(p)),
                _ => Err(format!("{label}={v}")),
            },
            None => Ok(base
                .filter(|b| *b > 0)
                .and_then(|b| u16::try_from(u32::from(b) + rank).ok())),
        }
    };
    // A publish port set by label pairs only with a replay port set by label.
    let replay_base = if endpoint.labels.contains_key(PORT_LABEL) {
        None
    } else {
        replay_port
    };
    let (publish, replay) = match (
        port(PORT_LABEL, Some(socket_port)),
        port(REPLAY_PORT_LABEL, replay_base),
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

/// `wanted` without the subscriptions that share a publish address with another one (logged:
/// their events could not be told apart).
fn distinct_publishers(wanted: Vec<Subscription>) -> Vec<Subscription> {
    let mut by_addr: std::collections::HashMap<&str, Vec<&str>> = Default::default();
    for s in &wanted {
        by_addr.entry(&s.publish).or_default().push(&s.endpoint);
    }
    let shared: std::collections::HashSet<String> = by_addr
        .into_iter()
        .filter(|(_, names)| names.len() > 1)
        .map(|(addr, names)| {
            tracing::warn!(publish = addr, endpoints = ?names, "KV events: several endpoints resolve to one publish address; none of them is subscribed (give each its pdgate.io/kv-events-port label)");
            addr.to_string()
        })
        .collect();
    wanted
        .into_iter()
        .filter(|s| !shared.contains(&s.publish))
        .collect()
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
        e.labels.insert(PORT_LABEL.into(), "0".into());
        assert!(
            subscription(&e, 5557, None).is_none(),
            "port 0 is not a port"
        );
        assert!(subscription(&v6_free("c"), 0, None).is_none());
        // A publish port by label pairs only with a replay port by label, never with the
        // config's replaySocketPort (it would be another engine's replay socket).
        e.labels.remove(REPLAY_PORT_LABEL);
        e.labels.insert(PORT_LABEL.into(), "7001".into());
        let s = subscription(&e, 5557, Some(5600)).unwrap();
        assert_eq!(
            (s.publish.as_str(), s.replay),
            ("tcp://10.0.0.5:7001", None)
        );
        assert_eq!(
            subscription(&v6_free("b"), 5557, None).unwrap().publish,
            "tcp://[::1]:5557"
        );
    }

    fn v6_free(name: &str) -> Endpoint {
        Endpoint::new(name, "[::1]:8000", Default::default())
    }

    #[test]
    fn endpoints_sharing_a_publish_address_are_not_subscribed() {
        let sub = |name: &str, port: u16| Subscription {
            endpoint: name.into(),
            publish: format!("tcp://127.0.0.1:{port}"),
            replay: None,
        };
        let kept = distinct_publishers(vec![sub("w0", 1), sub("w1", 1), sub("w2", 2)]);
        assert_eq!(kept, vec![sub("w2", 2)]);
    }
}
