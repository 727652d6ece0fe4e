//! `no-hit-lru-scorer` — spreads cold requests (no prefix hit anywhere) over the endpoints
//! that received a cold request least recently, so that new KV blocks grow evenly.
//!
//! - **Type:** `no-hit-lru-scorer`
//! - **Extension points:** Scorer, PreRequest
//! - **Parameters:** `lruSize` (endpoints remembered, default [`DEFAULT_LRU_SIZE`] = 1024;
//!   a value ≤ 0 means the default, as in llm-d); `prefixMatchInfoProducerName` (the prefix
//!   producer to read; default, or `""`: the `approx-prefix-cache-producer`, injected with
//!   defaults when none is configured); `prefixPluginType`, `prefixPluginName` (deprecated
//!   in llm-d and never used: accepted and ignored, left out of the effective config).
//! - **Inputs:** matched prefix blocks of the prompt on each candidate (the producer's
//!   index); the scorer's own LRU of endpoint names, oldest cold pick first.
//! - **Outputs:** a request is *cold* when no candidate holds any block of its prompt.
//!   Warm: 0.5 for every candidate. Cold, N candidates: N = 1 → 1; otherwise the candidates
//!   not in the LRU ("never used", in candidate order, i = 0, 1, …) score `1 − i/(N−1)`,
//!   and one at LRU position p (0 = oldest, counted over the whole LRU, non-candidates
//!   included) scores `max(0, 1 − (neverUsed + p)/(N−1))`.
//!   PreRequest, for a cold request: the decode (primary) pick's endpoint becomes the most
//!   recent entry, then the prefill pick's, if any (evicting the oldest beyond `lruSize`).
//! - **Limitations:** llm-d moves the target of the profile literally named `prefill`;
//!   pdgate moves the prefill phase's pick whatever its profile is called. Prompts shorter
//!   than one block have no block to hit, so they are always cold (llm-d's approximate
//!   producer also hashes the last partial block). Entries are endpoint names (llm-d:
//!   `namespace/name`). No state dump (llm-d's `DumpState`), no metrics.
//!
//!   Source: llm-d `pkg/epp/framework/plugins/scheduling/scorer/nohitlru/no_hit_lru.go`.

use crate::endpoint::EndpointState;
use crate::plugin::{PreRequest, Scorer};
use crate::plugin_build::{decode, effective, BuildCtx, Built, PluginError, PluginType, Stage};
use crate::prefix::PrefixSource;
use crate::request::{RequestCtx, RequestState, SchedulingResult};
use serde::{Deserialize, Serialize};
use serde_yaml_ng::Value;
use smallvec::SmallVec;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Registry entry.
pub const TYPE: PluginType = PluginType {
    name: "no-hit-lru-scorer",
    stage: Stage::Consumer,
    build,
};

/// Default `lruSize` (endpoints).
pub const DEFAULT_LRU_SIZE: i64 = 1024;

/// Score of every candidate for a warm request.
pub const WARM_SCORE: f64 = 0.5;

/// Parameters (llm-d names and defaults).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct Params {
    /// Endpoints remembered (≤ 0 → [`DEFAULT_LRU_SIZE`]).
    pub lru_size: i64,
    /// Producer to read; `None` or `""` = the approximate one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prefix_match_info_producer_name: Option<String>,
    /// Deprecated in llm-d, never used.
    #[serde(skip_serializing)]
    pub prefix_plugin_type: Option<String>,
    /// Deprecated in llm-d, never used.
    #[serde(skip_serializing)]
    pub prefix_plugin_name: Option<String>,
}

impl Default for Params {
    fn default() -> Self {
        Params {
            lru_size: DEFAULT_LRU_SIZE,
            prefix_match_info_producer_name: None,
            prefix_plugin_type: None,
            prefix_plugin_name: None,
        }
    }
}

/// Endpoint names ordered by their last cold pick, oldest first, at most `cap` of them.
/// Positions are found by bisection over increasing sequence numbers, so scoring costs
/// O(N log L) for N candidates and L entries; a move costs O(L) (a memmove).
#[derive(Debug)]
pub struct Lru {
    cap: usize,
    next: u64,
    seq: HashMap<Arc<str>, u64>,
    order: VecDeque<(u64, Arc<str>)>,
}

impl Lru {
    /// An empty LRU of `cap` entries (at least 1).
    pub fn new(cap: usize) -> Self {
        Lru {
            cap: cap.max(1),
            next: 0,
            seq: HashMap::new(),
            order: VecDeque::new(),
        }
    }

