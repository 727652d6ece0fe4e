//! Per-revision decision counts of the rollout screener
//! (`pdgate_revision_decisions_total{revision}`): bumped on every screened request without a
//! lock (an atomic add on the revision's counter), the set of revisions changed (a revision
//! seen first, revisions gone) copy-on-write under a writer lock.

use arc_swap::ArcSwap;
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Requests screened to each revision.
#[derive(Default)]
pub struct DecisionCounts {
    counts: ArcSwap<BTreeMap<String, Arc<AtomicU64>>>,
    write: Mutex<()>,
}

impl DecisionCounts {
    /// One more request screened to `revision`.
    pub fn count(&self, revision: &str) {
        if let Some(n) = self.counts.load().get(revision) {
            n.fetch_add(1, Ordering::Relaxed);
            return;
        }
        self.update(|m| {
            m.entry(revision.to_string())
                .or_default()
                .fetch_add(1, Ordering::Relaxed);
        });
    }

    /// Keeps only the revisions for which `keep` holds (those that still have endpoints).
    pub fn retain(&self, keep: impl Fn(&str) -> bool) {
        if self.counts.load().keys().all(|r| keep(r)) {
            return;
        }
        self.update(|m| m.retain(|r, _| keep(r)));
    }

    /// (revision, count), by revision.
    pub fn snapshot(&self) -> Vec<(String, u64)> {
        (self.counts.load().iter())
            .map(|(r, n)| (r.clone(), n.load(Ordering::Relaxed)))
            .collect()
    }

    fn update(&self, f: impl FnOnce(&mut BTreeMap<String, Arc<AtomicU64>>)) {
        let _w = self.write.lock();
        let mut m = BTreeMap::clone(&self.counts.load());
        f(&mut m);
        self.counts.store(Arc::new(m));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_follow_revisions_and_forget_the_ones_gone() {
        let d = DecisionCounts::default();
        for r in ["b", "a", "b", "b"] {
            d.count(r);
        }
        assert_eq!(d.snapshot(), [("a".to_string(), 1), ("b".to_string(), 3)]);
        d.retain(|r| r == "b");
        assert_eq!(d.snapshot(), [("b".to_string(), 3)]);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| (0..1000).for_each(|_| d.count("b")));
            }
        });
        assert_eq!(d.snapshot(), [("b".to_string(), 4003)]);
    }
}
