//! The Kubernetes [`EndpointWatcher`]: an `InferencePool` and the pods it selects (or a plain
//! label selector), each followed with kube-rs's `watcher` (list, then watch from the list's
//! `resourceVersion`; on `410 Gone` or a broken watch it lists again, so a DELETE missed
//! while disconnected leaves no ghost: the store is replaced whole at each list's end).
//!
//! A list is yielded only once both the pool and a full list of its pods are known, and then
//! at every change that alters the endpoint list. A pool whose selector changes starts a new
//! pod watch; until its first list is complete the previous endpoints stay applied.

use super::pods::{self, Skipped};
use super::pool::{self, PoolSpec};
use crate::source::{DiscoveryError, EndpointWatcher};
use futures_util::future::BoxFuture;
use futures_util::stream::{BoxStream, StreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::runtime::utils::ResetTimerBackoff;
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use pdgate_scheduler::Endpoint;
use std::collections::BTreeMap;
use std::time::Duration;

/// What to watch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// An `InferencePool` (llm-d's `--pool-name`, `--pool-namespace`, `--pool-group`).
    Pool {
        /// `metadata.name` of the pool.
        name: String,
        /// Its namespace (the pods are in the same one).
        namespace: String,
        /// API group ([`pool::GROUP_V1`] or [`pool::GROUP_V1ALPHA2`]).
        group: String,
    },
    /// Pods matching a label selector, without a pool (`--pod-selector`).
    Selector {
        /// Namespace of the pods.
        namespace: String,
        /// A Kubernetes label selector string, as the API server takes it.
        selector: String,
        /// Serving ports of each pod, in rank order.
        ports: Vec<u16>,
    },
}

impl Target {
    fn namespace(&self) -> &str {
        match self {
            Target::Pool { namespace, .. } | Target::Selector { namespace, .. } => namespace,
        }
    }
}

type Events<K> = BoxStream<'static, Result<Event<K>, watcher::Error>>;

/// Retry policy of both watches after an error (kube-rs reports a watch's `410 Gone` as one
/// before it lists again): 0.1 s, doubling with jitter up to 30 s, reset after 2 minutes
/// without error. kube-rs's default starts at 0.8 s (client-go's), which would leave a
/// missed DELETE in place for about a second; an expired watch is routine (the API server
/// compacts its history every few minutes), so the first retry is quick and repeated
/// failures still back off.
fn backoff() -> ResetTimerBackoff<watcher::ExponentialBackoff> {
    ResetTimerBackoff::new(
        watcher::ExponentialBackoff::from(
            backon::ExponentialBuilder::default()
                .with_min_delay(Duration::from_millis(100))
                .with_max_delay(Duration::from_secs(30))
                .with_factor(2.0)
                .with_jitter()
                .without_max_times(),
        ),
        Duration::from_secs(120),
    )
}

/// Watches a pool and its pods; see the module doc.
pub struct KubeWatcher {
    client: kube::Client,
    target: Target,
    pools: Option<Events<DynamicObject>>,
    pods: Option<Events<Pod>>,
    /// The pool's spec as last read (for a selector target: the selector and ports given).
    spec: Option<PoolSpec>,
    /// Label selector of the running pod watch.
    watching: Option<String>,
    /// Pods by name, as of the last complete list plus the events since.
    store: BTreeMap<String, Pod>,
    /// Pods of a list in progress (between `Init` and `InitDone`).
    listing: Option<BTreeMap<String, Pod>>,
    /// True once a complete pod list of the current selector was read.
    synced: bool,
    /// The last list yielded.
    last: Option<Vec<Endpoint>>,
    /// Pods skipped in the last computed list (logged when they change).
    skipped: Vec<Skipped>,
}

impl KubeWatcher {
    /// A watcher of `target` through `client`.
    ///
    /// Errors: a [`Target::Pool`] whose group is not an `InferencePool` group.
    pub fn new(client: kube::Client, target: Target) -> Result<Self, DiscoveryError> {
        let mut w = KubeWatcher {
            client,
            target: target.clone(),
            pools: None,
            pods: None,
            spec: None,
            watching: None,
            store: BTreeMap::new(),
            listing: None,
            synced: false,
            last: None,
            skipped: Vec::new(),
        };
        match target {
            Target::Pool {
                name,
                namespace,
                group,
            } => {
                let version = pool::version_of(&group).map_err(|message| DiscoveryError {
                    source_name: format!("{namespace}/{name}"),
                    message,
                })?;
                let resource = ApiResource {
                    group: group.clone(),
                    version: version.into(),
                    api_version: format!("{group}/{version}"),
                    kind: "InferencePool".into(),
                    plural: "inferencepools".into(),
                };
                let api: Api<DynamicObject> =
                    Api::namespaced_with(w.client.clone(), &namespace, &resource);
                let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
                w.pools = Some(watcher::watcher(api, config).backoff(backoff()).boxed());
            }
            Target::Selector {
                selector, ports, ..
            } => {
                w.spec = Some(PoolSpec {
                    selector: BTreeMap::new(),
                    ports,
                });
                w.watch_pods(selector);
            }
        }
        Ok(w)
    }

