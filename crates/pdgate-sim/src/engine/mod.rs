//! One simulated engine: a continuous-batching step loop over a prefix cache (design.md §6).
//!
//! HTTP handlers [`Engine::submit`] requests and read [`SeqEvent`]s; one task per engine runs
//! [`Engine::run`]: plan a step (admit waiting requests within `max_num_seqs` and the token
//! budget, chunk prefills), sleep its simulated cost, then emit one token to every request that
//! finished its prefill or decodes. Requests whose receiver is gone are dropped and their blocks
//! released.

pub mod cache;
pub mod ec;
pub mod lease;
pub mod sched;
pub mod seq;

use crate::config::SimConfig;
use crate::handoff::{PullGrant, PullRequest, Rejection};
use crate::metrics::Metrics;
use crate::pull::{PullRejection, Refusal};
use crate::stats::{tally, WorkerStats};
use cache::{block_hashes, blocks_for, prompt_fingerprint};
use parking_lot::Mutex;
use prometheus::IntCounterVec;
use sched::{EngineState, Plan};
pub use seq::{Finish, SeqEvent, SeqMode};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, Notify};
use tokio::time::Instant;

/// How far behind its simulated schedule the loop may fall before it stops catching up
/// (steps shorter than the timer's 1 ms resolution are paid back over later steps).
const MAX_LAG: Duration = Duration::from_millis(20);

/// A request as the engine needs it.
#[derive(Debug, Clone)]
pub struct SeqRequest {
    /// Prompt token ids.
    pub tokens: Vec<u32>,
    /// Output tokens to generate.
    pub max_tokens: usize,
    /// Local, prefill leg, or remote-prefilled decode leg.
    pub mode: SeqMode,
    /// `cached_tokens` to report for a remote decode (the prefill side's).
    pub remote_cached: usize,
    /// When the request reached the worker.
    pub arrived: Instant,
}

/// Why [`Engine::submit`] refused a request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SubmitError {
    /// The request can never run here (400).
    #[error("{0}")]
    Invalid(String),
    /// The worker is shutting down (503).
    #[error("the engine is shutting down")]
    Closed,
}

/// The shared half of an engine: state behind a mutex, and the loop's wake-up.
pub struct Engine {
    state: Mutex<EngineState>,
    notify: Notify,
    metrics: Arc<Metrics>,
    cfg: SimConfig,
    /// Unique engine id (`remote_engine_id`).
    pub engine_id: String,
}

impl Engine {
    /// A new idle engine; start it with [`Engine::run`].
    pub fn new(
        cfg: SimConfig,
        engine_id: String,
        revision: Option<String>,
        metrics: Arc<Metrics>,
    ) -> Self {
        Engine {
            state: Mutex::new(EngineState::new(cfg.clone(), engine_id.clone(), revision)),
            notify: Notify::new(),
            metrics,
            cfg,
            engine_id,
        }
    }

    /// Queues a request. Errors when it can never run here (empty prompt, over `max_model_len`,
    /// more KV blocks than the cache has) or the engine is closed.
    pub fn submit(
        &self,
        req: SeqRequest,
    ) -> Result<mpsc::UnboundedReceiver<SeqEvent>, SubmitError> {
        let (prompt, out) = (req.tokens.len(), req.max_tokens);
        if prompt == 0 {
            return Err(SubmitError::Invalid(
                "the prompt must contain at least one token".into(),
            ));
        }
        if out == 0 {
            return Err(SubmitError::Invalid("max_tokens must be at least 1".into()));
        }
        if prompt + out > self.cfg.max_model_len {
            return Err(SubmitError::Invalid(format!(
                "This model's maximum context length is {} tokens. However, you requested {} tokens ({} in the messages, {} in the completion). Please reduce the length of the messages or completion.",
                self.cfg.max_model_len,
                prompt + out,
                prompt,
                out
            )));
        }
        let need = blocks_for(prompt + out, self.cfg.block_size);
        if need > self.cfg.num_gpu_blocks {
            return Err(SubmitError::Invalid(format!(
                "the request needs {need} KV blocks ({} prompt + {} output tokens); the cache holds {}",
                prompt, out, self.cfg.num_gpu_blocks
            )));
        }
        let hashes = block_hashes(&req.tokens, self.cfg.block_size);
        let (tx, rx) = mpsc::unbounded_channel();
        let mut st = self.state.lock();
        if st.closed {
            return Err(SubmitError::Closed);
        }
        let mut seq = seq::Seq::new(
            tx,
            req.mode,
            prompt,
            hashes,
            out,
            req.arrived,
            req.remote_cached,
        );
        seq.fingerprint = prompt_fingerprint(&req.tokens);
        st.waiting.push_back(seq);
        drop(st);
        self.notify.notify_one();
        Ok(rx)
    }

