//! The endpoint registry: the current [`Snapshot`] that both front ends schedule over, and
//! the per-endpoint load cells (in-flight bookings, scraped gauges, model lists) that outlive
//! snapshots.

use arc_swap::ArcSwap;
use parking_lot::Mutex;
use pdgate_scheduler::{Endpoint, EndpointLoad, EndpointState, Snapshot};
use std::collections::HashMap;
use std::sync::Arc;

/// Called with every new snapshot, right after it is swapped in.
pub type SnapshotListener = Box<dyn Fn(&Snapshot) + Send + Sync>;

/// Holds the current [`Snapshot`] and the per-endpoint load cells that outlive snapshots.
///
/// Bound: one load cell per endpoint of the current list; a cell whose endpoint left is
/// retired ([`EndpointLoad::retire`]) and dropped, and a name that comes back gets a new one.
#[derive(Default)]
pub struct EndpointRegistry {
    snapshot: ArcSwap<Snapshot>,
    loads: Mutex<HashMap<String, Arc<EndpointLoad>>>,
    /// True once a first endpoint list was applied (an empty one counts).
    known: std::sync::atomic::AtomicBool,
    /// Told of every new snapshot (state keyed by endpoint name forgets departed ones).
    listeners: Mutex<Vec<SnapshotListener>>,
}

impl EndpointRegistry {
    /// The current snapshot (cheap: an `Arc` load).
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.snapshot.load_full()
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
    /// endpoints that left are retired. Listeners then see the new snapshot.
    pub fn apply(&self, endpoints: Vec<Endpoint>) {
        let mut loads = self.loads.lock();
        let mut next = HashMap::with_capacity(endpoints.len());
        let states = endpoints
            .into_iter()
            .map(|endpoint| {
                let load = loads.remove(&endpoint.name).unwrap_or_default();
                next.insert(endpoint.name.clone(), load.clone());
                Arc::new(EndpointState { endpoint, load })
            })
            .collect();
        for gone in loads.values() {
            gone.retire();
        }
        *loads = next;
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
