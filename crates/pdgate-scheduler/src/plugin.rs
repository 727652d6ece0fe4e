//! Extension-point traits, one per point (llm-d's scheduling framework, in small pieces).
//!
//! A plugin type implements one or more of them; what its build yields
//! ([`crate::plugin_build::Built`]) says which.
//! All run on the pick path: they must not block, allocate big structures or panic.

pub use crate::booking::{AbandonedCtx, RequestAbandoned};
use crate::endpoint::{EndpointState, Snapshot};
use crate::error::Rejection;
use crate::request::{Pick, RequestCtx, SchedulingResult};
use crate::request_state::RequestState;
use pdgate_api::Phase;
use std::sync::Arc;

/// Candidate endpoints of one profile run (schedulable endpoints of the snapshot, in order).
pub type Candidates<'s> = Vec<&'s Arc<EndpointState>>;

/// Narrows the candidate set once per request, before any profile runs (revision gating,
/// pins). Screeners run in config order, so their results intersect (design.md §1).
pub trait Screener: Send + Sync {
    /// Keeps the candidates this request may use; order of the kept ones is preserved.
    ///
    /// Errors: a reason the request cannot be served at all (e.g. "no covered revision");
    /// the scheduler answers [`Rejection::Screened`] (503) with it. An emptied set without an
    /// error is a 503 too, with a generic reason naming the screener.
    fn screen(&self, ctx: &RequestCtx<'_>, candidates: &mut Candidates<'_>) -> Result<(), String>;
}

/// Decides once per request, after the screeners and before any profile, whether the request
/// may be scheduled at all (llm-d `Admitter`). Runs only when the front end gives the
/// request's priority ([`crate::SchedulingRequest::priority`]): once per client request, not
/// for the phase legs and retries scheduled after it.
pub trait Admitter: Send + Sync {
    /// `Err(reason)` refuses the request; the scheduler answers [`Rejection::NotAdmitted`]
    /// (429) naming the plugin and the reason. `candidates` are the screened endpoints.
    fn admit(
        &self,
        ctx: &RequestCtx<'_>,
        priority: i32,
        candidates: &[&Arc<EndpointState>],
    ) -> Result<(), String>;
}

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

/// A decider's answer for one request and decode endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Run the split-out phase (prefill) on its own endpoint; for a conditional-decode probe,
    /// the decode endpoint must not serve it (412).
    Split,
    /// The decode endpoint runs the whole request.
    Keep,
    /// The decider's data (e.g. prefix match) is unreadable. A split decision fails open
    /// (treated as `Keep`); a conditional-decode probe fails closed (412). design.md §4.
    Unknown(String),
}

