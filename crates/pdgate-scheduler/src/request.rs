//! The request the scheduler sees, the per-request context plugins read, and the result.

use crate::booking::Booking;
use crate::endpoint::{Endpoint, EndpointState, Snapshot};
use crate::error::Rejection;
use crate::prefix::PrefixSource;
pub use crate::request_state::RequestState;
use pdgate_api::hints::RoutingHints;
use pdgate_api::{Phase, PromptInput};
use std::cell::RefCell;
use std::fmt;
use std::sync::Arc;

/// Read access to the request's headers, so that plugins (screeners, session affinity) can
/// read routing hints without the scheduler depending on an HTTP stack. Names are lowercase.
pub trait RequestHeaders: Sync {
    /// The first value of header `name`, if present and valid UTF-8.
    fn header(&self, name: &str) -> Option<&str>;
}

/// No headers (tests, benchmarks, callers without any).
impl RequestHeaders for () {
    fn header(&self, _: &str) -> Option<&str> {
        None
    }
}

/// `(name, value)` pairs; names compared case-insensitively.
impl<const N: usize> RequestHeaders for [(&str, &str); N] {
    fn header(&self, name: &str) -> Option<&str> {
        self.iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| *v)
    }
}

/// What the server passes to [`crate::Scheduler::schedule`].
#[derive(Clone, Copy)]
pub struct SchedulingRequest<'a> {
    /// `x-request-id`, for logs.
    pub request_id: &'a str,
    /// `model`; seeds the prefix block-hash chain (different models share no KV).
    pub model: &'a str,
    /// Prompt text (bytes) or token ids.
    pub prompt: &'a PromptInput,
    /// Profile selected by the `x-llm-d-epp-profile` header; `None` lets the handler decide.
    pub profile: Option<&'a str>,
    /// A conditional-decode probe (`Prefer: if-available`, design.md §4): serve only if the
    /// decode endpoint holds enough of the prefix, else [`Rejection::DecodeDeferred`] (412).
    pub conditional: bool,
    /// The request's headers, for plugins that read hints from them.
    pub headers: &'a dyn RequestHeaders,
    /// Client pins and DP ranks, parsed once at ingress (design.md §5.3); `None` = none.
    pub hints: Option<&'a RoutingHints>,
    /// Endpoints the request's session (`x-session-id`) is bound to, per phase.
    pub session: Option<&'a SessionBinding>,
    /// Endpoints this request must not use (open circuit breakers, endpoints that already
    /// failed it, other revisions on a retry); pinned endpoints are not affected.
    pub avoid: Option<&'a (dyn Fn(&Endpoint) -> bool + Sync)>,
    /// Content hashes of the request's multimodal items (image, audio, video parts), one per
    /// item in request order, duplicates kept: [`pdgate_api::media::MediaItem::key`], computed
    /// once at ingress. Empty for text-only requests (and by default).
    pub media: &'a [u64],
    /// The request's priority (its InferenceObjective's; < 0 is sheddable), given by the
    /// front end on a client request's first schedule: the admitters run only then
    /// (`None`, the default, for phase legs and retries, which were admitted already).
    pub priority: Option<i32>,
    /// When the request is scheduled, in ms on the [`crate::monotonic_ms`] clock (the clock
    /// of [`crate::EndpointLoad::scraped_at_ms`]). The caller owns it: [`Self::new`] reads
    /// the clock once, a test sets any value. Every time-dependent decision of `schedule`
    /// reads it (through [`RequestCtx::now_ms`]): speculative prefix credits given and
    /// matched, burst placements, gauge staleness in the utilization filter. The scheduler
    /// never reads the clock itself.
    pub now_ms: u64,
}

/// A session's endpoints by phase (names), from the server's session table. A bound
/// endpoint is used when it is still a candidate and passes the phase profile's filters;
/// otherwise the profile chooses freely and the server rebinds the session.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SessionBinding {
    /// Endpoint of the prefill phase.
    pub prefill: Option<String>,
    /// Endpoint of the decode (or aggregated) phase.
    pub decode: Option<String>,
}

