//! Engine metrics scraping and model discovery, outside the pick path.
//!
//! Every `interval`, each endpoint's `/metrics` is read and its gauges stored in the
//! endpoint's [`EndpointLoad`]: `vllm:num_requests_running` and `vllm:num_requests_waiting`
//! summed over series (one per engine), `vllm:kv_cache_usage_perc` (or the older
//! `vllm:gpu_cache_usage_perc`) averaged over series (design.md §5.4), and the LoRA adapters
//! of `vllm:lora_requests_info` (its latest series). A gauge the engine does
//! not export, or a failed scrape, is stored as unknown, never as 0. `/v1/models` is read
//! while an endpoint's list is unknown, after a restart, and every `models_every` ticks,
//! within [`models::MAX_MODELS_BYTES`]; its model ids and the few fields of each model object
//! that the router's own `/v1/models` echoes ([`models::MODEL_FIELDS`]) are stored per
//! endpoint (requests are only scheduled on endpoints that serve their model). An answer
//! over a bound ([`models::ModelsError::over_limit`]) is counted
//! ([`crate::registry::FleetCounters::models_refused_total`]), logged (one line per second at
//! most) and not used: the endpoint keeps the list it had — unknown if it never had one,
//! which schedules any model there (fail open) — and it is read again only every
//! `models_every` ticks, not while unknown.
//!
//! Each endpoint is scraped by its own task, bounded by `timeout` for the whole exchange
//! (head and body), at most [`MAX_CONCURRENT_SCRAPES`] at once over the whole fleet (the wait
//! for a turn does not count against the timeout); an endpoint whose previous scrape is still
//! running is skipped that tick,
//! so one slow engine delays no other. A failure is counted (`pdgate_scrape_errors_total`)
//! and logged at warn level when the endpoint starts failing, at info when it answers again
//! (not every tick). An engine restart — `process_start_time_seconds` changed, or a failing
//! endpoint back without the same start time ([`health::ScrapeHealth::observe`]) — calls
//! [`ScrapeObserver::engine_restarted`] (a front end drops its prefix-cache credit and counts
//! it in `pdgate_engine_restarts_total`); failures call [`ScrapeObserver::scrape_failed`].
//! An endpoint whose `/metrics` goes unanswered (no HTTP answer: refused, reset, timed out)
//! [`health::UNREADY_AFTER`] times in a row is no scheduling candidate until a scrape is
//! answered: the scraper hands the set of such endpoints to the registry every tick
//! ([`EndpointRegistry::set_unanswered`], which publishes them not Ready, counts and logs).
//! The scraper owns its HTTP client ([`client::ScrapeClient`]) and knows neither front end.
//!
//! What is read comes from the config's data layer ([`ScrapeSettings::data`]:
//! `metrics-data-source` path, port and interval; `core-metrics-extractor` metric names per
//! engine type, chosen by the endpoint's `llm-d.ai/engine-type` label; `models-data-source`
//! path and interval); the defaults are the vLLM names and paths above.
//!
//! Bound: one tracking entry per endpoint of the current snapshot (entries of endpoints that
//! left are dropped on the next tick), and at most one scrape in flight per endpoint.

pub mod client;
pub mod health;
pub mod models;
mod parse;

pub use models::{merge_model_cards, parse_model_cards, parse_models, ModelsError};
pub use parse::{
    parse_engine_metrics, parse_engine_metrics_with, series, series_label, sum_series, EngineGauges,
};

use crate::registry::EndpointRegistry;
use client::{GetError, ScrapeClient};
use health::{Change, Scrape, ScrapeHealth};
use parking_lot::Mutex;
use pdgate_scheduler::config::DataLayer;
use pdgate_scheduler::{EndpointLoad, EndpointState};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

/// Scrapes in flight at once, over all endpoints: a fleet of 10,000 endpoints is read 64 at a
/// time instead of opening 10,000 connections every interval.
pub const MAX_CONCURRENT_SCRAPES: usize = 64;

/// What a front end learns from the scraper, by endpoint name: it counts failures and
/// restarts in its own metrics and drops state that a restarted engine no longer holds.
pub trait ScrapeObserver: Send + Sync + 'static {
    /// A `/metrics` scrape of `endpoint` failed (each failure, every tick).
    fn scrape_failed(&self, endpoint: &str);
    /// `endpoint`'s engine restarted: its caches are empty.
    fn engine_restarted(&self, endpoint: &str);
    /// `endpoint`'s engine reported its KV block size (`vllm:cache_config_info{block_size}`,
    /// tokens) on a successful scrape. Default: nothing.
    fn engine_block_size(&self, _endpoint: &str, _block_tokens: u32) {}
}