    /// Position of `name` (0 = oldest), if present.
    pub fn position(&self, name: &str) -> Option<usize> {
        let s = *self.seq.get(name)?;
        self.order.binary_search_by_key(&s, |e| e.0).ok()
    }

    /// Makes `name` the most recent entry, evicting the oldest when full.
    pub fn touch(&mut self, name: &str) {
        let key = match self.seq.get(name).copied() {
            Some(s) => match self.order.binary_search_by_key(&s, |e| e.0) {
                Ok(i) => self.order.remove(i).map(|e| e.1),
                Err(_) => None,
            },
            None => {
                while self.order.len() >= self.cap {
                    match self.order.pop_front() {
                        Some((_, old)) => self.seq.remove(&old),
                        None => break,
                    };
                }
                None
            }
        };
        let key = key.unwrap_or_else(|| Arc::from(name));
        let s = self.next;
        self.next += 1;
        self.seq.insert(key.clone(), s);
        self.order.push_back((s, key));
    }

    /// Names, oldest first.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.order.iter().map(|e| &*e.1)
    }

    /// Cold-request scores of `candidates` into `out` (see the module docs).
    pub fn cold_scores(&self, candidates: &[&Arc<EndpointState>], out: &mut [f64]) {
        let n = candidates.len().min(out.len());
        if n == 0 {
            return;
        }
        if n == 1 {
            out[0] = 1.0;
            return;
        }
        // First pass: LRU positions, −1 for never used.
        let mut never = 0usize;
        for (o, c) in out.iter_mut().zip(candidates) {
            *o = match self.position(&c.endpoint.name) {
                Some(p) => p as f64,
                None => {
                    never += 1;
                    -1.0
                }
            };
        }
        let span = (n - 1) as f64;
        let mut i = 0usize;
        for o in out[..n].iter_mut() {
            if *o < 0.0 {
                *o = 1.0 - i as f64 / span;
                i += 1;
            } else {
                *o = (1.0 - (never as f64 + *o) / span).max(0.0);
            }
        }
    }
}

/// Request-state key of the cold flags.
const STATE_KEY: &str = "no-hit-lru-scorer";

/// The cold flag of each scorer instance that scored the request: `(instance id, cold)`;
/// the last profile scored wins, as in llm-d.
#[derive(Debug, Clone, Default)]
struct ColdFlags(SmallVec<[(u64, bool); 1]>);

/// The scorer.
#[derive(Debug)]
pub struct NoHitLruScorer {
    id: u64,
    index: PrefixSource,
    lru: parking_lot::Mutex<Lru>,
}

impl NoHitLruScorer {
    /// A scorer reading `index`, remembering `lru_size` endpoints.
    pub fn new(index: PrefixSource, lru_size: usize) -> Self {
        static NEXT_ID: AtomicU64 = AtomicU64::new(1);
        NoHitLruScorer {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            index,
            lru: parking_lot::Mutex::new(Lru::new(lru_size)),
        }
    }

    /// Endpoint names in the LRU, oldest first.
    pub fn lru_names(&self) -> Vec<String> {
        self.lru.lock().names().map(str::to_string).collect()
    }

    fn set_cold(&self, state: &RequestState, cold: bool) {
        let mut flags = state.get::<ColdFlags>(STATE_KEY).unwrap_or_default();
        flags.0.retain(|(id, _)| *id != self.id);
        flags.0.push((self.id, cold));
        state.set(STATE_KEY, flags);
    }

    /// Reads and clears this instance's cold flag (absent: not cold).
    fn take_cold(&self, state: &RequestState) -> bool {
        let Some(mut flags) = state.get::<ColdFlags>(STATE_KEY) else {
            return false;
        };
        let cold = flags.0.iter().any(|&(id, c)| id == self.id && c);
        flags.0.retain(|(id, _)| *id != self.id);
        state.set(STATE_KEY, flags);
        cold
    }
}

impl Scorer for NoHitLruScorer {
    fn score(&self, ctx: &RequestCtx<'_>, candidates: &[&Arc<EndpointState>], out: &mut [f64]) {
        let n = candidates.len().min(out.len());
        let cold = ctx.block_hashes(&self.index).is_empty() || {
            let mut matched = Vec::with_capacity(n);
            ctx.prefix_matches(&self.index, &candidates[..n], &mut matched);
            matched.iter().all(|&m| m == 0)
        };
        self.set_cold(ctx.state(), cold);
        if cold {
            self.lru.lock().cold_scores(&candidates[..n], &mut out[..n]);
        } else {
            out[..n].iter_mut().for_each(|o| *o = WARM_SCORE);
        }
    }
}

