//! One endpoint's engine blocks in store order: engine hash → record, evicted least recently
//! stored (or re-announced) first.
//!
//! A map with the records inline plus a queue of `(hash, stamp)` in store order; a record
//! carries the stamp of its latest store, so a queue entry whose stamp no longer matches
//! (the block was re-announced or removed since) is skipped when popped. Nothing is
//! allocated per block beyond the map's own slots (a linked LRU allocates a node per block;
//! this table is on the KV-event ingestion path, ~1 M blocks/s per core). The queue is
//! compacted when stale entries outnumber live ones, so it stays below twice the map plus
//! [`COMPACT_SLACK`] entries.

use pdgate_api::kv_events::EngineHash;
use std::collections::hash_map::Entry;
use std::collections::{HashMap, VecDeque};

type Fast = foldhash::fast::RandomState;

/// Stale queue entries tolerated before a compaction, beyond one per live block.
const COMPACT_SLACK: usize = 1024;

/// A record with the stamp of its latest store.
#[derive(Debug)]
struct Slot<V> {
    stamp: u64,
    value: V,
}

/// The table. `V` is the endpoint's per-block record.
#[derive(Debug)]
pub(super) struct EngineBlocks<V> {
    map: HashMap<EngineHash, Slot<V>, Fast>,
    order: VecDeque<(EngineHash, u64)>,
    next: u64,
}

impl<V> Default for EngineBlocks<V> {
    fn default() -> Self {
        EngineBlocks {
            map: HashMap::default(),
            order: VecDeque::new(),
            next: 0,
        }
    }
}

impl<V> EngineBlocks<V> {
    /// Blocks held.
    pub(super) fn len(&self) -> usize {
        self.map.len()
    }

    /// The record of `h`, without touching its order.
    pub(super) fn peek(&self, h: &EngineHash) -> Option<&V> {
        self.map.get(h).map(|s| &s.value)
    }

    /// The record of `h`, mutable, without touching its order.
    pub(super) fn peek_mut(&mut self, h: &EngineHash) -> Option<&mut V> {
        self.map.get_mut(h).map(|s| &mut s.value)
    }

    /// The record of `h`, moved to the most recent end (a re-announced block).
    pub(super) fn touch(&mut self, h: &EngineHash) -> Option<&V> {
        let stamp = self.next;
        let slot = self.map.get_mut(h)?;
        self.next += 1;
        slot.stamp = stamp;
        self.order.push_back((*h, stamp));
        self.compact_if_stale();
        self.map.get(h).map(|s| &s.value)
    }

    /// Inserts `h` as the most recent block (replacing a record already there).
    pub(super) fn put(&mut self, h: EngineHash, value: V) {
        let stamp = self.next;
        self.next += 1;
        match self.map.entry(h) {
            Entry::Occupied(mut o) => *o.get_mut() = Slot { stamp, value },
            Entry::Vacant(v) => {
                v.insert(Slot { stamp, value });
            }
        }
        self.order.push_back((h, stamp));
        self.compact_if_stale();
    }

    /// Removes `h`; its queue entry goes stale.
    pub(super) fn pop(&mut self, h: &EngineHash) -> Option<V> {
        self.map.remove(h).map(|s| s.value)
    }

    /// Removes the least recently stored block.
    pub(super) fn pop_oldest(&mut self) -> Option<(EngineHash, V)> {
        while let Some((h, stamp)) = self.order.pop_front() {
            if let Entry::Occupied(o) = self.map.entry(h) {
                if o.get().stamp == stamp {
                    return Some((h, o.remove().value));
                }
            }
        }
        None
    }

    /// Drops every block.
    pub(super) fn clear(&mut self) {
        self.map = HashMap::default();
        self.order = VecDeque::new();
    }

    /// Every record, in no particular order.
    pub(super) fn values(&self) -> impl Iterator<Item = &V> {
        self.map.values().map(|s| &s.value)
    }

    /// Heap estimate (bytes): map slots and queue entries.
    pub(super) fn bytes(&self) -> usize {
        use std::mem::size_of;
        self.map.capacity() * (size_of::<EngineHash>() + size_of::<Slot<V>>() + 1)
            + self.order.capacity() * size_of::<(EngineHash, u64)>()
    }

    fn compact_if_stale(&mut self) {
        if self.order.len() > 2 * self.map.len() + COMPACT_SLACK {
            let map = &self.map;
            self.order
                .retain(|(h, stamp)| map.get(h).is_some_and(|s| s.stamp == *stamp));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::EngineBlocks;

    #[test]
    fn oldest_first_with_touch_and_removal() {
        let mut t = EngineBlocks::default();
        for h in 1..=4u64 {
            t.put(h, h * 10);
        }
        assert_eq!(t.touch(&2), Some(&20)); // 2 is now the most recent
        assert_eq!(t.pop(&1), Some(10));
        assert_eq!(t.touch(&9), None);
        assert_eq!(t.pop_oldest(), Some((3, 30)));
        assert_eq!(t.pop_oldest(), Some((4, 40)));
        t.put(5, 50);
        t.put(2, 21); // replaced: its older entries are stale
        assert_eq!(t.pop_oldest(), Some((5, 50)));
        assert_eq!(t.pop_oldest(), Some((2, 21)));
        assert_eq!(t.pop_oldest(), None);
        assert_eq!(t.len(), 0);
    }

    #[test]
    fn the_queue_stays_bounded_under_repeated_touches() {
        let mut t = EngineBlocks::default();
        for h in 0..100u64 {
            t.put(h, ());
        }
        for i in 0..100_000u64 {
            t.touch(&(i % 100));
        }
        assert!(
            t.order.len() <= 2 * 100 + super::COMPACT_SLACK + 1,
            "{}",
            t.order.len()
        );
        // Order is still exact: 100 touched last... the oldest is the least recently touched.
        assert_eq!(t.pop_oldest().map(|(h, _)| h), Some(0));
        assert_eq!(t.len(), 99);
    }
}
