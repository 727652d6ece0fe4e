//! Stateful session affinity (`x-session-id`, design.md §5.3): a bounded table binding a
//! session to one endpoint per phase, with a time-to-live refreshed on every use.
//!
//! The scheduler keeps a request on its session's endpoint while that endpoint is still a
//! candidate (Ready, not terminating, in the request's revision, passing the phase profile's
//! filters); otherwise it chooses freely and [`SessionTable::bind`] rebinds the session to
//! the new pick, so a session moves once when its endpoint leaves and then stays.

use lru::LruCache;
use parking_lot::Mutex;
use pdgate_api::Phase;
use pdgate_scheduler::{SchedulingResult, SessionBinding};
use std::num::NonZeroUsize;
use std::time::Duration;
use tokio::time::Instant;

/// Default session time-to-live: 10 minutes since last use.
pub const DEFAULT_SESSION_TTL: Duration = Duration::from_secs(600);
/// Default table capacity (sessions); the least recently used one is evicted beyond it.
pub const DEFAULT_SESSION_CAPACITY: usize = 65_536;

struct Entry {
    binding: SessionBinding,
    expires: Instant,
}

/// Session id → endpoints by phase, bounded (LRU) and expiring.
pub struct SessionTable {
    ttl: Duration,
    entries: Mutex<LruCache<String, Entry>>,
}

impl Default for SessionTable {
    fn default() -> Self {
        SessionTable::new(DEFAULT_SESSION_TTL, DEFAULT_SESSION_CAPACITY)
    }
}

impl SessionTable {
    /// A table of at most `capacity` sessions (≥ 1), each living `ttl` after its last use.
    pub fn new(ttl: Duration, capacity: usize) -> Self {
        SessionTable {
            ttl,
            entries: Mutex::new(LruCache::new(
                NonZeroUsize::new(capacity.max(1)).expect("capacity ≥ 1"),
            )),
        }
    }

    /// The binding of `session` at `now`, if it has one that has not expired.
    pub fn lookup(&self, session: &str, now: Instant) -> Option<SessionBinding> {
        let mut entries = self.entries.lock();
        match entries.get(session) {
            Some(e) if e.expires > now => Some(e.binding.clone()),
            Some(_) => {
                entries.pop(session);
                None
            }
            None => None,
        }
    }

    /// Binds `session` to the endpoints `result` picked (prefill pick → prefill; decode or
    /// aggregated pick → decode), keeping a phase's earlier binding when this request did
    /// not run that phase, and refreshes its time-to-live.
    pub fn bind(&self, session: &str, result: &SchedulingResult, now: Instant) {
        let name = |p: &pdgate_scheduler::Pick| p.endpoint.endpoint.name.clone();
        let (mut prefill, mut decode) = (result.prefill.as_ref().map(name), None);
        match result.decode.phase {
            Phase::Prefill => prefill = Some(name(&result.decode)),
            Phase::Encode => {}
            _ => decode = Some(name(&result.decode)),
        }
        self.bind_names(session, prefill, decode, now);
    }

    /// Binds the phases given (`None` keeps a phase's earlier binding) and refreshes the
    /// session's time-to-live.
    pub fn bind_names(
        &self,
        session: &str,
        prefill: Option<String>,
        decode: Option<String>,
        now: Instant,
    ) {
        let mut entries = self.entries.lock();
        let mut binding = entries
            .pop(session)
            .filter(|e| e.expires > now)
            .map(|e| e.binding)
            .unwrap_or_default();
        if prefill.is_some() {
            binding.prefill = prefill;
        }
        if decode.is_some() {
            binding.decode = decode;
        }
        entries.put(
            session.to_string(),
            Entry {
                binding,
                expires: now + self.ttl,
            },
        );
    }

    /// Sessions in the table (expired ones included until they are looked up or evicted).
    pub fn len(&self) -> usize {
        self.entries.lock().len()
    }

    /// True when the table is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(b: Option<SessionBinding>) -> (Option<String>, Option<String>) {
        b.map(|b| (b.prefill, b.decode)).unwrap_or_default()
    }

    #[test]
    fn bindings_expire_after_the_ttl_since_last_use_and_the_table_is_bounded() {
        let t = SessionTable::new(Duration::from_secs(10), 2);
        let now = Instant::now();
        t.bind_names("s", Some("p0".into()), Some("d0".into()), now);
        // A later request that ran only decode keeps the prefill binding.
        t.bind_names("s", None, Some("d1".into()), now + Duration::from_secs(5));
        let s = |o: &str| Some(o.to_string());
        assert_eq!(
            names(t.lookup("s", now + Duration::from_secs(14))),
            (s("p0"), s("d1"))
        );
        // 10 s after its last use (at 5 s) it is gone.
        assert_eq!(
            names(t.lookup("s", now + Duration::from_secs(15))),
            (None, None)
        );
        assert!(t.is_empty());
        // Capacity 2: the least recently used session is evicted.
        for id in ["a", "b", "c"] {
            t.bind_names(id, None, Some(format!("d-{id}")), now);
        }
        assert_eq!(t.len(), 2);
        assert_eq!(names(t.lookup("a", now)), (None, None));
        assert_eq!(names(t.lookup("c", now)), (None, s("d-c")));
    }
}
