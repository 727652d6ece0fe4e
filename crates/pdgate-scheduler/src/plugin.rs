//! Extension-point traits, one per point (llm-d's scheduling framework, in small pieces).
//!
//! A plugin type implements one or more of them; the registry ([`crate::registry`]) says which.
//! All run on the pick path: they must not block, allocate big structures or panic.

use crate::endpoint::EndpointState;
use crate::error::Rejection;
use crate::request::{Pick, RequestCtx, SchedulingResult};
use std::sync::Arc;

/// Candidate endpoints of one profile run (schedulable endpoints of the snapshot, in order).
pub type Candidates<'s> = Vec<&'s Arc<EndpointState>>;

/// Removes endpoints that must not serve the request in this profile.
pub trait Filter: Send + Sync {
    /// Keeps the candidates that pass; the order of the kept ones is preserved.
    fn filter(&self, ctx: &RequestCtx<'_>, candidates: &mut Candidates<'_>);
}

/// Scores candidates; the profile clamps each score to [0, 1] and multiplies it by the weight.
pub trait Scorer: Send + Sync {
    /// Writes one score per candidate into `out` (`out.len() == candidates.len()`, zeroed).
    fn score(&self, ctx: &RequestCtx<'_>, candidates: &[&Arc<EndpointState>], out: &mut [f64]);
}

/// Chooses one candidate from the weighted score sums.
pub trait Picker: Send + Sync {
    /// Index into `candidates` (`scores[i]` is candidate i's total); `None` only when empty.
    fn pick(&self, candidates: &[&Arc<EndpointState>], scores: &[f64]) -> Option<usize>;
}

/// Decides whether a phase is split out of the decode endpoint (e.g. prefill).
pub trait Decider: Send + Sync {
    /// True to run the split-out phase on its own endpoint; `decode` is the decode pick.
    fn should_split(&self, ctx: &RequestCtx<'_>, decode: &EndpointState) -> bool;
}

/// Runs named profiles for a profile handler; each run books the picked endpoint.
pub trait ProfileRunner {
    /// True when the config defines a profile of that name.
    fn has_profile(&self, name: &str) -> bool;
    /// Runs the profile: filters → weighted scorers → picker. The pick's phase is
    /// `Aggregated` and `cached_tokens` 0; the handler and scheduler fill them in.
    ///
    /// Errors: [`Rejection::NoEndpoints`], [`Rejection::Saturated`],
    /// [`Rejection::UnknownProfile`].
    fn run(&self, ctx: &RequestCtx<'_>, name: &str) -> Result<Pick, Rejection>;
}

/// Decides which profiles run for a request, in what order, and assembles the result.
/// (Factories check the configured profile names at load time.)
pub trait ProfileHandler: Send + Sync {
    /// Runs the profiles for one request.
    fn handle(
        &self,
        ctx: &RequestCtx<'_>,
        runner: &dyn ProfileRunner,
    ) -> Result<SchedulingResult, Rejection>;

    /// True when the handler itself interprets `SchedulingRequest::profile` (the profile
    /// header); otherwise the scheduler runs a header-named profile directly and calls the
    /// handler only for requests without one.
    fn selects_by_header(&self) -> bool {
        false
    }
}

/// Sees the scheduling result before the request is sent (llm-d `PreRequest`); used by
/// producers to record the router's own decisions.
pub trait PreRequest: Send + Sync {
    /// Called once per successful `schedule`.
    fn pre_request(&self, ctx: &RequestCtx<'_>, result: &SchedulingResult);
}