impl SessionBinding {
    /// The bound endpoint of `phase` (decode and aggregated share one binding).
    pub fn get(&self, phase: Phase) -> Option<&str> {
        match phase {
            Phase::Prefill => self.prefill.as_deref(),
            Phase::Decode | Phase::Aggregated => self.decode.as_deref(),
            Phase::Encode => None,
        }
    }
}

impl<'a> SchedulingRequest<'a> {
    /// A request with no profile header, not conditional, without headers, scheduled now:
    /// `now_ms` is [`crate::monotonic_ms`] read here (the one clock reading of the request;
    /// set the field to schedule at another time).
    pub fn new(request_id: &'a str, model: &'a str, prompt: &'a PromptInput) -> Self {
        SchedulingRequest {
            request_id,
            model,
            prompt,
            profile: None,
            conditional: false,
            headers: &(),
            hints: None,
            session: None,
            avoid: None,
            media: &[],
            priority: None,
            now_ms: crate::endpoint::monotonic_ms(),
        }
    }
}

impl fmt::Debug for SchedulingRequest<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SchedulingRequest")
            .field("request_id", &self.request_id)
            .field("model", &self.model)
            .field("profile", &self.profile)
            .field("conditional", &self.conditional)
            .field("now_ms", &self.now_ms)
            .finish_non_exhaustive()
    }
}

/// One chosen endpoint for one phase, with its in-flight booking.
#[derive(Debug)]
pub struct Pick {
    /// The endpoint.
    pub endpoint: Arc<EndpointState>,
    /// `Prefill`, `Decode`, or `Aggregated` when the request is not split.
    pub phase: Phase,
    /// The scheduling profile that picked it.
    pub profile: String,
    /// Booked at pick time; complete it when the phase's 2xx response ends, drop it when
    /// the phase ends either way.
    pub guard: Booking,
    /// The endpoint was pinned by the client: never retried elsewhere.
    pub pinned: bool,
    /// Prefix index estimate of the prompt tokens cached on this endpoint (tokens;
    /// matched blocks × block size, at most the prompt's token estimate; 0 without a producer).
    pub cached_tokens: usize,
}

/// The outcome of [`crate::Scheduler::schedule`].
#[derive(Debug)]
pub struct SchedulingResult {
    /// The prefill pick when the request is split out.
    pub prefill: Option<Pick>,
    /// The decode pick (phase `Decode` when split, else `Aggregated`), or the single pick of a
    /// header-selected profile (phase from the profile name).
    pub decode: Pick,
    /// The handler wanted a split but no prefill endpoint could serve it (none Ready,
    /// circuits open): why. The server applies its prefill-unavailable policy.
    pub prefill_unavailable: Option<String>,
}

/// A rejection with the headers `RequestRejected` hooks stamped on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejected {
    /// Why.
    pub reason: Rejection,
    /// `(name, value)` pairs to send with the rejection (lowercase names).
    pub headers: Vec<(String, String)>,
}

impl From<Rejection> for Rejected {
    fn from(reason: Rejection) -> Self {
        Rejected {
            reason,
            headers: Vec::new(),
        }
    }
}

impl fmt::Display for Rejected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.reason.fmt(f)
    }
}

impl std::error::Error for Rejected {}

/// Per-request context shared by all plugins during one `schedule` call.
///
/// Block hashes are computed at most once per prefix producer (lazily, on first use) and
/// kept in the [`RequestState`].
pub struct RequestCtx<'a> {
    /// The request.
    pub req: &'a SchedulingRequest<'a>,
    snapshot: &'a Snapshot,
    pins: crate::pins::RequestPins<'a>,
    state: Arc<RequestState>,
    /// Memo of prefix matches: (producer slot, endpoint address, matched blocks).
    matches: RefCell<Vec<(usize, usize, usize)>>,
}

