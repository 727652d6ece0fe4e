//! The endpoint registry: the current [`Snapshot`] that both front ends schedule over, and
//! the per-endpoint load cells (in-flight bookings, scraped gauges, model lists) that outlive
//! snapshots.
//!
//! An endpoint's readiness in the snapshot ([`Endpoint::ready`], read through
//! [`Endpoint::schedulable`] by every pick) is discovery's (Kubernetes readiness, the
//! endpoints file's `ready`) and the scraper's: an endpoint whose `/metrics` went unanswered
//! [`crate::scrape::health::UNREADY_AFTER`] times in a row is published not Ready until a
//! scrape is answered ([`EndpointRegistry::set_unanswered`]) — unless that would leave no
//! endpoint Ready at all (then none is taken out: fail open).

use crate::log_limit::{allow, Site};
use arc_swap::ArcSwap;
use parking_lot::Mutex;
use pdgate_scheduler::{Endpoint, EndpointLoad, EndpointState, Snapshot};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Called with every new snapshot, right after it is swapped in.
pub type SnapshotListener = Box<dyn Fn(&Snapshot) + Send + Sync>;

/// Holds the current [`Snapshot`] and the per-endpoint load cells that outlive snapshots.
///
/// Bound: one load cell per endpoint of the current list; a cell whose endpoint left is
/// retired ([`EndpointLoad::retire`]) and dropped, and a name that comes back gets a new one.
/// Besides, the list as discovery gave it and the names of unanswered endpoints (at most one
/// entry per current endpoint each).
#[derive(Default)]
pub struct EndpointRegistry {
    snapshot: ArcSwap<Snapshot>,
    state: Mutex<State>,
    /// True once a first endpoint list was applied (an empty one counts).
    known: std::sync::atomic::AtomicBool,
    /// Told of every new snapshot (state keyed by endpoint name forgets departed ones).
    listeners: Mutex<Vec<SnapshotListener>>,
    counters: FleetCounters,
}

/// What the snapshot is built from.
#[derive(Default)]
struct State {
    loads: HashMap<String, Arc<EndpointLoad>>,
    /// The list discovery applied last, as it was (its readiness).
    discovered: Vec<Endpoint>,
    /// Endpoints whose `/metrics` went unanswered `UNREADY_AFTER` times in a row.
    unanswered: HashSet<String>,
    /// The endpoints the last snapshot took out of the candidates (discovery's Ready ones
    /// that are unanswered, unless that is all of them).
    out: HashSet<String>,
    /// The last snapshot kept unanswered endpoints Ready because none would be left.
    failing_open: bool,
}

/// Counts of the fleet's own decisions, for a front end to export as Prometheus counters
/// (the names it should use are given per count). Totals since start.
#[derive(Debug, Default)]
pub struct FleetCounters {
    unready: AtomicU64,
    ready_again: AtomicU64,
    models_refused: AtomicU64,
}

impl FleetCounters {
    /// Endpoints taken out of the candidates after
    /// [`crate::scrape::health::UNREADY_AFTER`] unanswered scrapes in a row
    /// (`pdgate_endpoint_unready_total`).
    pub fn unready_total(&self) -> u64 {
        self.unready.load(Ordering::Relaxed)
    }
    /// Endpoints back among the candidates after such a spell, on an answered scrape
    /// (`pdgate_endpoint_ready_again_total`).
    pub fn ready_again_total(&self) -> u64 {
        self.ready_again.load(Ordering::Relaxed)
    }
    /// Engine `/v1/models` answers refused for being over a bound
    /// ([`crate::scrape::models::ModelsError::over_limit`]; `pdgate_models_answers_refused_total`).
    pub fn models_refused_total(&self) -> u64 {
        self.models_refused.load(Ordering::Relaxed)
    }
    pub(crate) fn count_models_refused(&self) {
        self.models_refused.fetch_add(1, Ordering::Relaxed);
    }
}

/// Log sites (one line per second each at most, [`crate::log_limit`]).
static UNREADY_LOG: Site = Site::new(0);
static READY_AGAIN_LOG: Site = Site::new(0);
static FAIL_OPEN_LOG: Site = Site::new(0);

