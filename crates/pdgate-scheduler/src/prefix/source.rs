//! [`PrefixSource`]: the index a prefix consumer (`prefix-cache-scorer`,
//! `prefix-based-pd-decider`) reads through `prefixMatchInfoProducerName` — approximate
//! (the router's own picks, matched by bisection) or precise (engine KV events, matched by a
//! walk) or the burst producer's placements (`burst-prefix-cache-producer`). One enum,
//! resolved once at config load by `BuildCtx::producer`.

use super::burst::BurstIndex;
use super::hash::BlockHasher;
use super::index::{PrefixIndex, PrefixStats};
use super::precise::PreciseIndex;
use crate::endpoint::EndpointState;
use crate::request_state::RequestState;
use std::sync::Arc;

/// A prefix producer's index.
#[derive(Debug, Clone)]
pub enum PrefixSource {
    /// `approx-prefix-cache-producer`.
    Approx(Arc<PrefixIndex>),
    /// `precise-prefix-cache-producer`.
    Precise(Arc<PreciseIndex>),
    /// `burst-prefix-cache-producer`: not an index of cached blocks but a per-request
    /// placement; it answers only through [`Self::match_lengths_for`] and
    /// [`Self::match_length_for`], which know the request.
    Burst(Arc<BurstIndex>),
}

impl PrefixSource {
    /// The producer's slot in the per-request hash cache.
    pub fn slot(&self) -> usize {
        match self {
            PrefixSource::Approx(i) => i.slot(),
            PrefixSource::Precise(i) => i.slot(),
            PrefixSource::Burst(i) => i.slot(),
        }
    }

    /// How prompts are cut and hashed.
    pub fn hasher(&self) -> BlockHasher {
        match self {
            PrefixSource::Approx(i) => i.hasher(),
            PrefixSource::Precise(i) => i.hasher(),
            PrefixSource::Burst(i) => i.hasher(),
        }
    }

    /// Tokens per block.
    pub fn block_tokens(&self) -> usize {
        self.hasher().block_tokens
    }

    /// [`Self::match_lengths`] for the request whose state is `state`, scheduled at `now_ms`
    /// (ms, [`crate::monotonic_ms`] clock): the burst producer places the request among
    /// `endpoints` (once per candidate set, at `now_ms`) and answers from its placement; the
    /// others ignore `state`.
    pub fn match_lengths_for(
        &self,
        state: &RequestState,
        hashes: &[u64],
        endpoints: &[&Arc<EndpointState>],
        now_ms: u64,
        out: &mut Vec<usize>,
    ) {
        match self {
            PrefixSource::Burst(i) => i.match_lengths_at(state, hashes, endpoints, now_ms, out),
            _ => self.match_lengths(hashes, endpoints, now_ms, out),
        }
    }

    /// [`Self::match_length`] at `now_ms` for the request whose state is `state` (the burst
    /// producer: all of `hashes` when the request was placed on `endpoint`, else 0).
    pub fn match_length_for(
        &self,
        state: &RequestState,
        hashes: &[u64],
        endpoint: &EndpointState,
        now_ms: u64,
    ) -> usize {
        match self {
            PrefixSource::Burst(i) => i.match_length_for(state, hashes, endpoint),
            _ => self.match_length(hashes, endpoint, now_ms),
        }
    }

    /// Matched prefix blocks of `hashes` on each of `endpoints` at `now_ms` (ms,
    /// [`crate::monotonic_ms`] clock), written to `out` (the precise index counts the
    /// speculative credits still valid at `now_ms`; the burst producer, without a request to
    /// place, answers 0).
    pub fn match_lengths(
        &self,
        hashes: &[u64],
        endpoints: &[&Arc<EndpointState>],
        now_ms: u64,
        out: &mut Vec<usize>,
    ) {
        match self {
            PrefixSource::Approx(i) => i.match_lengths(hashes, endpoints, out),
            PrefixSource::Precise(i) => i.match_lengths_at(hashes, endpoints, now_ms, out),
            PrefixSource::Burst(_) => {
                out.clear();
                out.resize(endpoints.len(), 0);
            }
        }
    }

    /// Matched prefix blocks of `hashes` on `endpoint` at `now_ms` (as [`Self::match_lengths`]).
    pub fn match_length(&self, hashes: &[u64], endpoint: &EndpointState, now_ms: u64) -> usize {
        match self {
            PrefixSource::Approx(i) => i.match_length(hashes, endpoint),
            PrefixSource::Precise(i) => i.match_length_at(hashes, endpoint, now_ms),
            PrefixSource::Burst(_) => 0,
        }
    }

    /// Blocks credited to endpoint `name`.
    pub fn blocks_held(&self, name: &str) -> usize {
        match self {
            PrefixSource::Approx(i) => i.blocks_held(name),
            PrefixSource::Precise(i) => i.blocks_held(name),
            PrefixSource::Burst(_) => 0,
        }
    }

    /// Forgets endpoint `name`; whether it had an entry.
    pub fn forget(&self, name: &str) -> bool {
        match self {
            PrefixSource::Approx(i) => i.forget(name),
            PrefixSource::Precise(i) => i.clear_endpoint(name),
            PrefixSource::Burst(_) => false,
        }
    }

    /// Forgets the endpoints for which `keep` is false; how many.
    pub fn retain(&self, keep: impl Fn(&str) -> bool) -> usize {
        match self {
            PrefixSource::Approx(i) => i.retain(keep),
            PrefixSource::Precise(i) => i.retain(keep),
            PrefixSource::Burst(_) => 0,
        }
    }

    /// Size of the index.
    pub fn stats(&self) -> PrefixStats {
        match self {
            PrefixSource::Approx(i) => i.stats(),
            PrefixSource::Precise(i) => i.stats(),
            PrefixSource::Burst(_) => PrefixStats::default(),
        }
    }

    /// The precise index, when this is one.
    pub fn precise(&self) -> Option<&Arc<PreciseIndex>> {
        match self {
            PrefixSource::Precise(i) => Some(i),
            PrefixSource::Approx(_) | PrefixSource::Burst(_) => None,
        }
    }

    /// The approximate index, when this is one.
    pub fn approx(&self) -> Option<&Arc<PrefixIndex>> {
        match self {
            PrefixSource::Approx(i) => Some(i),
            PrefixSource::Precise(_) | PrefixSource::Burst(_) => None,
        }
    }
}