/// Decides whether a phase is split out of the decode endpoint (prefill; llm-d PD deciders).
/// The same answer serves conditional decode: `Split` means "the decode endpoint lacks the
/// prefix", so a probe sent with `Prefer: if-available` is answered 412.
pub trait Decider: Send + Sync {
    /// The decision for the request in `ctx` given the decode pick `decode`.
    fn decide(&self, ctx: &RequestCtx<'_>, decode: &EndpointState) -> Decision;
}

/// The one rule mapping a decider's answer on a conditional-decode probe to serve or 412
/// (design.md §4): `Keep` serves; `Split` defers; `Unknown` defers (fail closed).
///
/// Errors: [`Rejection::DecodeDeferred`] naming the decode endpoint and the cause.
pub(crate) fn conditional_verdict(decision: Decision, endpoint: &str) -> Result<(), Rejection> {
    match decision {
        Decision::Keep => Ok(()),
        Decision::Split => Err(Rejection::DecodeDeferred {
            reason: format!(
                "decode endpoint `{endpoint}` does not hold enough of the prompt's prefix"
            ),
        }),
        Decision::Unknown(why) => Err(Rejection::DecodeDeferred {
            reason: format!("prefix data for decode endpoint `{endpoint}` is unreadable: {why}"),
        }),
    }
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
    /// `phase` is the phase the pick will run (it selects the phase's pin, if any: a pinned
    /// phase gets its pinned endpoint without filters, scorers or picker).
    fn run(&self, ctx: &RequestCtx<'_>, name: &str, phase: Phase) -> Result<Pick, Rejection>;
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

    /// For a conditional-decode probe (`Prefer: if-available`) picked on `decode`: whether
    /// the decode endpoint may serve it. `Keep` serves; `Split` and `Unknown` answer 412.
    /// Default `Keep`: a handler without a decider never answers 412 (design.md §4).
    fn conditional_decode(&self, _ctx: &RequestCtx<'_>, _decode: &EndpointState) -> Decision {
        Decision::Keep
    }

    /// The profile that runs `phase` (`Prefill`, `Decode`, `Encode`): phases follow profile
    /// roles, not names. Default: the profile named like the phase (`prefill`, `decode`,
    /// `encode`); the disagg handler answers its `profiles.*` parameters.
    fn profile_for(&self, phase: Phase) -> Option<&str> {
        match phase {
            Phase::Prefill => Some("prefill"),
            Phase::Decode => Some("decode"),
            Phase::Encode => Some("encode"),
            Phase::Aggregated => None,
        }
    }
}

/// The phase a profile name stands for by default (header-selected without a handler that
/// names its profiles).
pub(crate) fn phase_of_profile(name: &str) -> Phase {
    match name {
        "prefill" => Phase::Prefill,
        "decode" => Phase::Decode,
        "encode" => Phase::Encode,
        _ => Phase::Aggregated,
    }
}

/// Sees the scheduling result before the request is sent (llm-d `PreRequest`); used by
/// producers to record the router's own decisions.
pub trait PreRequest: Send + Sync {
    /// Called once per successful `schedule`.
    fn pre_request(&self, ctx: &RequestCtx<'_>, result: &SchedulingResult);
}

/// What a response-time hook sees: the phase that answered and the request's state.
pub struct ResponseCtx<'a> {
    /// The endpoint that answered.
    pub endpoint: &'a EndpointState,
    /// The phase it ran.
    pub phase: Phase,
    /// HTTP status of its response head.
    pub status: u16,
    /// Per-request state kept from scheduling (block hashes, plugin values).
    pub state: &'a RequestState,
}

/// Called when a phase's response head arrives from its endpoint (llm-d ResponseHeader /
/// ResponseReceived): stamps headers on that phase response (e.g. the served revision) and
/// lets producers learn what the engine now holds.
pub trait ResponseHeader: Send + Sync {
    /// Appends `(name, value)` pairs (lowercase names) to stamp on the phase response.
    fn response_header(&self, ctx: &ResponseCtx<'_>, out: &mut Vec<(String, String)>);
}

/// Opt-in hook for rejections produced after screening (e.g. the 412 of a conditional-decode
/// miss): only plugins that implement it are called, so that they can stamp headers on the
/// rejection (design.md §5.1). Plugins that do not implement it see nothing.
pub trait RequestRejected: Send + Sync {
    /// Appends `(name, value)` pairs (lowercase names) to the rejection's response.
    fn request_rejected(
        &self,
        ctx: &RequestCtx<'_>,
        rejection: &Rejection,
        out: &mut Vec<(String, String)>,
    );
}

/// Kind of a plugin metric (Prometheus type).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricKind {
    /// A value that goes up and down.
    Gauge,
    /// A monotonic count.
    Counter,
}

/// One sample of a plugin's own metric, e.g.
/// `pdgate_revision_share{revision="b"} 0.4` (names carry the `pdgate_` prefix).
#[derive(Debug, Clone, PartialEq)]
pub struct PluginMetric {
    /// Metric name, e.g. `pdgate_revision_share`.
    pub name: &'static str,
    /// HELP text.
    pub help: &'static str,
    /// Gauge or counter.
    pub kind: MetricKind,
    /// Label pairs.
    pub labels: Vec<(&'static str, String)>,
    /// Value.
    pub value: f64,
}

/// A plugin that exports metrics of its own; the server collects them on every scrape of
/// `/metrics`, so a series the plugin stops reporting disappears.
pub trait MetricsSource: Send + Sync {
    /// Appends the current samples; `snapshot` is the current endpoint set, so values that
    /// derive from it (e.g. revision shares) are current even before the next request.
    fn collect(&self, snapshot: &Snapshot, out: &mut Vec<PluginMetric>);
}