impl PreRequest for NoHitLruScorer {
    /// For a cold request: the primary (decode) pick, then the prefill pick, become the
    /// most recent entries.
    fn pre_request(&self, ctx: &RequestCtx<'_>, result: &SchedulingResult) {
        if !self.take_cold(ctx.state()) {
            return;
        }
        let mut lru = self.lru.lock();
        lru.touch(&result.decode.endpoint.endpoint.name);
        if let Some(p) = &result.prefill {
            lru.touch(&p.endpoint.endpoint.name);
        }
    }
}

fn build(params: Option<&Value>, ctx: &mut BuildCtx<'_>) -> Result<Built, PluginError> {
    let mut p: Params = decode(params)?;
    if p.lru_size <= 0 {
        p.lru_size = DEFAULT_LRU_SIZE;
    }
    if p.prefix_match_info_producer_name.as_deref() == Some("") {
        p.prefix_match_info_producer_name = None;
    }
    let index = ctx.producer(
        p.prefix_match_info_producer_name.as_deref(),
        "prefixMatchInfoProducerName",
    )?;
    let scorer = Arc::new(NoHitLruScorer::new(
        index,
        usize::try_from(p.lru_size).unwrap_or(usize::MAX),
    ));
    Ok(Built {
        scorer: Some(scorer.clone()),
        pre_request: Some(scorer),
        params: effective(&p),
        ..Built::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::booking::Booking;
    use crate::plugins::testutil::{ep, with_ctx};
    use crate::prefix::{BlockHasher, PrefixIndex};
    use crate::request::Pick;
    use pdgate_api::{Phase, PromptInput};

    fn approx() -> Arc<PrefixIndex> {
        Arc::new(PrefixIndex::new(
            0,
            BlockHasher {
                block_tokens: 4,
                max_blocks: 256,
            },
            100,
        ))
    }

    fn pick(ctx: &RequestCtx<'_>, e: &Arc<EndpointState>, phase: Phase) -> Pick {
        Pick {
            guard: Booking::new(e, ctx.state().clone(), Vec::new().into()),
            endpoint: e.clone(),
            phase,
            profile: "p".into(),
            pinned: false,
            cached_tokens: 0,
        }
    }

    /// Scores `prompt` over `eps`, then runs PreRequest with decode pick `eps[decode]`
    /// (and prefill pick `eps[prefill]`).
    fn run(
        s: &NoHitLruScorer,
        prompt: &PromptInput,
        eps: &[Arc<EndpointState>],
        decode: usize,
        prefill: Option<usize>,
    ) -> Vec<f64> {
        let c: Vec<_> = eps.iter().collect();
        let mut out = vec![0.0; eps.len()];
        with_ctx(prompt, |ctx| {
            s.score(ctx, &c, &mut out);
            let result = SchedulingResult {
                prefill: prefill.map(|i| pick(ctx, &eps[i], Phase::Prefill)),
                decode: pick(ctx, &eps[decode], Phase::Decode),
                prefill_unavailable: None,
            };
            s.pre_request(ctx, &result);
        });
        out
    }

    fn prompt(first: u32) -> PromptInput {
        PromptInput::Tokens((first..first + 8).collect())
    }

    #[test]
    fn cold_requests_rotate_through_never_used_then_least_recent() {
        let s = NoHitLruScorer::new(PrefixSource::Approx(approx()), 1024);
        let eps = [ep("a", None), ep("b", None), ep("c", None)];
        // All never used: 1, 1 − 1/2, 1 − 2/2.
        assert_eq!(run(&s, &prompt(0), &eps, 0, None), [1.0, 0.5, 0.0]);
        // a used (position 0): never used b, c → 1, 0.5; a: rank 2 + 0 → 0.
        assert_eq!(run(&s, &prompt(100), &eps, 1, None), [0.0, 1.0, 0.5]);
        // LRU [a, b]: c never used → 1; a rank 1 + 0 → 0.5; b rank 1 + 1 → 0.
        assert_eq!(run(&s, &prompt(200), &eps, 2, None), [0.5, 0.0, 1.0]);
        // LRU [a, b, c]: positions 0, 1, 2 → 1, 0.5, 0.
        assert_eq!(run(&s, &prompt(300), &eps, 0, None), [1.0, 0.5, 0.0]);
        assert_eq!(s.lru_names(), ["b", "c", "a"]);
    }

    #[test]
    fn warm_requests_score_half_and_leave_the_lru_alone() {
        let ix = approx();
        let s = NoHitLruScorer::new(PrefixSource::Approx(ix.clone()), 1024);
        let eps = [ep("a", None), ep("b", None)];
        let p = prompt(0);
        with_ctx(&p, |ctx| {
            let h = ctx.block_hashes(&PrefixSource::Approx(ix.clone())).to_vec();
            ix.record(&eps[1], &h[..1]);
        });
        assert_eq!(run(&s, &p, &eps, 1, None), [0.5, 0.5]);
        assert!(s.lru_names().is_empty());
        // A prompt with no full block has nothing to hit: cold. One candidate → 1.
        let short = PromptInput::Tokens(vec![1, 2]);
        assert_eq!(run(&s, &short, &eps[..1], 0, None), [1.0]);
        assert_eq!(s.lru_names(), ["a"]);
    }

    #[test]
    fn lru_positions_count_non_candidates_and_prefill_picks() {
        let s = NoHitLruScorer::new(PrefixSource::Approx(approx()), 1024);
        let all = [ep("a", None), ep("b", None), ep("c", None), ep("d", None)];
        // Decode on d, prefill on c: the LRU becomes [d, c] (prefill moved last).
        run(&s, &prompt(0), &all, 3, Some(2));
        assert_eq!(s.lru_names(), ["d", "c"]);
        // Candidates a, c, d (N = 3): a never used → 1; d at position 0 → 1 − (1 + 0)/2 =
        // 0.5; c at position 1 → 1 − (1 + 1)/2 = 0.
        let cands = [all[0].clone(), all[2].clone(), all[3].clone()];
        assert_eq!(run(&s, &prompt(50), &cands, 0, None), [1.0, 0.0, 0.5]);
        // Candidates b, c (N = 2) with LRU [d, c, a]: b never used → 1; c at position 1 →
        // 1 − (1 + 1)/1 < 0 → 0 (the non-candidate d still counts).
        let cands = [all[1].clone(), all[2].clone()];
        assert_eq!(run(&s, &prompt(60), &cands, 0, None), [1.0, 0.0]);
        assert_eq!(s.lru_names(), ["d", "c", "a", "b"]);
    }

    #[test]
    fn the_lru_evicts_its_oldest_entry() {
        let mut l = Lru::new(2);
        l.touch("a");
        l.touch("b");
        l.touch("a");
        assert_eq!(l.names().collect::<Vec<_>>(), ["b", "a"]);
        l.touch("c");
        assert_eq!(l.names().collect::<Vec<_>>(), ["a", "c"]);
        assert_eq!((l.position("a"), l.position("b")), (Some(0), None));
    }

    fn build_err(yaml: &str) -> PluginError {
        let v: Value = serde_yaml_ng::from_str(yaml).unwrap();
        let mut ctx = BuildCtx {
            built: &[],
            profiles: &[],
            next_slot: 0,
        };
        match build(Some(&v), &mut ctx) {
            Ok(_) => panic!("{yaml} built"),
            Err(e) => e,
        }
    }

    #[test]
    fn parameters_defaults_and_errors() {
        let ix = PrefixSource::Approx(approx());
        let built = [(
            "approx-prefix-cache-producer".to_string(),
            "approx-prefix-cache-producer".to_string(),
            Built {
                index: Some(ix),
                ..Built::default()
            },
        )];
        let mut ctx = BuildCtx {
            built: &built,
            profiles: &[],
            next_slot: 1,
        };
        let v: Value = serde_yaml_ng::from_str(
            "{lruSize: -5, prefixPluginType: prefix-cache-scorer, prefixPluginName: x}",
        )
        .unwrap();
        let b = build(Some(&v), &mut ctx).unwrap();
        assert_eq!(
            serde_yaml_ng::to_string(&b.params).unwrap(),
            "lruSize: 1024\n"
        );
        assert!(b.scorer.is_some() && b.pre_request.is_some());
        let e = build_err("lruSize: many");
        assert_eq!(e.path.as_deref(), Some("lruSize"));
        let e = build_err("prefixMatchInfoProducerName: nope");
        assert_eq!(
            (e.path.as_deref(), e.message.as_str()),
            (
                Some("prefixMatchInfoProducerName"),
                "no prefix producer plugin named `nope`"
            )
        );
        let e = build_err("{}");
        assert_eq!(e.path.as_deref(), Some("prefixMatchInfoProducerName"));
        let e = build_err("lruSizes: 3");
        assert_eq!(e.key.as_deref(), Some("lruSizes"));
    }
}
