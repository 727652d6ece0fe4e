//! The bisection of a prompt's blocks behind [`super::PrefixIndex::match_lengths`]: with each
//! endpoint's blocks prefix-closed along a chain, the set of endpoints holding block *i* only
//! shrinks as *i* grows, so every endpoint's matched length is found with
//! O(distinct lengths × log blocks) lookups.

use super::passthrough::BuildPassThrough;
use smallvec::SmallVec;
use std::collections::HashMap;

/// The bisection of one match: `held(i)` is the set of asked-for
/// endpoints holding block *i*, non-increasing in *i*.
pub(super) struct Bisect<'a> {
    /// The index's block → endpoint-bitset map.
    pub(super) blocks: &'a HashMap<u64, Vec<u64>, BuildPassThrough>,
    /// The prompt's chained block hashes.
    pub(super) hashes: &'a [u64],
    /// Bitset of the asked-for endpoints.
    pub(super) alive: &'a [u64],
    /// Per endpoint id: its matched length, written by [`Self::split`].
    pub(super) depth: &'a mut [usize],
}

impl Bisect<'_> {
    /// The asked-for endpoints holding block `i` (inline up to 256 endpoints: a match
    /// probes a few blocks per distinct length, so a heap set per probe would cost more than
    /// the probe).
    fn held(&self, i: usize) -> SmallVec<[u64; 4]> {
        let set = self.blocks.get(&self.hashes[i]);
        self.alive
            .iter()
            .enumerate()
            .map(|(w, a)| a & set.and_then(|s| s.get(w)).copied().unwrap_or(0))
            .collect()
    }

    /// Given `before = held(lo - 1)` (all asked-for endpoints when `lo` is 0) and
    /// `after = held(hi)` (none when `hi` is the prompt's length), sets the depth of every
    /// endpoint in `before \ after`: the first block in `lo..=hi` it does not hold.
    pub(super) fn split(&mut self, lo: usize, hi: usize, before: &[u64], after: &[u64]) {
        if before == after {
            return;
        }
        if lo == hi {
            for (w, (b, a)) in before.iter().zip(after).enumerate() {
                let mut ended = b & !a;
                while ended != 0 {
                    self.depth[w * 64 + ended.trailing_zeros() as usize] = lo;
                    ended &= ended - 1;
                }
            }
            return;
        }
        let mid = lo + (hi - lo) / 2;
        let at = self.held(mid);
        self.split(lo, mid, before, &at);
        self.split(mid + 1, hi, &at, after);
    }
}
