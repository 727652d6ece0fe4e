//! The flow-control queues: priority bands → flows (fairness ids) → items, with the global
//! and per-band limits checked at enqueue. Pure state; the caller supplies time (ms on any
//! monotonic clock) and decides when to dispatch (llm-d-router `flowcontrol/registry`,
//! `controller/internal/processor.go`).
//!
//! - Enqueue refuses a request that would pass `maxRequests`/`maxBytes` (global, then its
//!   band): queued items are never displaced.
//! - [`Queues::pop_next`] serves bands in strict priority order (highest first); within a
//!   band the fairness policy picks the flow and the ordering policy the item.
//! - A request whose priority has no band joins the priority-0 band (llm-d's fallback).
//! - Bands with `program-aware-fairness` choose by their program [`Ledger`] (one per
//!   distinct parameter set), which the caller keeps current: [`Queues::record_dispatch`],
//!   [`Queues::record_completion`], [`Queues::sweep_programs`].

use super::policy::{Fairness, Ordering};
use super::program_aware::{Ledger, Program};
use super::settings::{BandConfig, FlowControlConfig};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// One queued request.
#[derive(Debug, Clone, PartialEq)]
pub struct Item {
    /// Unique, increasing in arrival order (the FCFS tie-break).
    pub id: u64,
    /// The request's priority (its band's, after fallback, once queued).
    pub priority: i32,
    /// Fairness id.
    pub flow: Arc<str>,
    /// Body size, bytes.
    pub bytes: u64,
    /// Enqueue time, ms.
    pub enqueued_ms: u64,
    /// `x-llm-d-slo-ttft-ms`, when given (slo-deadline ordering).
    pub slo_ttft_ms: Option<u64>,
}

/// Why an item was not queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// A global or band limit would be passed.
    Capacity,
}

type Flow = BTreeMap<(u64, u64), Item>;

#[derive(Debug)]
struct Band {
    cfg: BandConfig,
    flows: BTreeMap<Arc<str>, Flow>,
    len: u64,
    bytes: u64,
    /// Round robin: the flow served last.
    cursor: Option<Arc<str>>,
    /// Program-aware fairness: its ledger's index.
    ledger: Option<usize>,
}

/// The queues (see the module docs).
#[derive(Debug)]
pub struct Queues {
    cfg: FlowControlConfig,
    /// Highest priority first.
    bands: Vec<Band>,
    len: u64,
    bytes: u64,
    /// id → (band index, flow, ordering key).
    index: HashMap<u64, (usize, Arc<str>, u64)>,
    /// Program ledgers of the program-aware bands, one per distinct setting.
    ledgers: Vec<Ledger>,
}

impl Queues {
    /// Queues for `cfg`'s bands plus one per priority in `extra` (the priorities requests
    /// can carry, e.g. of the configured InferenceObjectives).
    pub fn new(cfg: &FlowControlConfig, extra: impl IntoIterator<Item = i32>) -> Self {
        let mut bands: Vec<BandConfig> = cfg.bands.clone();
        for p in extra {
            if !bands.iter().any(|b| b.priority == p) {
                bands.push(cfg.band(p));
            }
        }
        bands.sort_by_key(|b| std::cmp::Reverse(b.priority));
        let mut ledgers: Vec<Ledger> = Vec::new();
        let mut ledger_of = |f: Fairness| match f {
            Fairness::ProgramAware(las) => {
                Some(match ledgers.iter().position(|l| l.las() == las) {
                    Some(i) => i,
                    None => {
                        ledgers.push(Ledger::new(las));
                        ledgers.len() - 1
                    }
                })
            }
            _ => None,
        };
        let bands = bands
            .into_iter()
            .map(|cfg| Band {
                ledger: ledger_of(cfg.fairness),
                cfg,
                flows: BTreeMap::new(),
                len: 0,
                bytes: 0,
                cursor: None,
            })
            .collect();
        Queues {
            cfg: cfg.clone(),
            bands,
            len: 0,
            bytes: 0,
            index: HashMap::new(),
            ledgers,
        }
    }

