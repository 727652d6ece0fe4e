//! Prometheus metrics of one worker under vLLM's names (design.md §5.4), with vLLM's labels
//! `engine="0"` and `model_name`, plus the simulator's own `pdgate_sim_*` counters.
//! Latency histograms are in wall-clock seconds (what a client measures at this speedup).

use prometheus::{
    Encoder, Gauge, Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, Opts, Registry,
    TextEncoder,
};

/// Latency buckets (seconds), vLLM's TTFT buckets.
const LATENCY_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
];

/// One worker's registry and metric handles.
pub struct Metrics {
    registry: Registry,
    /// `vllm:num_requests_running`
    pub running: IntGauge,
    /// `vllm:num_requests_waiting`
    pub waiting: IntGauge,
    /// `vllm:kv_cache_usage_perc` (0..1)
    pub kv_usage: Gauge,
    /// `vllm:prefix_cache_queries_total` (tokens)
    pub prefix_queries: IntCounter,
    /// `vllm:prefix_cache_hits_total` (tokens)
    pub prefix_hits: IntCounter,
    /// `vllm:prompt_tokens_total`
    pub prompt_tokens: IntCounter,
    /// `vllm:prompt_tokens_by_source_total{source}`: prompt tokens by where their KV came
    /// from (`local_compute`, `local_cache_hit`, `external_kv_transfer`).
    pub prompt_tokens_by_source: IntCounterVec,
    /// `pdgate_sim_kv_events_total{type}`: KV events published, by type (`BlockStored`,
    /// `BlockRemoved`, `AllBlocksCleared`).
    pub kv_events: IntCounterVec,
    /// `vllm:generation_tokens_total`
    pub generation_tokens: IntCounter,
    /// `vllm:request_success_total{finished_reason}`
    pub request_success: IntCounterVec,
    /// `vllm:time_to_first_token_seconds`
    pub ttft: Histogram,
    /// `vllm:e2e_request_latency_seconds`
    pub e2e: Histogram,
    /// `pdgate_sim_kv_handoffs_total{result}`: decode legs by handoff result.
    pub handoffs: IntCounterVec,
    /// `pdgate_sim_kv_pulls_total{result}`: pulls served by this (prefill) worker, by result.
    pub pulls: IntCounterVec,
    /// `pdgate_sim_kv_leases`: live prefill leases.
    pub leases: IntGauge,
    /// `pdgate_sim_injected_failures_total{kind}`: injected errors and aborts.
    pub injected: IntCounterVec,
    /// `pdgate_sim_ec_handoffs_total{result}`: requests with `ec_transfer_params`, by result.
    pub ec_handoffs: IntCounterVec,
    /// `pdgate_sim_ec_pulls_total{result}`: encoder pulls served by this (encode) worker.
    pub ec_pulls: IntCounterVec,
    /// `pdgate_sim_ec_leases`: live encoder-cache leases.
    pub ec_leases: IntGauge,
    /// `process_start_time_seconds` (Unix time, s, no labels): when this worker started, as
    /// the Prometheus process collector of real vLLM reports it; a worker restarted in place
    /// reports a new value (routers read it to drop their prefix-cache credit).
    pub start_time: Gauge,
    /// `pdgate_sim_mm_items_total{source}`: media items by who encoded them (`encoder`: this
    /// encode worker for a remote prefill; `local`: this worker for itself; `remote`: pulled).
    pub mm_items: IntCounterVec,
    /// `vllm:external_prefix_cache_queries_total` (tokens): prompt tokens asked of the KV
    /// connector (prompt − local hits), shared storage only.
    pub external_prefix_queries: IntCounter,
    /// `vllm:external_prefix_cache_hits_total` (tokens): prompt tokens the KV connector loaded.
    pub external_prefix_hits: IntCounter,
    /// `pdgate_sim_kv_storage_lookups_total{result}`: shared-storage KV lookups, one per
    /// request (`hit`, `miss`, `revision_mismatch`, `model_mismatch`, `unreadable`).
    pub kv_storage_lookups: IntCounterVec,
    /// `pdgate_sim_kv_storage_stores_total{result}`: KV records written (`ok`, `error`).
    pub kv_storage_stores: IntCounterVec,
    /// `pdgate_sim_ec_storage_lookups_total{result}`: shared-storage encoder-output lookups,
    /// one per media item (same labels as KV).
    pub ec_storage_lookups: IntCounterVec,
    /// `pdgate_sim_ec_storage_stores_total{result}`: encoder-output records written.
    pub ec_storage_stores: IntCounterVec,
    /// `pdgate_sim_requests_total{api,leg}`: requests answered 200 by API label
    /// (`ApiKind::label`) and leg (`aggregated`, `prefill`, `decode`).
    pub requests: IntCounterVec,
}

