//! `program-aware-fairness` — a flow-control fairness policy that serves first the program
//! (fairness id) that has received the least service lately: least attained service (LAS).
//!
//! - **Type:** `program-aware-fairness`
//! - **Extension points:** flow-control FairnessPolicy (named by a band's
//!   `fairnessPolicyRef`); the server does the llm-d PreRequest and ResponseBody parts
//!   (`pdgate_server::flow_programs`): it records each dispatch and, when the answer ends,
//!   the request's token usage.
//! - **Parameters** (an omitted one takes its default; an explicit 0 is kept):
//!   `strategy` (`las`, the only one; `""` also means LAS), `lasWeightService`
//!   ([`DEFAULT_WEIGHT_SERVICE`] = 0.8, ≥ 0), `lasWeightHeadWait`
//!   ([`DEFAULT_WEIGHT_HEAD_WAIT`] = 0.2, ≥ 0), `lasHalfLifeSeconds` (s,
//!   [`DEFAULT_HALF_LIFE_S`] = 60, ≥ 0; 0 = no decay), `evictionTtlSeconds` (s,
//!   [`DEFAULT_EVICTION_TTL_S`] = 3600, ≥ 0; 0 = programs are never evicted),
//!   `evictionSweepSeconds` (s, [`DEFAULT_EVICTION_SWEEP_S`] = 300, > 0).
//! - **Inputs:** the program id = the request's fairness id (`x-llm-d-inference-fairness-id`,
//!   `default-flow` when absent); per queued flow, its head item's enqueue time; per
//!   program, the `usage` of its finished answers.
//! - **Outputs:** among the band's non-empty flows, with `s` = attained service (tokens,
//!   decayed lazily by `2^(−Δt / halfLife)` since it was last read or written) and `w` = the
//!   head item's wait (ms): `score = lasWeightService × (1 − norm(s)) + lasWeightHeadWait ×
//!   norm(w)`, `norm(v) = (v − min) / (max − min)` over those flows, 0.5 when all are
//!   equal. The highest score is served. A finished answer adds `prompt_tokens + 2 ×
//!   completion_tokens` to its program's service. Every `evictionSweepSeconds`, programs
//!   with nothing in flight whose last completion (or creation) is older than
//!   `evictionTtlSeconds` are forgotten. Gauges (llm-d's names):
//!   `llm_d_epp_program_aware_attained_service_tokens{program_id}`,
//!   `llm_d_epp_program_aware_avg_wait_time_milliseconds{program_id}` (running mean of the
//!   queue wait, ms) and `llm_d_epp_program_aware_jains_fairness_index` (`(Σx)² / (n·Σx²)`
//!   over the programs' mean waits; 1 when n ≤ 1).
//! - **Limitations:** equal scores go to the flow whose head waited longest, then to the
//!   smallest fairness id (llm-d: Go map order, effectively random). Programs are counted
//!   per distinct parameter set: bands naming program-aware policies with equal parameters
//!   share one ledger (llm-d: one per plugin instance, each seeing every request — the same
//!   numbers). Every request flow control dispatches is counted, whatever its band (as
//!   llm-d's PreRequest does); its wait only in a program-aware band. An answer that ends
//!   early (client gone, upstream error) still ends its in-flight count (llm-d only counts
//!   down at end of stream), adding the service its `usage` reported, if any; a streamed
//!   answer reports `usage` only when the client asked for it
//!   (`stream_options.include_usage`). A request dispatched at once (nothing queued, pool
//!   under its limit) waited 0 ms. Without the `flowControl` feature gate nothing is queued,
//!   so the policy has no effect and records nothing. The gauges are the first ledger's.
//!
//! Source: llm-d-router `pkg/epp/framework/plugins/flowcontrol/fairness/program-aware/
//! {plugin.go,strategy_las.go,programmetrics.go}`.

use crate::plugin_params::PluginError;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::Arc;