    /// Prompt tokens of `tokens` already in this engine's cache (full blocks).
    pub fn local_hit_tokens(&self, tokens: &[u32]) -> usize {
        self.state.lock().local_hit_tokens(tokens)
    }

    /// Answers a pull of one of this engine's leases (`addr` names this worker in errors).
    pub fn pull(&self, req: &PullRequest, addr: &str) -> Result<PullGrant, Rejection> {
        let result = self.count_pull(
            |st, now| st.pull(req, addr, now),
            &self.metrics.pulls,
            |c| (&mut c.pulls_served, &mut c.pull_rejections),
        );
        // Released blocks may let a waiting request in.
        self.notify.notify_one();
        result
    }

    /// Runs `pull` (of a KV or encoder lease) on the state and counts it: in `metric` by
    /// result, and in the counters `counts` picks (pulls served, rejections by reason).
    fn count_pull<G, R: Refusal>(
        &self,
        pull: impl FnOnce(&mut EngineState, Instant) -> Result<G, PullRejection<R>>,
        metric: &IntCounterVec,
        counts: fn(&mut WorkerStats) -> (&mut u64, &mut BTreeMap<String, u64>),
    ) -> Result<G, PullRejection<R>> {
        let mut st = self.state.lock();
        let result = pull(&mut st, Instant::now());
        let (served, rejections) = counts(&mut st.counters);
        let rejected_as = result.as_ref().err().map(PullRejection::label);
        tally(metric, rejected_as, served, 1, rejections);
        result
    }

    /// Applies `f` to the counters (handlers count what the engine cannot see).
    pub fn count(&self, f: impl FnOnce(&mut WorkerStats)) {
        f(&mut self.state.lock().counters)
    }

    /// Counters and current load.
    pub fn stats(&self) -> WorkerStats {
        self.state.lock().stats()
    }

    /// Brings the load gauges up to date (at scrape time).
    pub fn refresh_metrics(&self) {
        self.state.lock().update_gauges(&self.metrics);
    }

    /// Stops taking requests and drops every queued and running one (their handlers see the
    /// engine stop). Called when the worker shuts down.
    pub fn close(&self) {
        let mut st = self.state.lock();
        st.closed = true;
        st.waiting.clear();
        st.running.clear();
    }

    /// The step loop; runs until the task is aborted.
    pub async fn run(self: Arc<Self>) {
        let mut deadline: Option<Instant> = None;
        loop {
            let now = Instant::now();
            let plan = self.state.lock().plan(now, &self.metrics);
            match plan {
                Plan::Step(ms) => {
                    let start = match deadline {
                        Some(d) if d + MAX_LAG >= now => d,
                        _ => now,
                    };
                    let end = start + self.cfg.scaled(ms);
                    if end > now {
                        tokio::time::sleep_until(end).await;
                    } else {
                        tokio::task::yield_now().await;
                    }
                    deadline = Some(end);
                    self.state.lock().complete(Instant::now(), &self.metrics);
                }
                Plan::Idle(wake) => {
                    deadline = None;
                    match wake {
                        Some(at) => {
                            tokio::select! {
                                _ = self.notify.notified() => {}
                                _ = tokio::time::sleep_until(at) => {}
                            }
                        }
                        None => self.notify.notified().await,
                    }
                }
            }
        }
    }
}
