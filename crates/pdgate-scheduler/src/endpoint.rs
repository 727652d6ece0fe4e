//! Endpoints and the snapshot the scheduler reads.
//!
//! A [`Snapshot`] is built by discovery outside the pick path and swapped in whole; the pick
//! path only reads it. Per-endpoint load ([`EndpointLoad`]) lives behind an `Arc` that survives
//! snapshot rebuilds (discovery carries it over by endpoint name), and is updated in place by
//! the metrics scraper (engine gauges) and by [`InFlightGuard`] and [`TokenGuard`] (router
//! bookings: requests, and their prompt tokens).

use arc_swap::ArcSwapOption;
use pdgate_api::{labels, Role};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;

/// One model-server target (design.md §1).
#[derive(Debug, Clone, PartialEq)]
pub struct Endpoint {
    /// Unique name, e.g. the pod name, or `<pod>-rank-<i>` for a data-parallel rank.
    pub name: String,
    /// `host:port` of the engine's HTTP server.
    pub address: String,
    /// Labels (role, revision, …).
    pub labels: BTreeMap<String, String>,
    /// Role from the `llm-d.ai/role` label; `None` when unlabeled.
    pub role: Option<Role>,
    /// Ready to serve (Kubernetes readiness).
    pub ready: bool,
    /// Being deleted; gets no new traffic.
    pub terminating: bool,
    /// Data-parallel rank, when the pod runs several.
    pub dp_rank: Option<u32>,
}

impl Endpoint {
    /// An endpoint with the given labels; the role is read from `llm-d.ai/role`
    /// (an unknown value leaves it `None`; discovery validates labels before this).
    pub fn new(
        name: impl Into<String>,
        address: impl Into<String>,
        labels: BTreeMap<String, String>,
    ) -> Self {
        let role = labels.get(labels::ROLE).and_then(|r| r.parse().ok());
        Endpoint {
            name: name.into(),
            address: address.into(),
            labels,
            role,
            ready: true,
            terminating: false,
            dp_rank: None,
        }
    }

    /// Revision label (`disaggregatedset.x-k8s.io/revision`), if any.
    pub fn revision(&self) -> Option<&str> {
        self.labels.get(labels::DS_REVISION).map(String::as_str)
    }

    /// Ready and not terminating: may receive new traffic.
    pub fn schedulable(&self) -> bool {
        self.ready && !self.terminating
    }
}

/// Live load of one endpoint. Gauges are `f64` stored as bits; NaN means *unknown*
/// (never scraped, or the engine does not export that gauge), which is never read as 0.
/// One cell per endpoint name in the current snapshot: discovery drops it (after
/// [`EndpointLoad::retire`]) when the endpoint leaves, and a name that comes back gets a
/// fresh one.
#[derive(Debug)]
pub struct EndpointLoad {
    /// Unique per cell in this process (see [`Self::uid`]).
    uid: u64,
    /// Model ids from the engine's `/v1/models`; `None` until known. Read on every pick for
    /// every candidate, so lock-free (a read lock here was a fifth of a 512-endpoint pick).
    models: ArcSwapOption<Vec<String>>,
    /// The pick's fast path over `models`: [`ModelKey::UNKNOWN`] until known,
    /// [`ModelKey::SEVERAL`] for anything but exactly one model, else that model's key.
    model_key: AtomicU64,
    /// The engine's model objects, verbatim; `None` until known.
    model_cards: ArcSwapOption<Vec<serde_json::Value>>,
    /// LoRA adapters from `vllm:lora_requests_info`; `None` when not exported or not scraped.
    /// Read on the pick path by `lora-affinity-scorer`, so lock-free.
    lora: ArcSwapOption<LoraInfo>,
    in_flight: AtomicU32,
    /// Prompt tokens this router booked here that are still to prefill (see [`TokenGuard`]).
    pending_prefill_tokens: AtomicU64,
    /// Tokens of the requests this router booked here and has not released.
    active_tokens: AtomicU64,
    running: AtomicU64,
    waiting: AtomicU64,
    kv_usage: AtomicU64,
    /// Last `/metrics` scrape: 0 never scraped, 1 answered, 2 failed.
    reachable: AtomicU8,
    /// When the gauges were last stored, [`monotonic_ms`]; 0 never.
    scraped_at_ms: AtomicU64,
    /// Set when the endpoint left discovery: producers stop crediting it.
    retired: AtomicBool,
}