/// Default `lasWeightService`.
pub const DEFAULT_WEIGHT_SERVICE: f64 = 0.8;
/// Default `lasWeightHeadWait`.
pub const DEFAULT_WEIGHT_HEAD_WAIT: f64 = 0.2;
/// Default `lasHalfLifeSeconds`, s.
pub const DEFAULT_HALF_LIFE_S: f64 = 60.0;
/// Default `evictionTtlSeconds`, s.
pub const DEFAULT_EVICTION_TTL_S: f64 = 3600.0;
/// Default `evictionSweepSeconds`, s.
pub const DEFAULT_EVICTION_SWEEP_S: f64 = 300.0;
/// The one scoring strategy.
pub const STRATEGY_LAS: &str = "las";
/// Weight of a prompt token in a request's cost.
pub const PROMPT_TOKEN_COST: f64 = 1.0;
/// Weight of a completion token in a request's cost.
pub const COMPLETION_TOKEN_COST: f64 = 2.0;

/// Parameters, as llm-d names them.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ProgramAwareParams {
    /// Scoring strategy: `las` (or empty).
    #[serde(default = "default_strategy")]
    pub strategy: String,
    /// Weight of the (inverted) attained service in the score.
    #[serde(default = "default_weight_service")]
    pub las_weight_service: f64,
    /// Weight of the head item's wait in the score.
    #[serde(default = "default_weight_head_wait")]
    pub las_weight_head_wait: f64,
    /// Half-life of attained service, s (0: no decay).
    #[serde(default = "default_half_life")]
    pub las_half_life_seconds: f64,
    /// Idle time after which a program is forgotten, s (0: never).
    #[serde(default = "default_ttl")]
    pub eviction_ttl_seconds: f64,
    /// Period of the eviction sweep, s.
    #[serde(default = "default_sweep")]
    pub eviction_sweep_seconds: f64,
}

fn default_strategy() -> String {
    STRATEGY_LAS.into()
}
fn default_weight_service() -> f64 {
    DEFAULT_WEIGHT_SERVICE
}
fn default_weight_head_wait() -> f64 {
    DEFAULT_WEIGHT_HEAD_WAIT
}
fn default_half_life() -> f64 {
    DEFAULT_HALF_LIFE_S
}
fn default_ttl() -> f64 {
    DEFAULT_EVICTION_TTL_S
}
fn default_sweep() -> f64 {
    DEFAULT_EVICTION_SWEEP_S
}

impl Default for ProgramAwareParams {
    fn default() -> Self {
        ProgramAwareParams {
            strategy: default_strategy(),
            las_weight_service: DEFAULT_WEIGHT_SERVICE,
            las_weight_head_wait: DEFAULT_WEIGHT_HEAD_WAIT,
            las_half_life_seconds: DEFAULT_HALF_LIFE_S,
            eviction_ttl_seconds: DEFAULT_EVICTION_TTL_S,
            eviction_sweep_seconds: DEFAULT_EVICTION_SWEEP_S,
        }
    }
}

impl ProgramAwareParams {
    /// The validated settings.
    ///
    /// Errors: the first bad field, named (an unknown strategy, a negative or non-finite
    /// number, a sweep period that is not > 0).
    pub fn las(&self) -> Result<Las, PluginError> {
        if !(self.strategy.is_empty() || self.strategy == STRATEGY_LAS) {
            return Err(PluginError::invalid(
                "strategy",
                format!(
                    "unknown scoring strategy \"{}\": only \"{STRATEGY_LAS}\" is supported",
                    self.strategy
                ),
            ));
        }
        for (field, v) in [
            ("lasWeightService", self.las_weight_service),
            ("lasWeightHeadWait", self.las_weight_head_wait),
            ("lasHalfLifeSeconds", self.las_half_life_seconds),
            ("evictionTtlSeconds", self.eviction_ttl_seconds),
        ] {
            if !(v.is_finite() && v >= 0.0) {
                return Err(PluginError::invalid(
                    field,
                    format!("must be a finite number >= 0, got {v}"),
                ));
            }
        }
        let sweep = self.eviction_sweep_seconds;
        if !(sweep.is_finite() && sweep > 0.0) {
            return Err(PluginError::invalid(
                "evictionSweepSeconds",
                format!("must be a finite number > 0, got {sweep}"),
            ));
        }
        Ok(Las {
            weight_service: self.las_weight_service,
            weight_head_wait: self.las_weight_head_wait,
            half_life_ms: self.las_half_life_seconds * 1000.0,
            eviction_ttl_ms: (self.eviction_ttl_seconds * 1000.0) as u64,
            eviction_sweep_ms: ((sweep * 1000.0) as u64).max(1),
        })
    }
}

