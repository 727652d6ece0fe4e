//! The request the scheduler sees, the per-request context plugins read, and the result.

use crate::endpoint::{EndpointState, InFlightGuard};
use crate::prefix::PrefixIndex;
use pdgate_api::{Phase, PromptInput};
use std::cell::{OnceCell, RefCell};
use std::sync::Arc;

/// What the server passes to [`crate::Scheduler::schedule`].
#[derive(Debug, Clone, Copy)]
pub struct SchedulingRequest<'a> {
    /// `x-request-id`, for logs.
    pub request_id: &'a str,
    /// `model`; seeds the prefix block-hash chain (different models share no KV).
    pub model: &'a str,
    /// Prompt text (bytes) or token ids.
    pub prompt: &'a PromptInput,
    /// Profile selected by the `x-llm-d-epp-profile` header; `None` lets the handler decide.
    pub profile: Option<&'a str>,
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
    /// Booked at pick time; drop it when the phase's response ends.
    pub guard: InFlightGuard,
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
}

/// Per-request state shared by all plugins during one `schedule` call.
///
/// Block hashes are computed at most once per prefix producer (lazily, on first use).
pub struct RequestCtx<'a> {
    /// The request.
    pub req: &'a SchedulingRequest<'a>,
    hashes: Vec<OnceCell<Vec<u64>>>,
    /// Memo of prefix matches: (producer slot, endpoint address, matched blocks).
    matches: RefCell<Vec<(usize, usize, usize)>>,
}

impl<'a> RequestCtx<'a> {
    /// The requested model.
    pub fn model(&self) -> &'a str {
        self.req.model
    }

    /// A context for `req` with room for `producers` prefix producers.
    pub fn new(req: &'a SchedulingRequest<'a>, producers: usize) -> Self {
        RequestCtx {
            req,
            hashes: (0..producers).map(|_| OnceCell::new()).collect(),
            matches: RefCell::default(),
        }
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
    pub fn block_hashes(&self, index: &PrefixIndex) -> &[u64] {
        let hasher = index.hasher();
        match self.hashes.get(index.slot()) {
            Some(cell) => cell.get_or_init(|| hasher.hash(self.req.model, self.req.prompt)),
            None => &[],
        }
    }

    /// Matched prefix blocks of this prompt on each of `endpoints` under `index`, written to
    /// `out`; results are memoised for [`Self::prefix_match`] (the index does not change
    /// while a request is being scheduled).
    pub fn prefix_matches(
        &self,
        index: &PrefixIndex,
        endpoints: &[&Arc<EndpointState>],
        out: &mut Vec<usize>,
    ) {
        let hashes = self.block_hashes(index);
        let names: Vec<&str> = endpoints.iter().map(|e| e.endpoint.name.as_str()).collect();
        index.match_lengths(hashes, &names, out);
        let mut memo = self.matches.borrow_mut();
        for (e, m) in endpoints.iter().zip(out.iter()) {
            memo.push((index.slot(), Arc::as_ptr(e) as usize, *m));
        }
    }

    /// Matched prefix blocks of this prompt on `endpoint` under `index` (memoised).
    pub fn prefix_match(&self, index: &PrefixIndex, endpoint: &EndpointState) -> usize {
        let key = (index.slot(), endpoint as *const EndpointState as usize);
        if let Some(&(_, _, m)) = self
            .matches
            .borrow()
            .iter()
            .find(|(s, p, _)| (*s, *p) == key)
        {
            return m;
        }
        let m = index.match_length(self.block_hashes(index), &endpoint.endpoint.name);
        self.matches.borrow_mut().push((key.0, key.1, m));
        m
    }
}
