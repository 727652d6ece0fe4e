//! What bounds every map keyed by endpoint, revision, session or request, and the wiring
//! that makes state keyed by endpoint name forget endpoints that leave or restart.
//!
//! | state | keyed by | bound | forgets |
//! |---|---|---|---|
//! | endpoint load cells ([`pdgate_fleet::EndpointRegistry`]) | endpoint | endpoints of the current list | when the endpoint leaves (retired, dropped) |
//! | prefix index ([`pdgate_scheduler::prefix::PrefixIndex`]) | endpoint, block hash | `lruCapacityPerServer` blocks × endpoints of the current list | on every endpoint change, endpoints that left; on an engine restart, that endpoint |
//! | circuit breakers ([`crate::breaker::Breakers`]) | endpoint | endpoints of the current list | on every endpoint change, endpoints that left |
//! | scrape tracking ([`pdgate_fleet::scrape`]) | endpoint | endpoints of the current list | endpoints that left, on the next tick |
//! | sessions ([`crate::session::SessionTable`]) | `x-session-id` | 65,536 (LRU), 10 min TTL | least recently used; a binding to a departed endpoint is ignored and rebound |
//! | revision decision ids (rollout screener) | `x-llm-d-revision-decision-id` | 65,536 (LRU) | least recently used |
//! | revision decision counts (rollout screener) | revision | revisions with an endpoint in the snapshot | revisions that left, on the next screen or scrape |
//! | per-endpoint metric series (`pdgate_in_flight`, `pdgate_endpoint_*`) | endpoint | endpoints of the current list | rebuilt on every `/metrics` read |
//!
//! A response that arrives after its endpoint left does not credit the prefix index (the
//! endpoint is retired); a breaker outcome recorded then re-creates an entry that the next
//! endpoint change sweeps, so such leftovers are bounded by the requests in flight when an
//! endpoint leaves.

use crate::breaker::Breakers;
use crate::metrics::Metrics;
use pdgate_fleet::scrape::ScrapeObserver;
use pdgate_fleet::EndpointRegistry;
use pdgate_scheduler::Scheduler;
use std::collections::HashSet;
use std::sync::Arc;

/// Makes the prefix indexes of `scheduler` and the `breakers` forget every endpoint that is
/// not in the registry's new snapshot, on each endpoint change.
pub fn forget_departed(
    registry: &EndpointRegistry,
    scheduler: Arc<Scheduler>,
    breakers: Arc<Breakers>,
) {
    registry.on_change(Box::new(move |snap| {
        let names: HashSet<&str> = (snap.endpoints.iter())
            .map(|e| e.endpoint.name.as_str())
            .collect();
        let dropped = scheduler.retain_endpoints(|n| names.contains(n));
        breakers.forget(|n| names.contains(n));
        if dropped > 0 {
            tracing::info!(
                endpoints = names.len(),
                dropped,
                "prefix-index entries of departed endpoints dropped"
            );
        }
    }))
}

/// What the scraper tells a router: failures and restarts are counted
/// (`pdgate_scrape_errors_total`, `pdgate_engine_restarts_total`) and a restarted engine's
/// prefix-cache credit is dropped from `scheduler`.
pub struct ScrapeEffects {
    /// Whose prefix indexes forget a restarted engine.
    pub scheduler: Arc<Scheduler>,
    /// Where the counts go.
    pub metrics: Arc<Metrics>,
    /// The KV block size each engine reported (tokens), by endpoint name.
    pub block_sizes: parking_lot::Mutex<std::collections::HashMap<String, u32>>,
}

impl ScrapeEffects {
    /// Effects on `scheduler`, counted in `metrics`.
    pub fn new(scheduler: Arc<Scheduler>, metrics: Arc<Metrics>) -> Self {
        ScrapeEffects {
            scheduler,
            metrics,
            block_sizes: Default::default(),
        }
    }
}

/// Greatest common divisor (block sizes are ≥ 1).
fn gcd(a: u32, b: u32) -> u32 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

impl ScrapeObserver for ScrapeEffects {
    fn scrape_failed(&self, _endpoint: &str) {
        self.metrics.scrape_errors.inc();
    }

    fn engine_restarted(&self, endpoint: &str) {
        self.metrics.engine_restarts.inc();
        self.scheduler.forget_endpoint(endpoint);
    }

