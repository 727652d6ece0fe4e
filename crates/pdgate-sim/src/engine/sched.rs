//! The scheduler state of one engine: waiting queue, running batch, prefix cache, leases, and
//! the two halves of a step — [`EngineState::plan`] (admit, chunk, price the step) and
//! [`EngineState::complete`] (advance prefills, emit one token per decoding request, finish).

use super::cache::{block_hashes, blocks_for, BlockId, PrefixCache};
use super::ec::EcLease;
use super::events::CacheEvents;
use super::lease::{Ended, Holder, Lease, Leases};
use super::seq::{Finish, LeaseInfo, Seq, SeqEvent, SeqMode};
use crate::config::SimConfig;
use crate::cost;
use crate::handoff::{KvRefusal, PullGrant, PullRequest, Rejection};
use crate::metrics::Metrics;
use crate::pull::Pull;
use crate::stats::WorkerStats;
use pdgate_api::kv_events::KvEvent;
use std::collections::VecDeque;
use tokio::time::Instant;

/// What the engine loop does next.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Plan {
    /// Run a step of this many simulated milliseconds.
    Step(f64),
    /// Nothing to run; wake at this instant (next KV or encoder lease expiry) or on a new
    /// request.
    Idle(Option<Instant>),
}

/// Everything the engine task and the HTTP handlers share, behind one mutex.
/// (`impl` blocks: here the step, in `ec.rs` the encoder cache.)
pub struct EngineState {
    pub(super) cfg: SimConfig,
    pub(super) engine_id: String,
    pub(super) revision: Option<String>,
    pub(super) cache: PrefixCache,
    pub(super) leases: Leases,
    /// Encoder-cache leases (encode workers).
    pub(super) ec_leases: Leases<EcLease>,
    pub(super) waiting: VecDeque<Seq>,
    pub(super) running: Vec<Seq>,
    pub(super) counters: WorkerStats,
    pub(super) closed: bool,
    next_lease: u64,
    pub(super) next_ec_lease: u64,
}

impl EngineState {
    /// A fresh engine.
    pub fn new(cfg: SimConfig, engine_id: String, revision: Option<String>) -> Self {
        let events = CacheEvents::new(cfg.kv_events_enabled(), cfg.block_size);
        EngineState {
            cache: PrefixCache::with_events(cfg.num_gpu_blocks, events),
            cfg,
            engine_id,
            revision,
            leases: Leases::default(),
            ec_leases: Leases::default(),
            waiting: VecDeque::new(),
            running: Vec::new(),
            counters: WorkerStats::default(),
            closed: false,
            next_lease: 0,
            next_ec_lease: 0,
        }
    }

    /// Prompt tokens of `tokens` this engine already holds (full blocks).
    pub fn local_hit_tokens(&self, tokens: &[u32]) -> usize {
        let hashes = block_hashes(tokens, self.cfg.block_size);
        self.cache.match_prefix(&hashes).len() * self.cfg.block_size
    }