    /// (Re)starts the pod watch with `selector`; the store starts empty and unsynced.
    fn watch_pods(&mut self, selector: String) {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), self.target.namespace());
        let config = watcher::Config::default().labels(&selector);
        self.pods = Some(watcher::watcher(api, config).backoff(backoff()).boxed());
        self.watching = Some(selector);
        self.store.clear();
        self.listing = None;
        self.synced = false;
    }

    /// Applies one pool event; `Err` for a pool spec that cannot be used.
    fn on_pool(&mut self, event: Event<DynamicObject>) -> Result<(), DiscoveryError> {
        match event {
            Event::Apply(obj) | Event::InitApply(obj) => {
                let group = match &self.target {
                    Target::Pool { group, .. } => group.as_str(),
                    Target::Selector { .. } => return Ok(()),
                };
                let spec = pool::parse(group, &obj.data).map_err(|message| DiscoveryError {
                    source_name: self.name(),
                    message,
                })?;
                let selector = spec.selector_string();
                if self.watching.as_deref() != Some(selector.as_str()) {
                    tracing::info!(pool = %self.name(), %selector, "pool selector; watching its pods");
                    self.watch_pods(selector);
                }
                self.spec = Some(spec);
            }
            Event::Delete(_) => {
                tracing::warn!(pool = %self.name(), "InferencePool deleted; no endpoints until it is back");
                self.spec = None;
                self.pods = None;
                self.watching = None;
                self.store.clear();
                self.synced = true;
            }
            Event::InitDone if self.spec.is_none() => {
                tracing::warn!(pool = %self.name(), "InferencePool not found; waiting for it");
            }
            Event::Init | Event::InitDone => {}
        }
        Ok(())
    }

    /// Applies one pod event.
    fn on_pod(&mut self, event: Event<Pod>) {
        let key = |p: &Pod| p.metadata.name.clone().unwrap_or_default();
        match event {
            Event::Init => self.listing = Some(BTreeMap::new()),
            Event::InitApply(p) => {
                self.listing
                    .get_or_insert_with(BTreeMap::new)
                    .insert(key(&p), p);
            }
            Event::InitDone => {
                self.store = self.listing.take().unwrap_or_default();
                self.synced = true;
            }
            Event::Apply(p) => {
                self.store.insert(key(&p), p);
            }
            Event::Delete(p) => {
                self.store.remove(&key(&p));
            }
        }
    }

    /// The endpoint list when it is known and differs from the last one yielded.
    fn changed(&mut self) -> Option<Vec<Endpoint>> {
        let ready_to_yield = self.synced && (self.spec.is_some() || self.watching.is_none());
        if !ready_to_yield {
            return None;
        }
        let (eps, skipped) = match &self.spec {
            Some(spec) => pods::endpoints(self.store.values(), &spec.ports),
            None => (Vec::new(), Vec::new()),
        };
        if skipped != self.skipped {
            for s in &skipped {
                tracing::warn!(source = %self.name(), pod = %s.pod, reason = %s.reason, "pod left out of the endpoints");
            }
            self.skipped = skipped;
        }
        if self.last.as_ref() == Some(&eps) {
            return None;
        }
        self.last = Some(eps.clone());
        Some(eps)
    }
}

/// The next item of an optional stream; pending forever when there is none.
async fn next_of<K>(s: &mut Option<Events<K>>) -> Option<Result<Event<K>, watcher::Error>> {
    match s {
        Some(s) => s.next().await,
        None => std::future::pending().await,
    }
}

impl EndpointWatcher for KubeWatcher {
    fn name(&self) -> String {
        match &self.target {
            Target::Pool {
                name, namespace, ..
            } => format!("{namespace}/{name}"),
            Target::Selector {
                namespace,
                selector,
                ..
            } => format!("{namespace}/pods[{selector}]"),
        }
    }

    fn next(&mut self) -> BoxFuture<'_, Option<Result<Vec<Endpoint>, DiscoveryError>>> {
        Box::pin(async move {
            loop {
                tokio::select! {
                    ev = next_of(&mut self.pools) => match ev {
                        None => return None,
                        Some(Ok(ev)) => {
                            if let Err(e) = self.on_pool(ev) {
                                return Some(Err(e));
                            }
                        }
                        Some(Err(e)) => {
                            tracing::warn!(source = %self.name(), error = %e, "InferencePool watch failed; retrying");
                        }
                    },
                    ev = next_of(&mut self.pods) => match ev {
                        None => return None,
                        Some(Ok(ev)) => self.on_pod(ev),
                        Some(Err(e)) => {
                            tracing::warn!(source = %self.name(), error = %e, "pod watch failed; retrying");
                        }
                    },
                }
                if let Some(eps) = self.changed() {
                    return Some(Ok(eps));
                }
            }
        })
    }
}