impl Default for EndpointLoad {
    fn default() -> Self {
        static NEXT_UID: AtomicU64 = AtomicU64::new(1);
        EndpointLoad {
            uid: NEXT_UID.fetch_add(1, Ordering::Relaxed),
            models: ArcSwapOption::empty(),
            model_key: AtomicU64::new(ModelKey::UNKNOWN.0),
            model_cards: ArcSwapOption::empty(),
            lora: ArcSwapOption::empty(),
            in_flight: AtomicU32::new(0),
            pending_prefill_tokens: AtomicU64::new(0),
            active_tokens: AtomicU64::new(0),
            running: AtomicU64::new(f64::NAN.to_bits()),
            waiting: AtomicU64::new(f64::NAN.to_bits()),
            kv_usage: AtomicU64::new(f64::NAN.to_bits()),
            reachable: AtomicU8::new(0),
            scraped_at_ms: AtomicU64::new(0),
            retired: AtomicBool::new(false),
        }
    }
}

fn read(a: &AtomicU64) -> Option<f64> {
    let v = f64::from_bits(a.load(Ordering::Relaxed));
    (!v.is_nan()).then_some(v)
}

impl EndpointLoad {
    /// This cell's id, unique in the process: it names one lifecycle of an endpoint (a name
    /// that leaves discovery and comes back gets a new cell, so a new uid). The prefix index
    /// keys its lookups on it: no string hashing per candidate, and no credit carried over
    /// from an earlier lifecycle of the same name.
    pub fn uid(&self) -> u64 {
        self.uid
    }
    /// Requests this router has booked on the endpoint and not yet released.
    pub fn in_flight(&self) -> u32 {
        self.in_flight.load(Ordering::Relaxed)
    }
    /// Prompt tokens still to prefill of the requests this router booked here (tokens; each
    /// request's prompt less its prefix-index match, released at its first token or end).
    pub fn pending_prefill_tokens(&self) -> u64 {
        self.pending_prefill_tokens.load(Ordering::Relaxed)
    }
    /// Tokens held by the requests this router booked here and has not released (tokens;
    /// each request's prompt, released at its end): the active decode load.
    pub fn active_tokens(&self) -> u64 {
        self.active_tokens.load(Ordering::Relaxed)
    }
    /// `vllm:num_requests_running`, if known.
    pub fn running(&self) -> Option<f64> {
        read(&self.running)
    }
    /// `vllm:num_requests_waiting`, if known.
    pub fn waiting(&self) -> Option<f64> {
        read(&self.waiting)
    }
    /// `vllm:kv_cache_usage_perc` (0..1), if known.
    pub fn kv_usage(&self) -> Option<f64> {
        read(&self.kv_usage)
    }
    /// Stores scraped gauges, stamped now ([`monotonic_ms`], read here: the data layer's
    /// write, not a scheduling decision); `None` marks a gauge unknown.
    pub fn set_scraped(&self, running: Option<f64>, waiting: Option<f64>, kv_usage: Option<f64>) {
        self.set_scraped_at(running, waiting, kv_usage, monotonic_ms());
    }
    /// [`Self::set_scraped`] stamped `now_ms` (ms, [`monotonic_ms`] clock) instead of now.
    pub fn set_scraped_at(
        &self,
        running: Option<f64>,
        waiting: Option<f64>,
        kv: Option<f64>,
        now_ms: u64,
    ) {
        let w = |a: &AtomicU64, v: Option<f64>| {
            a.store(v.unwrap_or(f64::NAN).to_bits(), Ordering::Relaxed)
        };
        w(&self.running, running);
        w(&self.waiting, waiting);
        w(&self.kv_usage, kv);
        // Only a scrape that told something is fresh data: a failed one (all unknown)
        // leaves the stamp to age, so saturation detectors count the endpoint as stale.
        if running.is_some() || waiting.is_some() || kv.is_some() {
            self.scraped_at_ms.store(now_ms.max(1), Ordering::Relaxed);
        }
    }
    /// When gauges were last stored ([`Self::set_scraped`] with any known), on the
    /// [`monotonic_ms`] clock; `None` before the first such scrape. Saturation detectors
    /// treat old gauges as unknown.
    pub fn scraped_at_ms(&self) -> Option<u64> {
        Some(self.scraped_at_ms.load(Ordering::Relaxed)).filter(|t| *t > 0)
    }
    /// Model ids the engine serves, when known (read from its `/v1/models`).
    pub fn models(&self) -> Option<Arc<Vec<String>>> {
        self.models.load_full()
    }
    /// Stores the engine's model list.
    pub fn set_models(&self, models: Vec<String>) {
        let key = match models.as_slice() {
            [one] => ModelKey::of(one),
            _ => ModelKey::SEVERAL,
        };
        self.models.store(Some(Arc::new(models)));
        self.model_key.store(key.0, Ordering::Release);
    }
    /// The engine's `/v1/models` objects as it sent them (`id`, `created`, `owned_by`,
    /// `max_model_len`, `root`, …), when known.
    pub fn model_cards(&self) -> Option<Arc<Vec<serde_json::Value>>> {
        self.model_cards.load_full()
    }
    /// Stores the engine's model objects and, from their `id` fields, its model list.
    pub fn set_model_cards(&self, cards: Vec<serde_json::Value>) {
        let ids = cards
            .iter()
            .filter_map(|c| c.get("id")?.as_str().map(str::to_string))
            .collect();
        self.set_models(ids);
        self.model_cards.store(Some(Arc::new(cards)));
    }
    /// The engine's LoRA adapters (`vllm:lora_requests_info`), when its last scrape had them.
    pub fn lora(&self) -> Option<Arc<LoraInfo>> {
        self.lora.load_full()
    }
    /// Stores the LoRA adapters of a scrape; `None` when the engine exports none (or the
    /// scrape failed).
    pub fn set_lora(&self, lora: Option<LoraInfo>) {
        self.lora.store(lora.map(Arc::new));
    }
    /// Whether the last `/metrics` scrape answered: `None` before the first scrape.
    pub fn reachable(&self) -> Option<bool> {
        match self.reachable.load(Ordering::Relaxed) {
            1 => Some(true),
            2 => Some(false),
            _ => None,
        }
    }
    /// Stores the outcome of a `/metrics` scrape.
    pub fn set_reachable(&self, ok: bool) {
        self.reachable
            .store(if ok { 1 } else { 2 }, Ordering::Relaxed);
    }
    /// Marks the endpoint as gone from discovery (called by the registry when it leaves).
    pub fn retire(&self) {
        self.retired.store(true, Ordering::Release);
    }
    /// True once the endpoint left discovery; responses still in flight must not credit it.
    pub fn is_retired(&self) -> bool {
        self.retired.load(Ordering::Acquire)
    }
    /// True when the engine serves `model`, or its model list is not known yet (unknown
    /// must not take an endpoint out of rotation), or `model` is empty: a request that names
    /// no model (allowed on responses, embeddings, generate, tokenize and detokenize, as vLLM
    /// allows) is served by whichever model the engine runs.
    pub fn serves(&self, model: &str) -> bool {
        self.serves_key(model, ModelKey::of(model))
    }
    /// [`Self::serves`] with the model's key computed once by the caller (a pick asks it
    /// of every candidate). An engine with exactly one model answers from one atomic load;
    /// the list is read only for engines with several.
    pub fn serves_key(&self, model: &str, key: ModelKey) -> bool {
        match ModelKey(self.model_key.load(Ordering::Acquire)) {
            _ if model.is_empty() => true,
            ModelKey::UNKNOWN => true,
            ModelKey::SEVERAL => self
                .models
                .load()
                .as_ref()
                .is_none_or(|m| m.iter().any(|id| id == model)),
            one => one == key,
        }
    }
    /// Queue depth used by load scorers: the larger of the router's live bookings and the
    /// engine's scraped running + waiting. Bookings are exact and immediate (a burst sees its
    /// own earlier picks); scraped gauges add load from other clients of the same engine.
    pub fn queue_depth(&self) -> f64 {
        let booked = self.in_flight() as f64;
        match (self.running(), self.waiting()) {
            (None, None) => booked,
            (r, w) => booked.max(r.unwrap_or(0.0) + w.unwrap_or(0.0)),
        }
    }
}