    /// Admits, chunks and prices the next step.
    pub fn plan(&mut self, now: Instant, m: &Metrics) -> Plan {
        self.expire_leases(now, m);
        self.drop_cancelled(m);
        let bs = self.cfg.block_size;
        let mut decoding = 0usize;
        for s in &mut self.running {
            s.decode = s.computed == s.prompt_len;
            decoding += s.decode as usize;
        }
        let mut budget = self.cfg.max_num_batched_tokens.saturating_sub(decoding);
        let mut uncached = 0usize;
        for s in self.running.iter_mut().filter(|s| !s.decode) {
            s.chunk = (s.prompt_len - s.computed).min(budget);
            budget -= s.chunk;
            uncached += s.chunk;
        }
        while self.running.len() < self.cfg.max_num_seqs {
            let Some(front) = self.waiting.front() else {
                break;
            };
            let remote = front.mode == SeqMode::RemoteDecode;
            if !remote && budget == 0 {
                break;
            }
            let mut hits = self.cache.match_prefix(&front.hashes);
            if !remote {
                // As vLLM: the last prompt token is always computed, so a full hit is capped.
                hits.truncate((front.prompt_len - 1) / bs);
            }
            let prompt_blocks = blocks_for(front.prompt_len, bs);
            let lifetime = blocks_for(front.prompt_len + front.max_tokens, bs);
            let cost = (prompt_blocks - hits.len())
                + (lifetime - prompt_blocks)
                + self.cache.unreferenced_among(&hits);
            if cost > self.cache.available() {
                break;
            }
            let n_hits = hits.len();
            let mut s = self.waiting.pop_front().expect("front exists");
            for b in &hits {
                self.cache.acquire(*b);
            }
            s.blocks = hits;
            while s.blocks.len() < prompt_blocks {
                s.blocks
                    .push(self.cache.allocate().expect("availability checked"));
            }
            s.reserved = lifetime - prompt_blocks;
            self.cache.reserve(s.reserved);
            let hit_tokens = n_hits * bs;
            // A decode leg's other prompt tokens came from the prefill (external KV); a
            // shared-storage load covers its tokens beyond the local hits.
            let external = match (remote, s.external) {
                (true, _) => s.prompt_len - hit_tokens,
                (false, Some(loaded)) => loaded.saturating_sub(hit_tokens),
                (false, None) => 0,
            };
            self.count_admission(m, s.prompt_len, hit_tokens, external);
            if !remote && s.external.is_some() {
                self.count_connector_lookup(m, s.prompt_len - hit_tokens, external);
            }
            s.reported_cached = hit_tokens;
            if remote {
                s.computed = s.prompt_len;
                s.register_blocks(&mut self.cache, bs);
                s.decode = true;
                decoding += 1;
            } else {
                s.computed = hit_tokens + external;
                s.registered = hit_tokens / bs;
                // Loaded blocks enter the prefix cache as computed ones do.
                s.register_blocks(&mut self.cache, bs);
                s.chunk = (s.prompt_len - s.computed).min(budget);
                budget -= s.chunk;
                uncached += s.chunk;
            }
            self.running.push(s);
        }
        self.update_gauges(m);
        if uncached == 0 && decoding == 0 {
            let next = [self.leases.next_expiry(), self.ec_leases.next_expiry()];
            return Plan::Idle(next.into_iter().flatten().min());
        }
        Plan::Step(cost::step_ms(uncached, decoding > 0, self.cache.usage()))
    }

    /// Counts an admitted request's prompt tokens as vLLM does: the prefix-cache lookup
    /// (`prefix_cache_queries`/`hits`, tokens) and `prompt_tokens_by_source`
    /// (`local_cache_hit` = `hits`, `external_kv_transfer` = `external`, `local_compute` = the
    /// rest). Source: vLLM `vllm/v1/metrics/stats.py` (`PromptTokenStats`).
    fn count_admission(&mut self, m: &Metrics, prompt: usize, hits: usize, external: usize) {
        let computed = prompt - hits - external;
        m.prefix_queries.inc_by(prompt as u64);
        m.prefix_hits.inc_by(hits as u64);
        for (source, n) in [
            ("local_compute", computed),
            ("local_cache_hit", hits),
            ("external_kv_transfer", external),
        ] {
            m.prompt_tokens_by_source
                .with_label_values(&[source])
                .inc_by(n as u64);
        }
        let c = &mut self.counters;
        c.prefix_cache_queries += prompt as u64;
        c.prefix_cache_hits += hits as u64;
        c.prompt_tokens_local_compute += computed as u64;
        c.prompt_tokens_local_cache_hit += hits as u64;
        c.prompt_tokens_external_kv_transfer += external as u64;
    }

    /// Counts one KV-connector lookup as vLLM's scheduler does (`connector_prefix_cache_stats`):
    /// `queries` = prompt tokens not found locally, `hits` = tokens the connector loads.
    fn count_connector_lookup(&mut self, m: &Metrics, queries: usize, hits: usize) {
        m.external_prefix_queries.inc_by(queries as u64);
        m.external_prefix_hits.inc_by(hits as u64);
        self.counters.external_prefix_cache_queries += queries as u64;
        self.counters.external_prefix_cache_hits += hits as u64;
    }