    fn band_index(&self, priority: i32) -> usize {
        self.bands
            .iter()
            .position(|b| b.cfg.priority == priority)
            .or_else(|| self.bands.iter().position(|b| b.cfg.priority == 0))
            .unwrap_or(0)
    }

    /// The priority of the band a request of `priority` joins.
    pub fn band_priority(&self, priority: i32) -> i32 {
        self.bands[self.band_index(priority)].cfg.priority
    }

    /// Queues `item` (its `priority` is rewritten to its band's).
    ///
    /// Errors: [`Refusal::Capacity`] when a global or band limit would be passed.
    pub fn enqueue(&mut self, mut item: Item) -> Result<(), Refusal> {
        let b = self.band_index(item.priority);
        let over = |cap: u64, now: u64, add: u64| cap > 0 && now + add > cap;
        let band = &self.bands[b];
        if over(self.cfg.max_bytes, self.bytes, item.bytes)
            || over(self.cfg.max_requests, self.len, 1)
            || over(band.cfg.max_bytes, band.bytes, item.bytes)
            || over(band.cfg.max_requests, band.len, 1)
        {
            return Err(Refusal::Capacity);
        }
        let key = self.key(&item, band.cfg.ordering);
        item.priority = band.cfg.priority;
        let band = &mut self.bands[b];
        band.len += 1;
        band.bytes += item.bytes;
        self.len += 1;
        self.bytes += item.bytes;
        self.index.insert(item.id, (b, item.flow.clone(), key));
        band.flows
            .entry(item.flow.clone())
            .or_default()
            .insert((key, item.id), item);
        Ok(())
    }

    fn key(&self, item: &Item, ordering: Ordering) -> u64 {
        let ttl = self.cfg.default_ttl.as_millis() as u64;
        match ordering {
            Ordering::Fcfs => item.enqueued_ms,
            Ordering::Edf if ttl > 0 => item.enqueued_ms.saturating_add(ttl),
            Ordering::Edf => u64::MAX,
            Ordering::SloDeadline => item
                .slo_ttft_ms
                .map_or(u64::MAX, |s| item.enqueued_ms.saturating_add(s)),
        }
    }

    /// Removes the item `id` (a client that went away); `None` if it is not queued.
    pub fn remove(&mut self, id: u64) -> Option<Item> {
        let (b, flow, key) = self.index.remove(&id)?;
        self.take(b, &flow, (key, id))
    }

    fn take(&mut self, b: usize, flow: &Arc<str>, k: (u64, u64)) -> Option<Item> {
        let band = &mut self.bands[b];
        let queue = band.flows.get_mut(flow)?;
        let item = queue.remove(&k)?;
        if queue.is_empty() {
            band.flows.remove(flow);
        }
        band.len -= 1;
        band.bytes -= item.bytes;
        self.len -= 1;
        self.bytes -= item.bytes;
        self.index.remove(&item.id);
        Some(item)
    }

    /// Takes the next item to dispatch at `now_ms`: the highest non-empty band, its flow by
    /// the band's fairness policy, that flow's first item by the band's ordering.
    pub fn pop_next(&mut self, now_ms: u64) -> Option<Item> {
        let b = self.bands.iter().position(|b| b.len > 0)?;
        let band = &self.bands[b];
        let flow: Arc<str> = match band.cfg.fairness {
            Fairness::ProgramAware(_) => {
                let ledger = &mut self.ledgers[band.ledger?];
                let heads = band
                    .flows
                    .iter()
                    .filter_map(|(f, q)| Some((f, q.values().next()?.enqueued_ms)));
                ledger.choose(heads, now_ms)?.clone()
            }
            Fairness::GlobalStrict => band
                .flows
                .iter()
                .filter_map(|(f, q)| Some((q.keys().next()?, f)))
                .min_by_key(|(k, _)| **k)?
                .1
                .clone(),
            Fairness::RoundRobin => {
                let after = band.cursor.as_ref().and_then(|c| {
                    band.flows
                        .range::<str, _>((
                            std::ops::Bound::Excluded(&**c),
                            std::ops::Bound::Unbounded,
                        ))
                        .next()
                });
                after.or_else(|| band.flows.iter().next())?.0.clone()
            }
        };
        let k = *band.flows.get(&flow)?.keys().next()?;
        self.bands[b].cursor = Some(flow.clone());
        self.take(b, &flow, k)
    }

