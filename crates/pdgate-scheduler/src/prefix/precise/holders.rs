//! The shared map canonical block hash → endpoints holding it: a bitset of endpoint ids whose
//! engines reported the block, plus speculative credits `(id, until_ms)` not yet confirmed.
//! Sharded by hash so that a writer holds one shard for one block at a time: a pick reading
//! a prompt's blocks never waits behind a whole event batch.

use crate::prefix::BuildPassThrough;
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
    /// Speculative credits: endpoint id, credited until this time (ms, caller's clock).
    spec: Vec<(u32, u64)>,
}

impl Holders {
    fn is_empty(&self) -> bool {
        self.spec.is_empty() && self.bits.iter().all(|w| *w == 0)
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

    fn drop_spec(&mut self, id: u32) {
        self.spec.retain(|(i, _)| *i != id);
    }
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

    /// Marks `h` as reported by endpoint `id` (a speculative credit of `id` becomes this).
    pub(super) fn confirm(&self, h: u64, id: u32) {
        let mut s = self.shard(h).write();
        let e = s.entry(h).or_default();
        e.set_bit(id);
        if !e.spec.is_empty() {
            e.drop_spec(id);
        }
    }

    /// Credits `h` to endpoint `id` speculatively until `until_ms`.
    pub(super) fn speculate(&self, h: u64, id: u32, until_ms: u64) {
        let mut s = self.shard(h).write();
        let e = s.entry(h).or_default();
        match e.spec.iter_mut().find(|(i, _)| *i == id) {
            Some(slot) => slot.1 = until_ms,
            None => e.spec.push((id, until_ms)),
        }
    }

    /// Drops every credit (confirmed or speculative) of endpoint `id` on `h`.
    pub(super) fn clear(&self, h: u64, id: u32) {
        let mut s = self.shard(h).write();
        if let Some(e) = s.get_mut(&h) {
            e.clear_bit(id);
            e.drop_spec(id);
            if e.is_empty() {
                s.remove(&h);
            }
        }
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
        for &(id, until) in &e.spec {
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
                    words * 8 + h.spec.capacity() * size_of::<(u32, u64)>()
                })
                .sum::<usize>();
        }
        (blocks, bytes)
    }
}