    /// Empties the prefix cache (`POST /reset_prefix_cache`); records `AllBlocksCleared`.
    pub fn reset_prefix_cache(&mut self) {
        self.cache.reset();
    }

    /// The KV events recorded since the last call, in the engine's order.
    pub fn take_events(&mut self) -> Vec<KvEvent> {
        self.cache.events.take()
    }

    /// Ends the step planned last: prefills advance, every request that finished its prefill
    /// or decodes gets one token, finished requests leave the batch.
    pub fn complete(&mut self, now: Instant, m: &Metrics) {
        let bs = self.cfg.block_size;
        let batch = std::mem::take(&mut self.running);
        for mut s in batch {
            let emit = if s.chunk > 0 {
                s.computed += s.chunk;
                s.chunk = 0;
                s.register_blocks(&mut self.cache, bs);
                s.computed == s.prompt_len
            } else {
                std::mem::take(&mut s.decode)
            };
            if !emit {
                self.running.push(s);
                continue;
            }
            s.generated += 1;
            while s.blocks.len() < blocks_for(s.prompt_len + s.generated, bs) && s.reserved > 0 {
                s.reserved -= 1;
                let b = self.cache.allocate_reserved().expect("reserved block");
                s.blocks.push(b);
            }
            if s.mode != SeqMode::Pooling {
                m.generation_tokens.inc();
                self.counters.generation_tokens += 1;
            }
            if s.generated == 1 {
                m.ttft.observe(now.duration_since(s.arrived).as_secs_f64());
            }
            if s.tx.send(SeqEvent::Token).is_err() {
                self.cancel(s, m);
                continue;
            }
            if s.generated == s.max_tokens {
                self.finish(s, now, m);
            } else {
                self.running.push(s);
            }
        }
        self.update_gauges(m);
    }

    fn finish(&mut self, mut s: Seq, now: Instant, m: &Metrics) {
        let prompt_blocks = blocks_for(s.prompt_len, self.cfg.block_size);
        self.cache.unreserve(std::mem::take(&mut s.reserved));
        m.request_success.with_label_values(&["length"]).inc();
        m.e2e.observe(now.duration_since(s.arrived).as_secs_f64());
        m.prompt_tokens.inc_by(s.prompt_len as u64);
        self.counters.prompt_tokens += s.prompt_len as u64;
        self.counters.cached_tokens += s.reported_cached as u64;
        let mut lease = None;
        if s.mode == SeqMode::PrefillLeg {
            let output = s.blocks.split_off(prompt_blocks);
            self.cache.release(&output);
            self.next_lease += 1;
            let id = format!("{}-lease-{}", self.engine_id, self.next_lease);
            let blocks = std::mem::take(&mut s.blocks);
            lease = Some(LeaseInfo {
                id: id.clone(),
                blocks: blocks.clone(),
            });
            self.leases.insert(
                id,
                Lease {
                    blocks,
                    prompt_tokens: s.prompt_len,
                    fingerprint: s.fingerprint,
                    cached_tokens: s.reported_cached,
                    expires_at: now + self.cfg.lease_ttl,
                },
            );
            self.counters.prefill_legs += 1;
        } else {
            self.cache.release(&s.blocks);
        }
        let fin = Finish {
            prompt_tokens: s.prompt_len,
            cached_tokens: s.reported_cached,
            lease: lease.clone(),
        };
        if s.tx.send(SeqEvent::Finished(fin)).is_err() {
            // Nobody will relay the lease: release it now rather than at its TTL.
            if let Some(l) = lease {
                if let Some(l) = self.leases.end(&l.id, Ended::Consumed) {
                    self.cache.release(&l.blocks);
                }
            }
        }
    }