impl Metrics {
    /// Registers every metric for `model` with the cache geometry in `vllm:cache_config_info`.
    pub fn new(model: &str, block_size: usize, num_gpu_blocks: usize) -> Self {
        let registry = Registry::new();
        let opts = |name: &str, help: &str| {
            Opts::new(name, help)
                .const_label("engine", "0")
                .const_label("model_name", model)
        };
        let hist = |name: &str, help: &str| {
            HistogramOpts::new(name, help)
                .const_label("engine", "0")
                .const_label("model_name", model)
                .buckets(LATENCY_BUCKETS.to_vec())
        };
        let m = Metrics {
            running: IntGauge::with_opts(opts(
                "vllm:num_requests_running",
                "Requests in the running batch.",
            ))
            .expect("valid metric"),
            waiting: IntGauge::with_opts(opts(
                "vllm:num_requests_waiting",
                "Requests waiting for admission.",
            ))
            .expect("valid metric"),
            kv_usage: Gauge::with_opts(opts(
                "vllm:kv_cache_usage_perc",
                "KV cache usage (referenced blocks / capacity), 0..1.",
            ))
            .expect("valid metric"),
            prefix_queries: IntCounter::with_opts(opts(
                "vllm:prefix_cache_queries_total",
                "Prompt tokens looked up in the prefix cache.",
            ))
            .expect("valid metric"),
            prefix_hits: IntCounter::with_opts(opts(
                "vllm:prefix_cache_hits_total",
                "Prompt tokens found in the prefix cache.",
            ))
            .expect("valid metric"),
            prompt_tokens: IntCounter::with_opts(opts(
                "vllm:prompt_tokens_total",
                "Prompt tokens of finished requests.",
            ))
            .expect("valid metric"),
            prompt_tokens_by_source: IntCounterVec::new(
                opts(
                    "vllm:prompt_tokens_by_source_total",
                    "Number of prompt tokens by source.",
                ),
                &["source"],
            )
            .expect("valid metric"),
            kv_events: IntCounterVec::new(
                opts(
                    "pdgate_sim_kv_events_total",
                    "KV events published, by type.",
                ),
                &["type"],
            )
            .expect("valid metric"),
            generation_tokens: IntCounter::with_opts(opts(
                "vllm:generation_tokens_total",
                "Generated tokens.",
            ))
            .expect("valid metric"),
            request_success: IntCounterVec::new(
                opts("vllm:request_success_total", "Finished requests."),
                &["finished_reason"],
            )
            .expect("valid metric"),
            ttft: Histogram::with_opts(hist(
                "vllm:time_to_first_token_seconds",
                "Time to first token (wall clock).",
            ))
            .expect("valid metric"),
            e2e: Histogram::with_opts(hist(
                "vllm:e2e_request_latency_seconds",
                "End-to-end request latency (wall clock).",
            ))
            .expect("valid metric"),
            handoffs: IntCounterVec::new(
                opts(
                    "pdgate_sim_kv_handoffs_total",
                    "Decode legs with remote prefill, by handoff result.",
                ),
                &["result"],
            )
            .expect("valid metric"),
            pulls: IntCounterVec::new(
                opts(
                    "pdgate_sim_kv_pulls_total",
                    "KV pulls answered by this worker's leases, by result.",
                ),
                &["result"],
            )
            .expect("valid metric"),
            leases: IntGauge::with_opts(opts("pdgate_sim_kv_leases", "Live prefill leases."))
                .expect("valid metric"),
            injected: IntCounterVec::new(
                opts(
                    "pdgate_sim_injected_failures_total",
                    "Injected failures by kind (error, abort).",
                ),
                &["kind"],
            )
            .expect("valid metric"),
            ec_handoffs: IntCounterVec::new(
                opts(
                    "pdgate_sim_ec_handoffs_total",
                    "Requests with ec_transfer_params, by encoder handoff result.",
                ),
                &["result"],
            )
            .expect("valid metric"),
            ec_pulls: IntCounterVec::new(
                opts(
                    "pdgate_sim_ec_pulls_total",
                    "Encoder pulls answered by this worker's encoder cache, by result.",
                ),
                &["result"],
            )
            .expect("valid metric"),
            ec_leases: IntGauge::with_opts(opts(
                "pdgate_sim_ec_leases",
                "Live encoder-cache leases.",
            ))
            .expect("valid metric"),
            mm_items: IntCounterVec::new(
                opts(
                    "pdgate_sim_mm_items_total",
                    "Media items by source (encoder, local, remote).",
                ),
                &["source"],
            )
            .expect("valid metric"),
            external_prefix_queries: IntCounter::with_opts(opts(
                "vllm:external_prefix_cache_queries_total",
                "External prefix cache queries from KV connector cross-instance cache sharing, in terms of number of queried tokens.",
            ))
            .expect("valid metric"),
            external_prefix_hits: IntCounter::with_opts(opts(
                "vllm:external_prefix_cache_hits_total",
                "External prefix cache hits from KV connector cross-instance cache sharing, in terms of number of cached tokens.",
            ))
            .expect("valid metric"),
            kv_storage_lookups: IntCounterVec::new(
                opts(
                    "pdgate_sim_kv_storage_lookups_total",
                    "Shared-storage KV lookups (one per request), by result.",
                ),
                &["result"],
            )
            .expect("valid metric"),
            kv_storage_stores: IntCounterVec::new(
                opts(
                    "pdgate_sim_kv_storage_stores_total",
                    "KV records written to the shared storage, by result.",
                ),
                &["result"],
            )
            .expect("valid metric"),
            ec_storage_lookups: IntCounterVec::new(
                opts(
                    "pdgate_sim_ec_storage_lookups_total",
                    "Shared-storage encoder-output lookups (one per media item), by result.",
                ),
                &["result"],
            )
            .expect("valid metric"),
            ec_storage_stores: IntCounterVec::new(
                opts(
                    "pdgate_sim_ec_storage_stores_total",
                    "Encoder-output records written to the shared storage, by result.",
                ),
                &["result"],
            )
            .expect("valid metric"),
            requests: IntCounterVec::new(
                opts(
                    "pdgate_sim_requests_total",
                    "Requests answered 200, by API and leg (aggregated, prefill, decode).",
                ),
                &["api", "leg"],
            )
            .expect("valid metric"),
            start_time: Gauge::new(
                "process_start_time_seconds",
                "Start time of the process since unix epoch in seconds.",
            )
            .expect("valid metric"),
            registry,
        };
        let started = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        m.start_time.set(started);
        let cache_info = IntGauge::with_opts(
            opts("vllm:cache_config_info", "KV cache configuration.")
                .const_label("block_size", block_size.to_string())
                .const_label("num_gpu_blocks", num_gpu_blocks.to_string()),
        )
        .expect("valid metric");
        cache_info.set(1);
        for source in ["local_compute", "local_cache_hit", "external_kv_transfer"] {
            m.prompt_tokens_by_source.with_label_values(&[source]);
        }
        m.request_success.with_label_values(&["length"]);
        m.request_success.with_label_values(&["abort"]);
        m.handoffs.with_label_values(&["ok"]);
        m.pulls.with_label_values(&["ok"]);
        m.ec_handoffs.with_label_values(&["ok"]);
        m.ec_pulls.with_label_values(&["ok"]);
        let r = &m.registry;
        let collectors: Vec<Box<dyn prometheus::core::Collector>> = vec![
            Box::new(cache_info),
            Box::new(m.running.clone()),
            Box::new(m.waiting.clone()),
            Box::new(m.kv_usage.clone()),
            Box::new(m.prefix_queries.clone()),
            Box::new(m.prefix_hits.clone()),
            Box::new(m.prompt_tokens.clone()),
            Box::new(m.prompt_tokens_by_source.clone()),
            Box::new(m.kv_events.clone()),
            Box::new(m.generation_tokens.clone()),
            Box::new(m.request_success.clone()),
            Box::new(m.ttft.clone()),
            Box::new(m.e2e.clone()),
            Box::new(m.handoffs.clone()),
            Box::new(m.pulls.clone()),
            Box::new(m.leases.clone()),
            Box::new(m.injected.clone()),
            Box::new(m.ec_handoffs.clone()),
            Box::new(m.ec_pulls.clone()),
            Box::new(m.ec_leases.clone()),
            Box::new(m.mm_items.clone()),
            Box::new(m.start_time.clone()),
            Box::new(m.requests.clone()),
        ];
        for c in collectors {
            r.register(c).expect("metric registered once");
        }
        m
    }

