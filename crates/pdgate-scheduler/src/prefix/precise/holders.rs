//! The shared map canonical block hash → endpoints holding it: a bitset of endpoint ids whose
//! engines reported the block, plus speculative credits `(id, until_ms)` not yet confirmed
//! and, for an endpoint that holds the block through several of its engine blocks, its
//! reference count. This map is the one record of every endpoint's credits (refcounts
//! included); an endpoint's own state keeps only its engine blocks and counts.
//! Sharded by hash so that a writer holds one shard for one block at a time: a pick reading
//! a prompt's blocks never waits behind a whole event batch.

use crate::prefix::passthrough::BuildPassThrough;
use parking_lot::RwLock;
use smallvec::SmallVec;
use std::collections::HashMap;

/// Number of shards (a power of two).
const SHARDS: usize = 16;

/// Who holds one canonical block.
#[derive(Debug, Default)]
pub(super) struct Holders {
    /// Bit `id` set: endpoint `id`'s engine reported the block (confirmed). Inline for
    /// ids below 64 (no allocation per block in small fleets).
    bits: SmallVec<[u64; 1]>,
    /// Speculative credits and extra references, when there are any (most blocks have
    /// neither: one pointer instead of two vectors keeps a map slot at 40 bytes).
    more: Option<Box<More>>,
}

/// The rarer parts of [`Holders`].
#[derive(Debug, Default)]
struct More {
    /// Speculative credits: endpoint id, credited until this time (ms, caller's clock).
    spec: Vec<(u32, u64)>,
    /// Confirmed endpoints whose engine reported the block more than once (several of its
    /// engine blocks produce this canonical block): id, references beyond the first.
    extra: Vec<(u32, u32)>,
}

impl Holders {
    fn is_empty(&self) -> bool {
        self.more.is_none() && self.bits.iter().all(|w| *w == 0)
    }

    fn has_bit(&self, id: u32) -> bool {
        self.bits
            .get(id as usize / 64)
            .is_some_and(|w| w & (1 << (id % 64)) != 0)
    }

    fn set_bit(&mut self, id: u32) {
        let w = id as usize / 64;
        if self.bits.len() <= w {
            self.bits.resize(w + 1, 0);
        }
        self.bits[w] |= 1 << (id % 64);
    }

    fn clear_bit(&mut self, id: u32) {
        if let Some(w) = self.bits.get_mut(id as usize / 64) {
            *w &= !(1 << (id % 64));
        }
    }

    fn spec(&self) -> &[(u32, u64)] {
        self.more.as_ref().map_or(&[], |m| &m.spec)
    }

    fn more(&mut self) -> &mut More {
        self.more.get_or_insert_with(Box::default)
    }

    /// Drops `more` once it holds nothing.
    fn tidy(&mut self) {
        if self
            .more
            .as_ref()
            .is_some_and(|m| m.spec.is_empty() && m.extra.is_empty())
        {
            self.more = None;
        }
    }

    /// Removes `id`'s speculative credit; returns its time when there was one.
    fn take_spec(&mut self, id: u32) -> Option<u64> {
        let m = self.more.as_mut()?;
        let i = m.spec.iter().position(|(i, _)| *i == id)?;
        let (_, until) = m.spec.swap_remove(i);
        self.tidy();
        Some(until)
    }
}

/// What [`Shards::confirm`] changed for the endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Confirmed {
    /// The endpoint held nothing of the block before.
    New,
    /// Its speculative credit became a confirmed one.
    FromSpeculative,
    /// It already held the block confirmed: one more reference.
    Again,
}

/// What [`Shards::speculate`] changed for the endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Speculated {
    /// A new speculative credit.
    Added,
    /// Its speculative credit now runs to the new time.
    Refreshed,
    /// Confirmed already: nothing changed.
    Held,
    /// Nothing held and no room to add (`may_add` false): nothing changed.
    Full,
}

type Map = HashMap<u64, Holders, BuildPassThrough>;

/// The sharded map.
#[derive(Debug)]
pub(super) struct Shards {
    shards: Box<[RwLock<Map>]>,
}

impl Default for Shards {
    fn default() -> Self {
        Shards {
            shards: (0..SHARDS).map(|_| RwLock::default()).collect(),
        }
    }
}