impl<'a> RequestCtx<'a> {
    /// The requested model.
    pub fn model(&self) -> &'a str {
        self.req.model
    }

    /// A context for `req` with room for `producers` prefix producers, over an empty
    /// snapshot (plugin unit tests).
    pub fn new(req: &'a SchedulingRequest<'a>, producers: usize) -> Self {
        static EMPTY: Snapshot = Snapshot {
            endpoints: Vec::new(),
            version: 0,
        };
        Self::with_snapshot(req, producers, &EMPTY)
    }

    /// A context for `req` scheduled over `snapshot`.
    pub fn with_snapshot(
        req: &'a SchedulingRequest<'a>,
        producers: usize,
        snapshot: &'a Snapshot,
    ) -> Self {
        RequestCtx {
            req,
            snapshot,
            pins: crate::pins::RequestPins::default(),
            state: Arc::new(RequestState::new(producers)),
            matches: RefCell::default(),
        }
    }

    /// The context with the request's validated pins.
    pub(crate) fn with_pins(mut self, pins: crate::pins::RequestPins<'a>) -> Self {
        self.pins = pins;
        self
    }

    /// The validated pins of the request (per phase, and the revision they fix).
    pub fn pins(&self) -> &crate::pins::RequestPins<'a> {
        &self.pins
    }

    /// The whole endpoint snapshot the request is scheduled over (every endpoint, Ready or
    /// not); screeners count from it, e.g. Ready pods per revision.
    pub fn snapshot(&self) -> &'a Snapshot {
        self.snapshot
    }

    /// When the request is scheduled (ms, [`crate::monotonic_ms`] clock): its
    /// [`SchedulingRequest::now_ms`]. Plugins read time from here, never from the clock.
    pub fn now_ms(&self) -> u64 {
        self.req.now_ms
    }

    /// The request's state (shared with its bookings).
    pub fn state(&self) -> &Arc<RequestState> {
        &self.state
    }

    /// Prompt length in tokens: the token count, or bytes / 4 for text (llm-d's estimate of
    /// 4 bytes per token).
    pub fn prompt_tokens(&self) -> usize {
        match self.req.prompt {
            PromptInput::Tokens(t) => t.len(),
            PromptInput::Text(s) => s.len() / crate::prefix::BYTES_PER_TOKEN,
        }
    }

    /// The chained block hashes of the prompt under `index`'s block size and cap.
    pub fn block_hashes(&self, index: &PrefixSource) -> &[u64] {
        let hasher = index.hasher();
        match self.state.hash_cell(index.slot()) {
            Some(cell) => cell.get_or_init(|| hasher.hash(self.req.model, self.req.prompt)),
            None => &[],
        }
    }

    /// Matched prefix blocks of this prompt on each of `endpoints` under `index` at
    /// [`Self::now_ms`], written to `out`; results are memoised for [`Self::prefix_match`]
    /// (the index does not change while a request is being scheduled).
    pub fn prefix_matches(
        &self,
        index: &PrefixSource,
        endpoints: &[&Arc<EndpointState>],
        out: &mut Vec<usize>,
    ) {
        let hashes = self.block_hashes(index);
        index.match_lengths_for(&self.state, hashes, endpoints, self.now_ms(), out);
        let mut memo = self.matches.borrow_mut();
        for (e, m) in endpoints.iter().zip(out.iter()) {
            memo.push((index.slot(), Arc::as_ptr(e) as usize, *m));
        }
    }

    /// Matched prefix blocks of this prompt on `endpoint` under `index` at [`Self::now_ms`]
    /// (memoised).
    pub fn prefix_match(&self, index: &PrefixSource, endpoint: &EndpointState) -> usize {
        let key = (index.slot(), endpoint as *const EndpointState as usize);
        if let Some(&(_, _, m)) = self
            .matches
            .borrow()
            .iter()
            .find(|(s, p, _)| (*s, *p) == key)
        {
            return m;
        }
        let hashes = self.block_hashes(index);
        let m = index.match_length_for(&self.state, hashes, endpoint, self.now_ms());
        self.matches.borrow_mut().push((key.0, key.1, m));
        m
    }
}