/// The LAS settings a band's fairness carries (validated; times in ms).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Las {
    /// Weight of the inverted, normalised attained service.
    pub weight_service: f64,
    /// Weight of the normalised head wait.
    pub weight_head_wait: f64,
    /// Half-life of attained service, ms (0: no decay).
    pub half_life_ms: f64,
    /// Idle time after which a program is forgotten, ms (0: never).
    pub eviction_ttl_ms: u64,
    /// Period of the eviction sweep, ms (≥ 1).
    pub eviction_sweep_ms: u64,
}

impl Default for Las {
    fn default() -> Self {
        ProgramAwareParams::default()
            .las()
            .expect("the defaults are valid")
    }
}

/// The cost of a finished request: `prompt + 2 × completion` tokens.
pub fn cost(prompt_tokens: u64, completion_tokens: u64) -> f64 {
    PROMPT_TOKEN_COST * prompt_tokens as f64 + COMPLETION_TOKEN_COST * completion_tokens as f64
}

/// What the ledger knows of one program.
#[derive(Debug, Clone, PartialEq)]
pub struct Program {
    /// Attained service as of `anchor_ms`, weighted tokens.
    pub service: f64,
    /// When the service was last decayed, ms; `None` before its first read.
    pub anchor_ms: Option<u64>,
    /// Requests dispatched and not finished.
    pub in_flight: u64,
    /// Requests dispatched, ever.
    pub dispatched: u64,
    /// Waits observed (dispatches from a program-aware band).
    pub waits: u64,
    /// Running mean of those waits, ms.
    pub avg_wait_ms: f64,
    /// Last completion, or creation, ms.
    pub last_completion_ms: u64,
}

impl Program {
    fn new(now_ms: u64) -> Program {
        Program {
            service: 0.0,
            anchor_ms: None,
            in_flight: 0,
            dispatched: 0,
            waits: 0,
            avg_wait_ms: 0.0,
            last_completion_ms: now_ms,
        }
    }

    /// Decays the service to `now_ms` and anchors it there (the first read only anchors).
    fn decay(&mut self, now_ms: u64, half_life_ms: f64) -> f64 {
        match self.anchor_ms {
            None => self.anchor_ms = Some(now_ms),
            Some(a) if now_ms > a => {
                if half_life_ms > 0.0 {
                    self.service *= (-((now_ms - a) as f64) / half_life_ms).exp2();
                }
                self.anchor_ms = Some(now_ms);
            }
            Some(_) => {}
        }
        self.service
    }
}

/// `(v − min) / (max − min)`, 0.5 when `max == min`.
fn normalize(v: f64, min: f64, max: f64) -> f64 {
    if max == min {
        0.5
    } else {
        (v - min) / (max - min)
    }
}

/// The programs of one program-aware parameter set (see the module docs). Pure: the caller
/// supplies the time (ms on one monotonic clock).
#[derive(Debug, Clone)]
pub struct Ledger {
    las: Las,
    programs: HashMap<Arc<str>, Program>,
    last_sweep_ms: u64,
}

impl Ledger {
    /// An empty ledger with `las`.
    pub fn new(las: Las) -> Ledger {
        Ledger {
            las,
            programs: HashMap::new(),
            last_sweep_ms: 0,
        }
    }

    /// Its settings.
    pub fn las(&self) -> Las {
        self.las
    }

    fn entry(&mut self, id: &Arc<str>, now_ms: u64) -> &mut Program {
        self.programs
            .entry(id.clone())
            .or_insert_with(|| Program::new(now_ms))
    }

    /// The program `id`, if known.
    pub fn program(&self, id: &str) -> Option<&Program> {
        self.programs.get(id)
    }

    /// Programs known.
    pub fn len(&self) -> usize {
        self.programs.len()
    }

    /// True when no program is known.
    pub fn is_empty(&self) -> bool {
        self.programs.is_empty()
    }

    /// The attained service of `id` at `now_ms` (decayed; the read anchors it).
    pub fn service(&mut self, id: &Arc<str>, now_ms: u64) -> f64 {
        let h = self.las.half_life_ms;
        self.entry(id, now_ms).decay(now_ms, h)
    }