/// How the scraper runs.
#[derive(Debug, Clone)]
pub struct ScrapeSettings {
    /// Time between scrapes of one endpoint (`--scrape-interval`; a `metrics-data-source`
    /// `interval` changes it, [`DataLayer::metrics_period`]).
    pub interval: Duration,
    /// Time allowed for one `/metrics` (or `/v1/models`) exchange, head and body.
    pub timeout: Duration,
    /// `/v1/models` is re-read every this many ticks (≥ 1) when the data layer sets no
    /// models interval.
    pub models_every: u32,
    /// Paths, port, periods and metric names (the config's `dataLayer`).
    pub data: Arc<DataLayer>,
}

/// Per-endpoint scrape state between ticks (of one address: a new address starts afresh).
#[derive(Default)]
struct Tracked {
    /// The endpoint's address when this state began.
    address: String,
    health: Mutex<ScrapeHealth>,
    busy: AtomicBool,
    /// Ticks still to skip (back-off of an endpoint that keeps failing).
    skip: std::sync::atomic::AtomicU64,
    /// [`ScrapeHealth::unready`] after the last scrape.
    unready: AtomicBool,
    /// The last `/v1/models` answer was over a bound: read it again only periodically.
    models_refused: AtomicBool,
}

/// Everything one endpoint's scrape needs.
struct Job {
    name: String,
    address: String,
    /// Where its metrics are read (`address`, or its host with the source's port).
    metrics_address: String,
    state: Arc<EndpointState>,
    data: Arc<DataLayer>,
    load: Arc<EndpointLoad>,
    tracked: Arc<Tracked>,
    want_models: bool,
    registry: Arc<EndpointRegistry>,
}

/// Scrapes forever; abort the returned task to stop (its scrapes in flight stop with it).
pub fn start(
    registry: Arc<EndpointRegistry>,
    client: ScrapeClient,
    settings: ScrapeSettings,
    observer: Arc<dyn ScrapeObserver>,
) -> tokio::task::JoinHandle<()> {
    let period = settings.data.metrics_period(settings.interval);
    let models_every = settings
        .data
        .models_every(settings.interval, settings.models_every);
    let (timeout, data) = (settings.timeout, settings.data);
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut tracked: HashMap<String, Arc<Tracked>> = HashMap::new();
        let mut scrapes = JoinSet::new();
        let permits = Arc::new(Semaphore::new(MAX_CONCURRENT_SCRAPES));
        let mut seen_version = u64::MAX;
        let mut n = 0u32;
        loop {
            tick.tick().await;
            while scrapes.try_join_next().is_some() {}
            let snap = registry.snapshot();
            if snap.version != seen_version {
                let names: HashSet<&str> = snap
                    .endpoints
                    .iter()
                    .map(|e| e.endpoint.name.as_str())
                    .collect();
                tracked.retain(|name, _| names.contains(name.as_str()));
                seen_version = snap.version;
            }
            let periodic = n.is_multiple_of(models_every.max(1));
            n = n.wrapping_add(1);
            let mut unanswered: Vec<&str> = Vec::new();
            for e in &snap.endpoints {
                let name = &e.endpoint.name;
                let t = match tracked.get(name) {
                    Some(t) if t.address == e.endpoint.address => t.clone(),
                    _ => {
                        let t = Arc::new(Tracked {
                            address: e.endpoint.address.clone(),
                            ..Tracked::default()
                        });
                        tracked.insert(name.clone(), t.clone());
                        t
                    }
                };
                if t.unready.load(Ordering::Acquire) {
                    unanswered.push(name);
                }
                let backing_off = t
                    .skip
                    .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
                    .is_ok();
                if backing_off || t.busy.swap(true, Ordering::AcqRel) {
                    continue;
                }
                let job = Job {
                    name: e.endpoint.name.clone(),
                    address: e.endpoint.address.clone(),
                    metrics_address: data.metrics.address(&e.endpoint.address),
                    state: e.clone(),
                    data: data.clone(),
                    load: e.load.clone(),
                    want_models: periodic
                        || (e.load.models().is_none() && !t.models_refused.load(Ordering::Acquire)),
                    tracked: t,
                    registry: registry.clone(),
                };
                let (client, observer) = (client.clone(), observer.clone());
                let permits = permits.clone();
                scrapes.spawn(async move {
                    // The semaphore is never closed; a scrape without a permit is skipped.
                    if let Ok(_permit) = permits.acquire_owned().await {
                        scrape_one(&job, &client, timeout, &*observer).await;
                        let interval = period.as_millis() as u64;
                        let skip = job.tracked.health.lock().ticks_to_skip(interval);
                        job.tracked.skip.store(skip, Ordering::Release);
                    }
                    job.tracked.busy.store(false, Ordering::Release);
                });
            }
            registry.set_unanswered(unanswered);
        }
    })
}

