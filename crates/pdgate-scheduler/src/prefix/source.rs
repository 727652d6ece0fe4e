//! [`PrefixSource`]: the index a prefix consumer (`prefix-cache-scorer`,
//! `prefix-based-pd-decider`) reads through `prefixMatchInfoProducerName` — approximate
//! (the router's own picks, matched by bisection) or precise (engine KV events, matched by a
//! walk). One enum, resolved once at config load by `BuildCtx::producer`.

use super::{BlockHasher, PreciseIndex, PrefixIndex, PrefixStats};
use crate::endpoint::EndpointState;
use std::sync::Arc;

/// A prefix producer's index.
#[derive(Debug, Clone)]
pub enum PrefixSource {
    /// `approx-prefix-cache-producer`.
    Approx(Arc<PrefixIndex>),
    /// `precise-prefix-cache-producer`.
    Precise(Arc<PreciseIndex>),
}

impl PrefixSource {
    /// The producer's slot in the per-request hash cache.
    pub fn slot(&self) -> usize {
        match self {
            PrefixSource::Approx(i) => i.slot(),
            PrefixSource::Precise(i) => i.slot(),
        }
    }

    /// How prompts are cut and hashed.
    pub fn hasher(&self) -> BlockHasher {
        match self {
            PrefixSource::Approx(i) => i.hasher(),
            PrefixSource::Precise(i) => i.hasher(),
        }
    }

    /// Tokens per block.
    pub fn block_tokens(&self) -> usize {
        self.hasher().block_tokens
    }

    /// Matched prefix blocks of `hashes` on each of `endpoints`, written to `out` (the
    /// precise index reads at [`crate::monotonic_ms`] for speculative credits).
    pub fn match_lengths(
        &self,
        hashes: &[u64],
        endpoints: &[&Arc<EndpointState>],
        out: &mut Vec<usize>,
    ) {
        match self {
            PrefixSource::Approx(i) => i.match_lengths(hashes, endpoints, out),
            PrefixSource::Precise(i) => {
                i.match_lengths_at(hashes, endpoints, crate::monotonic_ms(), out)
            }
        }
    }

    /// Matched prefix blocks of `hashes` on `endpoint`.
    pub fn match_length(&self, hashes: &[u64], endpoint: &EndpointState) -> usize {
        match self {
            PrefixSource::Approx(i) => i.match_length(hashes, endpoint),
            PrefixSource::Precise(i) => i.match_length_at(hashes, endpoint, crate::monotonic_ms()),
        }
    }

    /// Blocks credited to endpoint `name`.
    pub fn blocks_held(&self, name: &str) -> usize {
        match self {
            PrefixSource::Approx(i) => i.blocks_held(name),
            PrefixSource::Precise(i) => i.blocks_held(name),
        }
    }

    /// Forgets endpoint `name`; whether it had an entry.
    pub fn forget(&self, name: &str) -> bool {
        match self {
            PrefixSource::Approx(i) => i.forget(name),
            PrefixSource::Precise(i) => i.clear_endpoint(name),
        }
    }

    /// Forgets the endpoints for which `keep` is false; how many.
    pub fn retain(&self, keep: impl Fn(&str) -> bool) -> usize {
        match self {
            PrefixSource::Approx(i) => i.retain(keep),
            PrefixSource::Precise(i) => i.retain(keep),
        }
    }

    /// Size of the index.
    pub fn stats(&self) -> PrefixStats {
        match self {
            PrefixSource::Approx(i) => i.stats(),
            PrefixSource::Precise(i) => i.stats(),
        }
    }

    /// The precise index, when this is one.
    pub fn precise(&self) -> Option<&Arc<PreciseIndex>> {
        match self {
            PrefixSource::Precise(i) => Some(i),
            PrefixSource::Approx(_) => None,
        }
    }

    /// The approximate index, when this is one.
    pub fn approx(&self) -> Option<&Arc<PrefixIndex>> {
        match self {
            PrefixSource::Approx(i) => Some(i),
            PrefixSource::Precise(_) => None,
        }
    }
}