impl Shards {
    fn shard(&self, h: u64) -> &RwLock<Map> {
        // Middle bits: the map uses the low bits for buckets and the top 7 for tags.
        &self.shards[(h >> 40) as usize % SHARDS]
    }

    /// Endpoint `id`'s engine reported `h` (once more).
    pub(super) fn confirm(&self, h: u64, id: u32) -> Confirmed {
        let mut s = self.shard(h).write();
        let e = s.entry(h).or_default();
        if e.has_bit(id) {
            let extra = &mut e.more().extra;
            match extra.iter_mut().find(|(i, _)| *i == id) {
                Some(slot) => slot.1 += 1,
                None => extra.push((id, 1)),
            }
            return Confirmed::Again;
        }
        e.set_bit(id);
        match e.take_spec(id) {
            Some(_) => Confirmed::FromSpeculative,
            None => Confirmed::New,
        }
    }

    /// Drops one of endpoint `id`'s references to `h` (an engine block that produced it
    /// went); true when `id` no longer holds `h`.
    pub(super) fn release(&self, h: u64, id: u32) -> bool {
        let mut s = self.shard(h).write();
        let Some(e) = s.get_mut(&h) else {
            return false;
        };
        if let Some(m) = e.more.as_mut() {
            if let Some(i) = m.extra.iter().position(|(i, _)| *i == id) {
                m.extra[i].1 -= 1;
                if m.extra[i].1 == 0 {
                    m.extra.swap_remove(i);
                    e.tidy();
                }
                return false;
            }
        }
        if !e.has_bit(id) {
            return false;
        }
        e.clear_bit(id);
        if e.is_empty() {
            s.remove(&h);
        }
        true
    }

    /// Credits `h` to endpoint `id` speculatively until `until_ms`; a new credit only when
    /// `may_add`.
    pub(super) fn speculate(&self, h: u64, id: u32, until_ms: u64, may_add: bool) -> Speculated {
        let mut s = self.shard(h).write();
        if let Some(e) = s.get_mut(&h) {
            if e.has_bit(id) {
                return Speculated::Held;
            }
            if let Some(slot) = e
                .more
                .as_mut()
                .and_then(|m| m.spec.iter_mut().find(|(i, _)| *i == id))
            {
                slot.1 = until_ms;
                return Speculated::Refreshed;
            }
        }
        if !may_add {
            return Speculated::Full;
        }
        s.entry(h).or_default().more().spec.push((id, until_ms));
        Speculated::Added
    }

    /// Drops endpoint `id`'s speculative credit on `h` if it runs exactly to `until_ms`
    /// (an older time means it was refreshed since); true when dropped.
    pub(super) fn expire(&self, h: u64, id: u32, until_ms: u64) -> bool {
        self.drop_speculative_if(h, id, |u| u == until_ms)
    }

    /// Drops endpoint `id`'s speculative credit on `h`, whatever its time; true when
    /// dropped.
    pub(super) fn drop_speculative(&self, h: u64, id: u32) -> bool {
        self.drop_speculative_if(h, id, |_| true)
    }

    fn drop_speculative_if(&self, h: u64, id: u32, when: impl Fn(u64) -> bool) -> bool {
        let mut s = self.shard(h).write();
        let Some(e) = s.get_mut(&h) else {
            return false;
        };
        let Some(m) = e.more.as_mut() else {
            return false;
        };
        let Some(i) = m.spec.iter().position(|(i, u)| *i == id && when(*u)) else {
            return false;
        };
        m.spec.swap_remove(i);
        e.tidy();
        if e.is_empty() {
            s.remove(&h);
        }
        true
    }

    /// Drops every credit (confirmed or speculative, every reference) of endpoint `id` on
    /// `h`.
    pub(super) fn clear(&self, h: u64, id: u32) {
        let mut s = self.shard(h).write();
        if let Some(e) = s.get_mut(&h) {
            e.clear_bit(id);
            e.take_spec(id);
            if let Some(m) = e.more.as_mut() {
                m.extra.retain(|(i, _)| *i != id);
                e.tidy();
            }
            if e.is_empty() {
                s.remove(&h);
            }
        }
    }

    /// Whether endpoint `id` holds `h` (confirmed, or speculative at any time).
    pub(super) fn credits(&self, h: u64, id: u32) -> bool {
        let s = self.shard(h).read();
        s.get(&h)
            .is_some_and(|e| e.has_bit(id) || e.spec().iter().any(|(i, _)| *i == id))
    }