    /// Drops a request whose client left; counted as vLLM does
    /// (`vllm:request_success_total{finished_reason="abort"}`).
    fn cancel(&mut self, mut s: Seq, m: &Metrics) {
        self.cache.unreserve(std::mem::take(&mut s.reserved));
        self.cache.release(&s.blocks);
        self.counters.cancelled += 1;
        m.request_success.with_label_values(&["abort"]).inc();
    }

    fn drop_cancelled(&mut self, m: &Metrics) {
        let before = self.waiting.len();
        self.waiting.retain(|s| !s.tx.is_closed());
        let gone = (before - self.waiting.len()) as u64;
        self.counters.cancelled += gone;
        m.request_success.with_label_values(&["abort"]).inc_by(gone);
        let batch = std::mem::take(&mut self.running);
        for s in batch {
            if s.tx.is_closed() {
                self.cancel(s, m);
            } else {
                self.running.push(s);
            }
        }
    }

    fn expire_leases(&mut self, now: Instant, m: &Metrics) {
        for l in self.leases.expire(now) {
            self.cache.release(&l.blocks);
            m.pulls.with_label_values(&["expired_unpulled"]).inc();
        }
        for _ in self.ec_leases.expire(now) {
            m.ec_pulls.with_label_values(&["expired_unpulled"]).inc();
        }
    }

    /// Answers a pull of one of this engine's leases. Checks, in order: those of
    /// [`Leases::check`], prompt, blocks. On success the lease ends and its blocks are released;
    /// a refused pull leaves a live lease as it was.
    pub fn pull(
        &mut self,
        req: &PullRequest,
        addr: &str,
        now: Instant,
    ) -> Result<PullGrant, Rejection> {
        let holder = self.holder(addr);
        let cache = &mut self.cache;
        let lease = self
            .leases
            .check(req.claim(), holder, now, |l| cache.release(&l.blocks))?;
        if req.num_tokens != lease.prompt_tokens
            || req
                .prompt_fingerprint
                .is_some_and(|f| f != lease.fingerprint)
        {
            return Err(KvRefusal::PromptMismatch {
                lease: req.request_id.clone(),
                held: lease.prompt_tokens,
                asked: req.num_tokens,
            }
            .into());
        }
        if let Some(ids) = &req.block_ids {
            if !ids
                .iter()
                .map(|b| *b as BlockId)
                .eq(lease.blocks.iter().copied())
                || ids.iter().any(|b| *b > BlockId::MAX as u64)
            {
                let lease = req.request_id.clone();
                return Err(KvRefusal::BlockMismatch { lease }.into());
            }
        }
        let l = self
            .leases
            .end(&req.request_id, Ended::Consumed)
            .expect("lease is live");
        self.cache.release(&l.blocks);
        Ok(PullGrant {
            transferred_tokens: l.prompt_tokens.saturating_sub(req.skip_tokens),
            cached_tokens: l.cached_tokens,
            prompt_tokens: l.prompt_tokens,
        })
    }

    /// This engine as the holder of a pull at `addr`.
    pub(super) fn holder<'a>(&self, addr: &'a str) -> Holder<'a> {
        Holder {
            engine_id: self.engine_id.clone(),
            revision: self.revision.clone(),
            addr,
        }
    }

    pub(super) fn update_gauges(&self, m: &Metrics) {
        m.running.set(self.running.len() as i64);
        m.waiting.set(self.waiting.len() as i64);
        m.kv_usage.set(self.cache.usage());
        m.leases.set(self.leases.len() as i64);
        m.ec_leases.set(self.ec_leases.len() as i64);
    }

    /// Counters plus current load.
    pub fn stats(&self) -> WorkerStats {
        WorkerStats {
            running: self.running.len(),
            waiting: self.waiting.len(),
            kv_blocks_used: self.cache.referenced(),
            kv_blocks_total: self.cache.capacity(),
            leases: self.leases.len(),
            ec_leases: self.ec_leases.len(),
            ..self.counters.clone()
        }
    }
}