    /// An approximate index with `autoTune` adopts the engines' block size when it differs
    /// from its own (forgetting what it learnt under the old size): logged and counted
    /// (`pdgate_prefix_block_size_adopted_total`). With engines of different block sizes
    /// (e.g. 32 and 64) it adopts their greatest common divisor, which cuts every engine's
    /// blocks whole, so the size settles instead of following the last scrape. Engines of
    /// one pool share a block size: then this happens once, on the first scrape.
    fn engine_block_size(&self, endpoint: &str, block_tokens: u32) {
        if block_tokens == 0 {
            return;
        }
        let (size, mixed) = {
            let mut sizes = self.block_sizes.lock();
            sizes.insert(endpoint.to_string(), block_tokens);
            let size = sizes.values().fold(0, |g, s| gcd(*s, g));
            (size, sizes.values().any(|s| *s != block_tokens))
        };
        if self.scheduler.adopt_engine_block_size(size as usize) {
            self.metrics.block_size_adopted.inc();
            tracing::info!(
                endpoint,
                engine_block_tokens = block_tokens,
                block_tokens = size,
                mixed,
                "approximate prefix index adopted the engines' KV block size \
                 (vllm:cache_config_info; their greatest common divisor when they differ); \
                 its earlier entries are dropped"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::breaker::Outcome;
    use pdgate_api::PromptInput;
    use pdgate_scheduler::{Endpoint, SchedulingRequest};

    #[test]
    fn departed_endpoints_leave_the_prefix_index_and_the_breakers() {
        let scheduler = Arc::new(
            Scheduler::from_yaml(pdgate_scheduler::DEFAULT_CONFIG_YAML, "default").unwrap(),
        );
        let (registry, breakers) = (EndpointRegistry::default(), Arc::new(Breakers::default()));
        forget_departed(&registry, scheduler.clone(), breakers.clone());
        let ep = |n: &str| Endpoint::new(n, "127.0.0.1:1", Default::default());
        registry.apply(vec![ep("a"), ep("b")]);
        let prompt = PromptInput::Tokens((0..64).collect());
        for _ in 0..2 {
            let req = SchedulingRequest::new("r", "m", &prompt);
            let picked = scheduler.schedule(&req, &registry.snapshot()).unwrap();
            scheduler.response_received(&picked.decode, 200);
        }
        breakers.record("a", Outcome::Failure, tokio::time::Instant::now());
        breakers.record("b", Outcome::Failure, tokio::time::Instant::now());
        let held = scheduler.prefix_stats().endpoints;
        assert!(held >= 1, "{held}");
        registry.apply(vec![]);
        assert_eq!(scheduler.prefix_stats().endpoints, 0);
        assert!(breakers.snapshot().is_empty());
    }

    #[test]
    fn an_engine_block_size_is_adopted_once_logged_and_counted() {
        let scheduler = Arc::new(
            Scheduler::from_yaml(pdgate_scheduler::DEFAULT_CONFIG_YAML, "default").unwrap(),
        );
        let metrics = Arc::new(Metrics::new());
        let effects = ScrapeEffects::new(scheduler.clone(), metrics.clone());
        // The default's approximate producer (autoTune on, 16-token blocks) meets vLLM's 32.
        effects.engine_block_size("a", 32);
        effects.engine_block_size("b", 32);
        assert_eq!(metrics.block_size_adopted.get(), 1);
        effects.engine_block_size("a", 16);
        assert_eq!(metrics.block_size_adopted.get(), 2);
    }

    /// Regression (adversarial try): engines of 32 and 64 tokens per block made the index
    /// flip between them at every scrape (96 adoptions in ~10 s, each dropping what it had
    /// learnt, repeats routed to the wrong engine). Now it settles on their common 32.
    #[test]
    fn mixed_engine_block_sizes_settle_on_their_common_divisor() {
        let scheduler = Arc::new(
            Scheduler::from_yaml(pdgate_scheduler::DEFAULT_CONFIG_YAML, "default").unwrap(),
        );
        let metrics = Arc::new(Metrics::new());
        let effects = ScrapeEffects::new(scheduler.clone(), metrics.clone());
        for _ in 0..10 {
            effects.engine_block_size("b32", 32);
            effects.engine_block_size("b64", 64);
        }
        assert_eq!(metrics.block_size_adopted.get(), 1);
        effects.engine_block_size("b48", 48);
        assert_eq!(metrics.block_size_adopted.get(), 2, "gcd(32, 64, 48) = 16");
        effects.engine_block_size("b48", 48);
        effects.engine_block_size("b64", 64);
        assert_eq!(metrics.block_size_adopted.get(), 2);
    }
}