/// The LoRA adapters of one engine, from the labels of its `vllm:lora_requests_info` series
/// with the highest value (vLLM's value is the series' creation time, so the latest state).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LoraInfo {
    /// Adapters loaded and running (`running_lora_adapters`): unique names, in label order.
    pub running: Vec<String>,
    /// Adapters waiting to be loaded (`waiting_lora_adapters`): unique names, in label order.
    pub waiting: Vec<String>,
    /// Adapters the engine holds at once (`max_lora`); 0 when absent or not an integer.
    pub max_lora: usize,
}

impl LoraInfo {
    /// From the label values `running_lora_adapters` and `waiting_lora_adapters`
    /// (comma-separated; names trimmed, empty ones and repeats dropped) and `max_lora`.
    pub fn from_labels(running: &str, waiting: &str, max_lora: &str) -> LoraInfo {
        fn names(csv: &str) -> Vec<String> {
            let mut out: Vec<String> = Vec::new();
            for n in csv.split(',').map(str::trim).filter(|n| !n.is_empty()) {
                if !out.iter().any(|o| o == n) {
                    out.push(n.to_string());
                }
            }
            out
        }
        LoraInfo {
            running: names(running),
            waiting: names(waiting),
            max_lora: max_lora.trim().parse().unwrap_or(0),
        }
    }
}