    /// The flow to serve among `heads` — `(fairness id, head item's enqueue time ms)` of
    /// each non-empty flow — at `now_ms`: the highest LAS score; equal scores go to the
    /// longest head wait, then to the first given. `None` when `heads` is empty. Every
    /// flow seen becomes a known program.
    pub fn choose<'a, I>(&mut self, heads: I, now_ms: u64) -> Option<&'a Arc<str>>
    where
        I: Iterator<Item = (&'a Arc<str>, u64)> + Clone,
    {
        let wait = |enqueued: u64| now_ms.saturating_sub(enqueued) as f64;
        let (mut s_min, mut s_max) = (f64::INFINITY, f64::NEG_INFINITY);
        let (mut w_min, mut w_max) = (f64::INFINITY, f64::NEG_INFINITY);
        for (id, enqueued) in heads.clone() {
            let s = self.service(id, now_ms);
            let w = wait(enqueued);
            (s_min, s_max) = (s_min.min(s), s_max.max(s));
            (w_min, w_max) = (w_min.min(w), w_max.max(w));
        }
        let mut best: Option<(&'a Arc<str>, f64, f64)> = None;
        for (id, enqueued) in heads {
            // Read at the same `now_ms`: no further decay, the same value as above.
            let s = self.service(id, now_ms);
            let w = wait(enqueued);
            let score = self.las.weight_service * (1.0 - normalize(s, s_min, s_max))
                + self.las.weight_head_wait * normalize(w, w_min, w_max);
            let better = match best {
                None => true,
                Some((_, b_score, b_wait)) => score > b_score || (score == b_score && w > b_wait),
            };
            if better {
                best = Some((id, score, w));
            }
        }
        best.map(|(id, _, _)| id)
    }

    /// `id` was dispatched at `now_ms`, after waiting `waited_ms` in a program-aware band
    /// (`None`: another band, no wait observed).
    pub fn dispatched(&mut self, id: &Arc<str>, waited_ms: Option<u64>, now_ms: u64) {
        let p = self.entry(id, now_ms);
        p.in_flight += 1;
        p.dispatched += 1;
        if let Some(w) = waited_ms {
            p.waits += 1;
            p.avg_wait_ms += (w as f64 - p.avg_wait_ms) / p.waits as f64;
        }
    }

    /// A request of `id` finished at `now_ms`, having cost `cost` weighted tokens (`None`:
    /// no usage known). Returns the program's attained service after it.
    pub fn completed(&mut self, id: &Arc<str>, cost: Option<f64>, now_ms: u64) -> f64 {
        let h = self.las.half_life_ms;
        let p = self.entry(id, now_ms);
        let s = p.decay(now_ms, h) + cost.unwrap_or(0.0);
        p.service = s;
        p.in_flight = p.in_flight.saturating_sub(1);
        p.last_completion_ms = now_ms;
        s
    }

    /// When a sweep is due at `now_ms` (every `evictionSweepSeconds`; never with a zero
    /// TTL), forgets the programs with nothing in flight whose last completion is more than
    /// `evictionTtlSeconds` old; returns their ids.
    pub fn sweep(&mut self, now_ms: u64) -> Vec<Arc<str>> {
        let ttl = self.las.eviction_ttl_ms;
        if ttl == 0 || now_ms.saturating_sub(self.last_sweep_ms) < self.las.eviction_sweep_ms {
            return Vec::new();
        }
        self.last_sweep_ms = now_ms;
        let gone: Vec<Arc<str>> = self
            .programs
            .iter()
            .filter(|(_, p)| p.in_flight == 0 && now_ms.saturating_sub(p.last_completion_ms) > ttl)
            .map(|(id, _)| id.clone())
            .collect();
        for id in &gone {
            self.programs.remove(id);
        }
        gone
    }

    /// Jain's fairness index of the programs' mean waits (those with a wait observed):
    /// `(Σx)² / (n·Σx²)`; 1 when n ≤ 1 or every mean is 0.
    pub fn fairness_index(&self) -> f64 {
        let (mut n, mut sum, mut sum_sq) = (0.0, 0.0, 0.0);
        for p in self.programs.values().filter(|p| p.waits > 0) {
            n += 1.0;
            sum += p.avg_wait_ms;
            sum_sq += p.avg_wait_ms * p.avg_wait_ms;
        }
        if n <= 1.0 || sum_sq == 0.0 {
            1.0
        } else {
            sum * sum / (n * sum_sq)
        }
    }
}

#[cfg(test)]
#[path = "program_aware_tests.rs"]
mod tests;