    /// Writes `alive ∩ holders(h)` to `out` (same length as `alive`): confirmed holders and
    /// speculative ones credited beyond `now_ms`.
    pub(super) fn held(&self, h: u64, alive: &[u64], now_ms: u64, out: &mut [u64]) {
        out.fill(0);
        let s = self.shard(h).read();
        let Some(e) = s.get(&h) else {
            return;
        };
        for ((o, a), b) in out.iter_mut().zip(alive).zip(&e.bits) {
            *o = a & b;
        }
        for &(id, until) in e.spec() {
            let (w, m) = (id as usize / 64, 1u64 << (id % 64));
            if until > now_ms && alive.get(w).is_some_and(|a| a & m != 0) {
                out[w] |= m;
            }
        }
    }

    /// Distinct blocks held by at least one endpoint, and an estimate of the heap used
    /// (bytes: map slots, bitset words, speculative credits).
    pub(super) fn size(&self) -> (usize, usize) {
        use std::mem::size_of;
        let slot = size_of::<u64>() + size_of::<Holders>() + 1;
        let (mut blocks, mut bytes) = (0, 0);
        for s in self.shards.iter() {
            let s = s.read();
            blocks += s.len();
            bytes += s.capacity() * slot;
            bytes += s
                .values()
                .map(|h| {
                    let words = if h.bits.spilled() {
                        h.bits.capacity()
                    } else {
                        0
                    };
                    words * 8
                        + h.more.as_ref().map_or(0, |m| {
                            size_of::<More>()
                                + m.spec.capacity() * size_of::<(u32, u64)>()
                                + m.extra.capacity() * size_of::<(u32, u32)>()
                        })
                })
                .sum::<usize>();
        }
        (blocks, bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::{Confirmed, Shards, Speculated};

    fn holds(s: &Shards, h: u64, id: u32, now: u64) -> bool {
        let mut out = [0u64; 2];
        s.held(h, &[u64::MAX, u64::MAX], now, &mut out);
        out[id as usize / 64] & (1 << (id % 64)) != 0
    }

    #[test]
    fn references_speculation_and_clear_per_endpoint() {
        let s = Shards::default();
        // Endpoint 70 (second bitset word) speculates, then confirms twice.
        assert_eq!(s.speculate(9, 70, 100, true), Speculated::Added);
        assert_eq!(s.speculate(9, 70, 200, true), Speculated::Refreshed);
        assert!(holds(&s, 9, 70, 150) && !holds(&s, 9, 70, 200));
        assert_eq!(s.confirm(9, 70), Confirmed::FromSpeculative);
        assert_eq!(s.confirm(9, 70), Confirmed::Again);
        assert_eq!(s.speculate(9, 70, 300, true), Speculated::Held);
        assert!(!s.expire(9, 70, 200), "a confirmed credit does not expire");
        // Two references: the first release keeps it, the second drops it.
        assert!(!s.release(9, 70));
        assert!(holds(&s, 9, 70, 1_000));
        assert!(s.release(9, 70));
        assert!(!holds(&s, 9, 70, 0));
        assert_eq!(s.size().0, 0, "an empty entry is removed");
        // No room: nothing is added; an expiry must name the credit's current time.
        assert_eq!(s.speculate(5, 1, 100, false), Speculated::Full);
        assert_eq!(s.size().0, 0);
        assert_eq!(s.speculate(5, 1, 100, true), Speculated::Added);
        assert_eq!(s.speculate(5, 1, 400, false), Speculated::Refreshed);
        assert!(!s.expire(5, 1, 100));
        assert!(s.expire(5, 1, 400));
        // Clear drops every reference and the speculation of one endpoint only.
        s.confirm(7, 1);
        s.confirm(7, 1);
        s.confirm(7, 2);
        s.speculate(7, 3, 100, true);
        s.clear(7, 1);
        assert!(!holds(&s, 7, 1, 0) && holds(&s, 7, 2, 0) && holds(&s, 7, 3, 50));
        assert!(!s.release(7, 1), "nothing left of endpoint 1");
        assert!(s.drop_speculative(7, 3));
        assert!(s.release(7, 2));
        assert_eq!(s.size().0, 0);
    }
}