/// Milliseconds since the first call in this process (a monotonic clock, never 0 after the
/// first millisecond): the time base of [`EndpointLoad::scraped_at_ms`].
pub fn monotonic_ms() -> u64 {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    START
        .get_or_init(std::time::Instant::now)
        .elapsed()
        .as_millis() as u64
}

/// A model id reduced to 64 bits for [`EndpointLoad::serves_key`]: xxh3 of the id with
/// the low bit set, so it is never one of the two markers (0 unknown, 2 several). Two ids
/// share a key with probability 2⁻⁶³.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModelKey(u64);

impl ModelKey {
    const UNKNOWN: ModelKey = ModelKey(0);
    const SEVERAL: ModelKey = ModelKey(2);

    /// The key of model id `model`.
    pub fn of(model: &str) -> ModelKey {
        ModelKey(xxhash_rust::xxh3::xxh3_64(model.as_bytes()) | 1)
    }
}

/// An endpoint with its live load.
#[derive(Debug)]
pub struct EndpointState {
    /// Identity, labels and readiness.
    pub endpoint: Endpoint,
    /// Live load, shared across snapshots.
    pub load: Arc<EndpointLoad>,
}

/// The endpoint set the scheduler reads; immutable once built.
#[derive(Debug, Default)]
pub struct Snapshot {
    /// All known endpoints, schedulable or not, in discovery order.
    pub endpoints: Vec<Arc<EndpointState>>,
    /// Increases with every rebuild.
    pub version: u64,
}

impl Snapshot {
    /// Looks an endpoint up by name.
    pub fn get(&self, name: &str) -> Option<&Arc<EndpointState>> {
        self.endpoints.iter().find(|e| e.endpoint.name == name)
    }
}

/// An in-flight booking: +1 on the endpoint's count at pick time, −1 when dropped. Tie it to
/// the response body so end of stream, error and client disconnect all release it.
#[derive(Debug)]
pub struct InFlightGuard {
    load: Arc<EndpointLoad>,
}

