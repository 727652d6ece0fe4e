//! One simulated engine: a continuous-batching step loop over a prefix cache (design.md §6).
//!
//! HTTP handlers [`Engine::submit`] requests and read [`SeqEvent`]s; one task per engine runs
//! [`Engine::run`]: plan a step (admit waiting requests within `max_num_seqs` and the token
//! budget, chunk prefills), sleep its simulated cost, then emit one token to every request that
//! finished its prefill or decodes. Requests whose receiver is gone are dropped and their blocks
//! released.

pub mod cache;
pub mod ec;
pub mod events;
pub mod lease;
pub mod sched;
pub mod seq;

use crate::config::SimConfig;
use crate::handoff::{PullGrant, PullRequest, Rejection};
use crate::kv_events::publish::{event_type, EventSink, SendError};
use crate::metrics::Metrics;
use crate::pull::{PullRejection, Refusal};
use crate::stats::{tally, WorkerStats};
use cache::{block_hashes, blocks_for, prompt_fingerprint};
use parking_lot::Mutex;
use pdgate_api::kv_events::KvEvent;
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
    /// For a local request on a worker with a shared-storage KV connector: the leading prompt
    /// tokens the connector loads (0 when it found nothing); `None` = no connector lookup.
    pub external_tokens: Option<usize>,
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
    /// Where each step's KV events go (`None`: KV events are off).
    events: Option<EventSink>,
    /// Unique engine id (`remote_engine_id`).
    pub engine_id: String,
}

impl Engine {
    /// A new idle engine; start it with [`Engine::run`]. Each step's KV events go to
    /// `events` (recorded only when `cfg` enables them).
    pub fn new(
        cfg: SimConfig,
        engine_id: String,
        revision: Option<String>,
        metrics: Arc<Metrics>,
        events: Option<EventSink>,
    ) -> Self {
        Engine {
            state: Mutex::new(EngineState::new(cfg.clone(), engine_id.clone(), revision)),
            notify: Notify::new(),
            metrics,
            cfg,
            events,
            engine_id,
        }
    }

    /// Empties the prefix cache (`POST /reset_prefix_cache`) and publishes `AllBlocksCleared`
    /// in a batch of its own (events recorded before it go first).
    pub fn reset_prefix_cache(&self) {
        let events = {
            let mut st = self.state.lock();
            st.reset_prefix_cache();
            st.take_events()
        };
        self.publish(events);
    }

    /// Hands one batch of events to the publisher; a full queue drops it (logged, counted
    /// in `pdgate_sim_kv_events_total{type="dropped_batch"}`).
    fn publish(&self, events: Vec<KvEvent>) {
        let Some(sink) = &self.events else { return };
        if events.is_empty() {
            return;
        }
        let types: Vec<&'static str> = events.iter().map(event_type).collect();
        match sink.send(events) {
            Ok(()) => {
                for t in types {
                    self.metrics.kv_events.with_label_values(&[t]).inc();
                }
                self.count(|c| c.kv_event_batches += 1);
            }
            Err(e @ SendError::Full) | Err(e @ SendError::Closed) => {
                self.metrics
                    .kv_events
                    .with_label_values(&["dropped_batch"])
                    .inc();
                tracing::warn!(engine = %self.engine_id, events = types.len(), error = %e, "KV event batch dropped");
            }
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
        let fingerprint = prompt_fingerprint(&req.tokens);
        let mut seq = seq::Seq::new(tx, req.mode, req.tokens, hashes, out, req.arrived);
        seq.fingerprint = fingerprint;
        seq.external = req.external_tokens;
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
            let (plan, events) = {
                let mut st = self.state.lock();
                let plan = st.plan(now, &self.metrics);
                // An idle plan ends no step: what it changed is published now.
                let events = match plan {
                    Plan::Idle(_) => st.take_events(),
                    Plan::Step(_) => Vec::new(),
                };
                (plan, events)
            };
            self.publish(events);
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
                    let events = {
                        let mut st = self.state.lock();
                        st.complete(Instant::now(), &self.metrics);
                        st.take_events()
                    };
                    // One batch per step: admission (evictions, a decode leg's stored
                    // blocks) and the step's computed blocks, in the engine's order.
                    self.publish(events);
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