    /// Removes and returns the items that waited their band's budget: those with
    /// `now_ms ≥ max(enqueued_ms, since_ms) + budget_ms(band)`, ms (`since_ms`: when the pool
    /// last went from empty to not or back; a zero budget never expires).
    pub fn expire(
        &mut self,
        now_ms: u64,
        budget_ms: impl Fn(&BandConfig) -> u64,
        since_ms: u64,
    ) -> Vec<Item> {
        if self.len == 0 {
            return Vec::new();
        }
        let due: Vec<(usize, Arc<str>, (u64, u64))> = self
            .bands
            .iter()
            .enumerate()
            .filter_map(|(b, band)| Some((b, band, Some(budget_ms(&band.cfg)).filter(|&t| t > 0)?)))
            .flat_map(|(b, band, budget_ms)| {
                band.flows.iter().flat_map(move |(f, q)| {
                    q.iter()
                        .filter(move |(_, it)| {
                            now_ms >= it.enqueued_ms.max(since_ms).saturating_add(budget_ms)
                        })
                        .map(move |(k, _)| (b, f.clone(), *k))
                })
            })
            .collect();
        due.into_iter()
            .filter_map(|(b, f, k)| self.take(b, &f, k))
            .collect()
    }

    /// True when some band uses `program-aware-fairness` (the caller then records
    /// dispatches and completions).
    pub fn program_aware(&self) -> bool {
        !self.ledgers.is_empty()
    }

    /// A request of fairness id `flow` from the band of `priority` was dispatched at
    /// `now_ms` after waiting `waited_ms` (ms): counted in flight by every ledger, its wait
    /// observed when its band is program-aware.
    pub fn record_dispatch(&mut self, flow: &Arc<str>, priority: i32, waited_ms: u64, now_ms: u64) {
        let aware = self.bands[self.band_index(priority)].ledger.is_some();
        for l in &mut self.ledgers {
            l.dispatched(flow, aware.then_some(waited_ms), now_ms);
        }
    }

    /// A dispatched request of `flow` finished at `now_ms`, costing `cost` weighted tokens
    /// (`None`: unknown). Returns the first ledger's attained service of `flow` after it.
    pub fn record_completion(
        &mut self,
        flow: &Arc<str>,
        cost: Option<f64>,
        now_ms: u64,
    ) -> Option<f64> {
        let mut first = None;
        for l in &mut self.ledgers {
            let s = l.completed(flow, cost, now_ms);
            first.get_or_insert(s);
        }
        first
    }

    /// Runs the ledgers' eviction sweeps (when due at `now_ms`); returns the programs the
    /// first ledger forgot.
    pub fn sweep_programs(&mut self, now_ms: u64) -> Vec<Arc<str>> {
        let mut first = None;
        for l in &mut self.ledgers {
            let gone = l.sweep(now_ms);
            first.get_or_insert(gone);
        }
        first.unwrap_or_default()
    }

    /// The first ledger's record of program `flow`.
    pub fn program(&self, flow: &str) -> Option<&Program> {
        self.ledgers.first()?.program(flow)
    }

    /// The first ledger's Jain's fairness index of mean waits.
    pub fn fairness_index(&self) -> Option<f64> {
        self.ledgers.first().map(Ledger::fairness_index)
    }

    /// Removes every item (shutdown).
    pub fn drain(&mut self) -> Vec<Item> {
        let ids: Vec<u64> = self.index.keys().copied().collect();
        ids.into_iter().filter_map(|id| self.remove(id)).collect()
    }

    /// Queued requests.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// True when nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Queued bytes.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// `(priority, queued requests, queued bytes)` per band, highest priority first.
    pub fn bands(&self) -> impl Iterator<Item = (i32, u64, u64)> + '_ {
        self.bands.iter().map(|b| (b.cfg.priority, b.len, b.bytes))
    }
}

#[cfg(test)]
#[path = "queues_tests.rs"]
mod tests;