impl InFlightGuard {
    /// Books one request on `load`.
    pub fn book(load: &Arc<EndpointLoad>) -> Self {
        load.in_flight.fetch_add(1, Ordering::Relaxed);
        InFlightGuard { load: load.clone() }
    }
}

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        self.load.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A token booking of one request on one endpoint: `prefill` tokens added to its
/// [`EndpointLoad::pending_prefill_tokens`] and `active` tokens to its
/// [`EndpointLoad::active_tokens`] at pick time, taken off when dropped — the prefill part
/// earlier, at [`Self::prefill_done`]. Like [`InFlightGuard`], tie it to the response body.
#[derive(Debug)]
pub struct TokenGuard {
    load: Arc<EndpointLoad>,
    prefill: u64,
    active: u64,
}

impl TokenGuard {
    /// Books `prefill` tokens still to prefill and `active` tokens held on `load`.
    pub fn book(load: &Arc<EndpointLoad>, prefill: u64, active: u64) -> Self {
        load.pending_prefill_tokens
            .fetch_add(prefill, Ordering::Relaxed);
        load.active_tokens.fetch_add(active, Ordering::Relaxed);
        TokenGuard {
            load: load.clone(),
            prefill,
            active,
        }
    }

    /// The engine is past this request's prefill (its first token came): its prefill part is
    /// released now; the active part stays until drop. Idempotent.
    pub fn prefill_done(&mut self) {
        let p = std::mem::take(&mut self.prefill);
        self.load
            .pending_prefill_tokens
            .fetch_sub(p, Ordering::Relaxed);
    }
}

impl Drop for TokenGuard {
    fn drop(&mut self) {
        self.prefill_done();
        self.load
            .active_tokens
            .fetch_sub(self.active, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guard_books_and_releases_and_unknown_gauges_stay_unknown() {
        let load = Arc::new(EndpointLoad::default());
        assert_eq!(load.kv_usage(), None);
        assert!(load.serves("any") && load.models().is_none());
        load.set_models(vec!["m".into()]);
        assert!(load.serves("m") && !load.serves("other"));
        assert!(
            load.serves(""),
            "a request naming no model goes to any engine"
        );
        let g1 = InFlightGuard::book(&load);
        let g2 = InFlightGuard::book(&load);
        assert_eq!(load.in_flight(), 2);
        assert_eq!(load.queue_depth(), 2.0);
        load.set_scraped(Some(3.0), Some(4.0), Some(0.25));
        assert_eq!(load.queue_depth(), 7.0);
        assert_eq!(load.reachable(), None);
        load.set_reachable(false);
        assert_eq!(load.reachable(), Some(false));
        load.set_model_cards(vec![serde_json::json!({"id": "x", "max_model_len": 4096})]);
        assert!(load.serves("x") && !load.serves("m"));
        assert_eq!(load.model_cards().unwrap()[0]["max_model_len"], 4096);
        drop((g1, g2));
        assert_eq!(load.in_flight(), 0);
    }

    #[test]
    fn token_guard_books_moves_prefill_and_releases() {
        let load = Arc::new(EndpointLoad::default());
        let mut a = TokenGuard::book(&load, 300, 1000);
        let b = TokenGuard::book(&load, 50, 60);
        assert_eq!(
            (load.pending_prefill_tokens(), load.active_tokens()),
            (350, 1060)
        );
        a.prefill_done();
        a.prefill_done();
        assert_eq!(
            (load.pending_prefill_tokens(), load.active_tokens()),
            (50, 1060)
        );
        drop(a);
        assert_eq!(
            (load.pending_prefill_tokens(), load.active_tokens()),
            (50, 60)
        );
        drop(b);
        assert_eq!(
            (load.pending_prefill_tokens(), load.active_tokens()),
            (0, 0)
        );
    }

    #[test]
    fn serves_reads_the_list_for_several_models_and_none_serves_nothing() {
        let load = EndpointLoad::default();
        load.set_models(vec!["a".into(), "base".into()]);
        assert!(load.serves("a") && load.serves("base") && !load.serves("c"));
        load.set_models(vec![]);
        assert!(!load.serves("a"));
        load.set_models(vec!["c".into()]);
        assert!(load.serves("c") && !load.serves("a"));
        assert_ne!(ModelKey::of("c"), ModelKey::UNKNOWN);
        assert_ne!(ModelKey::of(""), ModelKey::SEVERAL);
    }
}
