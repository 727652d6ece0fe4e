//! [`RequestState`]: what the scheduler keeps of one request after `schedule` (block hashes,
//! plugin values), shared by its bookings and read by the response-time hooks.

use std::any::Any;
use std::sync::OnceLock;

/// State of one request that outlives `schedule`: the prompt's block hashes per prefix
/// producer and values plugins keep between hooks (e.g. a screener's draw). Shared by the
/// request's [`crate::Booking`]s; read by `ResponseHeader` and `RequestAbandoned` hooks.
pub struct RequestState {
    hashes: Vec<OnceLock<Vec<u64>>>,
    values: parking_lot::Mutex<Vec<(&'static str, Box<dyn Any + Send + Sync>)>>,
}

impl RequestState {
    /// A state with room for the block hashes of `producers` prefix producers.
    pub(crate) fn new(producers: usize) -> Self {
        RequestState {
            hashes: (0..producers).map(|_| OnceLock::new()).collect(),
            values: parking_lot::Mutex::new(Vec::new()),
        }
    }

    /// The cell of producer `slot`'s block hashes (computed once, on first use), `None` past
    /// the producers this state was made for.
    pub(crate) fn hash_cell(&self, slot: usize) -> Option<&OnceLock<Vec<u64>>> {
        self.hashes.get(slot)
    }

    /// The prompt's block hashes under producer `slot`, if they were computed.
    pub fn block_hashes(&self, slot: usize) -> Option<&[u64]> {
        self.hashes.get(slot)?.get().map(Vec::as_slice)
    }

    /// Stores `value` under `key` (a plugin's name or type), replacing an earlier one.
    pub fn set<T: Any + Send + Sync>(&self, key: &'static str, value: T) {
        let mut v = self.values.lock();
        v.retain(|(k, _)| *k != key);
        v.push((key, Box::new(value)));
    }

    /// A clone of the value under `key`, if one of type `T` was stored.
    pub fn get<T: Any + Clone>(&self, key: &'static str) -> Option<T> {
        let v = self.values.lock();
        v.iter()
            .find(|(k, _)| *k == key)
            .and_then(|(_, b)| b.downcast_ref::<T>().cloned())
    }
}