/// `GET http://{address}{path}` bounded by `timeout` for head and body and by `max_bytes`;
/// `Err` names the failure (a status other than 200 is one, answered; a 5xx counts as no
/// answer, as a Kubernetes readiness probe fails on it: an engine whose `/metrics` keeps
/// answering 500 leaves the candidates like one that does not answer, issue 26).
async fn fetch(
    client: &ScrapeClient,
    address: &str,
    path: &str,
    timeout: Duration,
    max_bytes: usize,
) -> Result<bytes::Bytes, GetError> {
    match client.get_limited(address, path, timeout, max_bytes).await {
        Ok((200, body)) => Ok(body),
        Ok((status, _)) if status >= 500 => Err(GetError::NoAnswer(format!("status {status}"))),
        Ok((status, _)) => Err(GetError::Body(format!("status {status}"))),
        Err(e) => Err(e),
    }
}

/// Log site of refused `/v1/models` answers (one line per second at most).
static MODELS_REFUSED_LOG: crate::log_limit::Site = crate::log_limit::Site::new(0);

async fn scrape_one(
    job: &Job,
    client: &ScrapeClient,
    timeout: Duration,
    observer: &dyn ScrapeObserver,
) {
    let metrics = &job.data.metrics;
    let got = fetch(
        client,
        &job.metrics_address,
        &metrics.path,
        timeout,
        client::MAX_SCRAPE_BYTES,
    )
    .await;
    let (scrape, error) = match got {
        Ok(body) => {
            let names = job.data.engines.for_labels(&job.state.endpoint.labels);
            let g = parse_engine_metrics_with(&String::from_utf8_lossy(&body), names);
            job.load.set_scraped(g.running, g.waiting, g.kv_usage);
            job.load.set_lora(g.lora);
            if let Some(b) = g.block_size {
                observer.engine_block_size(&job.name, b);
            }
            let start_time = g.start_time;
            (Scrape::Answered { start_time }, None)
        }
        Err(e) => {
            observer.scrape_failed(&job.name);
            job.load.set_scraped(None, None, None);
            job.load.set_lora(None);
            let scrape = match e {
                GetError::NoAnswer(_) => Scrape::Unanswered,
                GetError::Body(_) | GetError::OverLimit(_) => Scrape::Failed,
            };
            (scrape, Some(e.to_string()))
        }
    };
    job.load.set_reachable(error.is_none());
    let verdict = {
        let mut health = job.tracked.health.lock();
        let verdict = health.observe(scrape);
        job.tracked
            .unready
            .store(health.unready(), Ordering::Release);
        verdict
    };
    match verdict.change {
        Some(Change::Failing) => tracing::warn!(
            endpoint = %job.name, address = %job.metrics_address, path = %metrics.path,
            error = error.as_deref().unwrap_or(""),
            "engine /metrics scrape failing; its gauges are unknown until it answers"
        ),
        Some(Change::Recovered) => {
            tracing::info!(endpoint = %job.name, "engine /metrics scrape answering again")
        }
        None => {}
    }
    if verdict.restarted {
        observer.engine_restarted(&job.name);
        tracing::warn!(
            endpoint = %job.name,
            "engine restarted (process_start_time_seconds changed, or back after failing); \
             its prefix-cache credit is dropped"
        );
    }
    if error.is_none() && (job.want_models || verdict.restarted) {
        read_models(job, client, timeout).await;
    }
}

/// Reads `job`'s `/v1/models` into its load cell; an answer over a bound is counted and
/// logged, and the cell keeps what it had.
async fn read_models(job: &Job, client: &ScrapeClient, timeout: Duration) {
    let path = &job.data.models.path;
    let parsed = match fetch(
        client,
        &job.address,
        path,
        timeout,
        models::MAX_MODELS_BYTES,
    )
    .await
    {
        Ok(body) => parse_models(&body),
        Err(GetError::OverLimit(_)) => Err(ModelsError::TooLarge { bytes: None }),
        Err(_) => return,
    };
    match parsed {
        Ok(cards) => {
            job.load.set_model_cards(cards);
            job.tracked.models_refused.store(false, Ordering::Release);
        }
        Err(e) if e.over_limit() => {
            job.registry.counters().count_models_refused();
            job.tracked.models_refused.store(true, Ordering::Release);
            if crate::log_limit::allow(&MODELS_REFUSED_LOG) {
                tracing::warn!(
                    endpoint = %job.name, address = %job.address, path = %path, error = %e,
                    refused = job.registry.counters().models_refused_total(),
                    "engine /v1/models answer refused; the endpoint keeps its model list \
                     (unknown: any model may be scheduled there)"
                );
            }
        }
        Err(_) => {}
    }
}