impl EndpointRegistry {
    /// The current snapshot (cheap: an `Arc` load).
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.snapshot.load_full()
    }

    /// The fleet's counts (endpoints out of and back among the candidates, refused model
    /// lists).
    pub fn counters(&self) -> &FleetCounters {
        &self.counters
    }

    /// Sum of in-flight bookings over every current endpoint (idle: 0).
    pub fn in_flight_total(&self) -> u32 {
        let snap = self.snapshot();
        snap.endpoints.iter().map(|e| e.load.in_flight()).sum()
    }

    /// False only when endpoints are known, every model list is known and none has
    /// `model`: the request is then answered 404. Unknown lists keep the request (fail open).
    pub fn model_may_exist(&self, model: &str) -> bool {
        let snap = self.snapshot();
        snap.endpoints.is_empty() || snap.endpoints.iter().any(|e| e.load.serves(model))
    }

    /// True once any endpoint list was applied.
    pub fn is_known(&self) -> bool {
        self.known.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Calls `listener` with every snapshot applied from now on (under the registry's lock,
    /// so listeners see snapshots in order; keep them short and never call back into
    /// [`Self::apply`]).
    pub fn on_change(&self, listener: SnapshotListener) {
        self.listeners.lock().push(listener);
    }

    /// Replaces the endpoint set. Load cells (in-flight counts, scraped gauges) carry over by
    /// endpoint name, so in-flight requests on a kept endpoint stay counted; the cells of
    /// endpoints that left are retired. An endpoint the scraper found unanswered stays out
    /// of the candidates unless its address changed. Listeners then see the new snapshot.
    pub fn apply(&self, endpoints: Vec<Endpoint>) {
        let mut st = self.state.lock();
        let before: HashMap<&str, &str> = (st.discovered.iter())
            .map(|e| (e.name.as_str(), e.address.as_str()))
            .collect();
        let kept: HashSet<String> = (endpoints.iter())
            .filter(|e| before.get(e.name.as_str()) == Some(&e.address.as_str()))
            .map(|e| e.name.clone())
            .collect();
        st.unanswered.retain(|n| kept.contains(n));
        let mut next = HashMap::with_capacity(endpoints.len());
        for e in &endpoints {
            let load = st.loads.remove(&e.name).unwrap_or_default();
            next.insert(e.name.clone(), load);
        }
        for gone in st.loads.values() {
            gone.retire();
        }
        st.loads = next;
        st.discovered = endpoints;
        self.publish(&mut st);
    }

    /// Sets the endpoints whose `/metrics` went unanswered
    /// [`crate::scrape::health::UNREADY_AFTER`] times in a row (the scraper's whole current
    /// set, every tick): they are published not Ready — no scheduling candidates — until
    /// they leave the set, unless none would be left Ready (then all stay: fail open, so a
    /// fleet whose `/metrics` cannot be reached at all, say a wrong metrics port, keeps
    /// serving). Names not in the current list are ignored. A new snapshot is published only
    /// when the set changed; each endpoint that leaves or rejoins the candidates is counted
    /// ([`FleetCounters`]) and logged (at most one line per second for each direction).
    pub fn set_unanswered<'a>(&self, names: impl IntoIterator<Item = &'a str>) {
        let mut st = self.state.lock();
        let now: HashSet<&str> = (names.into_iter())
            .filter(|n| st.loads.contains_key(*n))
            .collect();
        if now.len() == st.unanswered.len() && now.iter().all(|n| st.unanswered.contains(*n)) {
            return;
        }
        st.unanswered = now.into_iter().map(str::to_string).collect();
        self.publish(&mut st);
    }

    /// Builds the snapshot of `st` (discovery's list, readiness less the unanswered ones),
    /// swaps it in and tells the listeners, under the state lock; counts and logs the
    /// endpoints that left or rejoined the candidates.
    fn publish(&self, st: &mut State) {
        let ready = st.discovered.iter().filter(|e| e.schedulable()).count();
        let mut out: HashSet<String> = (st.discovered.iter())
            .filter(|e| e.schedulable() && st.unanswered.contains(&e.name))
            .map(|e| e.name.clone())
            .collect();
        let fail_open = !out.is_empty() && out.len() == ready;
        if fail_open {
            if !st.failing_open && allow(&FAIL_OPEN_LOG) {
                tracing::warn!(
                    endpoints = ready,
                    "every Ready endpoint's /metrics goes unanswered; all stay scheduling \
                     candidates (fail open)"
                );
            }
            out.clear();
        }
        st.failing_open = fail_open;
        let left: Vec<&String> = out.iter().filter(|n| !st.out.contains(*n)).collect();
        let back: Vec<&String> = (st.discovered.iter())
            .filter(|e| e.schedulable() && st.out.contains(&e.name) && !out.contains(&e.name))
            .map(|e| &e.name)
            .collect();
        let c = &self.counters;
        c.unready.fetch_add(left.len() as u64, Ordering::Relaxed);
        c.ready_again
            .fetch_add(back.len() as u64, Ordering::Relaxed);
        if !left.is_empty() && allow(&UNREADY_LOG) {
            tracing::warn!(
                endpoint = %left[0], now = left.len(), out = out.len(),
                "endpoint no longer a scheduling candidate: its /metrics went unanswered {} \
                 times in a row", crate::scrape::health::UNREADY_AFTER
            );
        }
        if !back.is_empty() && allow(&READY_AGAIN_LOG) {
            tracing::info!(
                endpoint = %back[0], now = back.len(), out = out.len(),
                "endpoint a scheduling candidate again: its /metrics answered"
            );
        }
        let states = (st.discovered.iter())
            .map(|e| {
                let mut endpoint = e.clone();
                if out.contains(&e.name) {
                    endpoint.ready = false;
                }
                let load = st.loads.get(&e.name).cloned().unwrap_or_default();
                Arc::new(EndpointState { endpoint, load })
            })
            .collect();
        st.out = out;
        let version = self.snapshot.load().version + 1;
        let snap = Arc::new(Snapshot {
            endpoints: states,
            version,
        });
        self.snapshot.store(snap.clone());
        self.known.store(true, std::sync::atomic::Ordering::Release);
        for listener in self.listeners.lock().iter() {
            listener(&snap);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ep(name: &str, ready: bool) -> Endpoint {
        let mut e = Endpoint::new(
            name,
            format!("127.0.0.1:{}", name.len()),
            Default::default(),
        );
        e.ready = ready;
        e
    }

    fn ready(r: &EndpointRegistry) -> Vec<(String, bool)> {
        (r.snapshot().endpoints.iter())
            .map(|e| (e.endpoint.name.clone(), e.endpoint.schedulable()))
            .collect()
    }

    fn row(name: &str, ready: bool) -> (String, bool) {
        (name.to_string(), ready)
    }

    #[test]
    fn unanswered_endpoints_leave_the_candidates_unless_none_would_be_left() {
        let r = EndpointRegistry::default();
        r.apply(vec![ep("a", true), ep("bb", true), ep("ccc", false)]);
        let load_a = r.snapshot().endpoints[0].load.clone();
        r.set_unanswered(["a", "gone"]);
        assert_eq!(
            ready(&r),
            [row("a", false), row("bb", true), row("ccc", false)]
        );
        assert!(Arc::ptr_eq(&r.snapshot().endpoints[0].load, &load_a));
        let version = r.snapshot().version;
        r.set_unanswered(["a"]);
        assert_eq!(r.snapshot().version, version, "no change, no new snapshot");
        // Discovery re-applies the same list: a stays out; bb then goes unanswered too: no
        // Ready endpoint would be left, so all of discovery's Ready ones stay in (a counts as
        // back).
        r.apply(vec![ep("a", true), ep("bb", true), ep("ccc", false)]);
        assert_eq!(ready(&r)[0], row("a", false));
        r.set_unanswered(["a", "bb"]);
        assert_eq!(
            ready(&r),
            [row("a", true), row("bb", true), row("ccc", false)]
        );
        // a answers again: bb alone is out.
        r.set_unanswered(["bb"]);
        assert_eq!(
            ready(&r),
            [row("a", true), row("bb", false), row("ccc", false)]
        );
        let c = r.counters();
        assert_eq!((c.unready_total(), c.ready_again_total()), (2, 1));
        // bb moves to another address: its health is unknown again.
        let mut moved = ep("bb", true);
        moved.address = "127.0.0.1:9".into();
        r.apply(vec![ep("a", true), moved]);
        assert_eq!(ready(&r), [row("a", true), row("bb", true)]);
        assert_eq!((c.unready_total(), c.ready_again_total()), (2, 2));
    }
}