    /// Registers the shared-storage metrics: with a KV store (`kv`), the KV lookups and stores
    /// and vLLM's `vllm:external_prefix_cache_*` (vLLM exports them with a KV connector); with
    /// an encoder-output store (`ec`), the EC lookups and stores. Call once.
    pub fn register_shared_storage(&self, kv: bool, ec: bool) {
        let mut collectors: Vec<Box<dyn prometheus::core::Collector>> = Vec::new();
        if kv {
            self.kv_storage_lookups.with_label_values(&["hit"]);
            self.kv_storage_stores.with_label_values(&["ok"]);
            collectors.push(Box::new(self.external_prefix_queries.clone()));
            collectors.push(Box::new(self.external_prefix_hits.clone()));
            collectors.push(Box::new(self.kv_storage_lookups.clone()));
            collectors.push(Box::new(self.kv_storage_stores.clone()));
        }
        if ec {
            self.ec_storage_lookups.with_label_values(&["hit"]);
            self.ec_storage_stores.with_label_values(&["ok"]);
            collectors.push(Box::new(self.ec_storage_lookups.clone()));
            collectors.push(Box::new(self.ec_storage_stores.clone()));
        }
        for c in collectors {
            self.registry.register(c).expect("metric registered once");
        }
    }

    /// The text exposition format.
    pub fn render(&self) -> String {
        let mut buf = Vec::new();
        TextEncoder::new()
            .encode(&self.registry.gather(), &mut buf)
            .expect("text encoding cannot fail");
        String::from_utf8(buf).expect("exposition is UTF-8")
    }
}
