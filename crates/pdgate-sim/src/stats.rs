//! [`WorkerStats`]: a worker's counters and current load, for tests and the in-process demo,
//! and [`tally`], which counts the pulls and handoffs of either side channel.

use prometheus::IntCounterVec;
use std::collections::BTreeMap;

/// A snapshot of one worker's counters (since start) and load (now).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WorkerStats {
    /// Requests answered 200 on `/v1/completions`.
    pub completions: u64,
    /// Requests answered 200 on `/v1/chat/completions`.
    pub chat_completions: u64,
    /// Requests answered 200 on `/v1/messages`.
    pub messages: u64,
    /// Requests answered 200 on `/v1/responses`.
    pub responses: u64,
    /// Requests answered 200 on `/v1/embeddings` (one per request, whatever its batch).
    pub embeddings: u64,
    /// Requests answered 200 on `/inference/v1/generate`.
    pub generate: u64,
    /// Answered prefill legs by API label (`completions`, `chat_completions`, `messages`,
    /// `responses`, `generate`); also in `pdgate_sim_requests_total{api,leg="prefill"}`.
    pub prefill_legs_by_api: BTreeMap<String, u64>,
    /// Answered decode legs whose KV came from a remote prefill, by API label; also in
    /// `pdgate_sim_requests_total{api,leg="decode"}`.
    pub remote_decode_legs_by_api: BTreeMap<String, u64>,
    /// Prefill legs (`do_remote_decode`) that finished and left a lease.
    pub prefill_legs: u64,
    /// Decode legs whose KV came from a remote prefill (pull succeeded).
    pub remote_decode_legs: u64,
    /// Decode legs whose pull failed, by reason (`unknown_engine`, `unknown_lease`, `expired`,
    /// `consumed`, `revision_mismatch`, `prompt_mismatch`, `block_mismatch`, `malformed`,
    /// `unreachable`).
    pub handoff_rejections: BTreeMap<String, u64>,
    /// Pulls of this worker's leases that succeeded.
    pub pulls_served: u64,
    /// Pulls of this worker's leases that it refused, by reason.
    pub pull_rejections: BTreeMap<String, u64>,
    /// Σ `cached_tokens` reported in `usage`.
    pub cached_tokens: u64,
    /// Σ `prompt_tokens` reported in `usage`.
    pub prompt_tokens: u64,
    /// Generated tokens.
    pub generation_tokens: u64,
    /// Prompt tokens looked up in the prefix cache at admission
    /// (`vllm:prefix_cache_queries_total`).
    pub prefix_cache_queries: u64,
    /// Prompt tokens found in this engine's prefix cache (`vllm:prefix_cache_hits_total`).
    pub prefix_cache_hits: u64,
    /// Prompt tokens computed here
    /// (`vllm:prompt_tokens_by_source_total{source="local_compute"}`).
    pub prompt_tokens_local_compute: u64,
    /// Prompt tokens found in this engine's cache (`source="local_cache_hit"`).
    pub prompt_tokens_local_cache_hit: u64,
    /// Prompt tokens whose KV came from a remote prefill (`source="external_kv_transfer"`).
    pub prompt_tokens_external_kv_transfer: u64,
    /// KV event batches handed to the publisher.
    pub kv_event_batches: u64,
    /// Requests dropped because their client went away.
    pub cancelled: u64,
    /// Injected errors (`--error-rate`).
    pub injected_errors: u64,
    /// Streams cut by `--abort-rate`.
    pub injected_aborts: u64,
    /// Requests in the running batch now.
    pub running: usize,
    /// Requests waiting for admission now.
    pub waiting: usize,
    /// KV blocks referenced now (running requests and leases).
    pub kv_blocks_used: usize,
    /// KV capacity in blocks.
    pub kv_blocks_total: usize,
    /// Live prefill leases now.
    pub leases: usize,
    /// Media items this worker encoded: for encode legs (encode role) and for its own
    /// requests (`local_encoded_items`).
    pub encode_items: u64,
    /// Media items of this worker's requests that it encoded itself (no `ec_transfer_params`).
    pub local_encoded_items: u64,
    /// Media items of this worker's requests whose encoder output came from an encode worker.
    pub remote_encoded_items: u64,
    /// Requests whose encoder handoff failed, by reason (`malformed`, `missing_entry`,
    /// `unknown_engine`, `unknown_lease`, `expired`, `consumed`, `revision_mismatch`,
    /// `hash_mismatch`, `unreachable`).
    pub ec_handoff_rejections: BTreeMap<String, u64>,
    /// Pulls of this worker's encoder leases that succeeded.
    pub ec_pulls_served: u64,
    /// Pulls of this worker's encoder leases that it refused, by reason.
    pub ec_pull_rejections: BTreeMap<String, u64>,
    /// Live encoder-cache leases now.
    pub ec_leases: usize,
    /// Shared-storage KV lookups (`ExampleConnector`), one per request, by result (`hit`,
    /// `miss`, `revision_mismatch`, `model_mismatch`, `unreadable`).
    pub kv_storage_lookups: BTreeMap<String, u64>,
    /// KV records this worker wrote to the shared storage.
    pub kv_storage_stores: u64,
    /// Prompt tokens asked of the KV connector: prompt − local hits
    /// (`vllm:external_prefix_cache_queries_total`; shared storage only).
    pub external_prefix_cache_queries: u64,
    /// Prompt tokens the KV connector loaded (`vllm:external_prefix_cache_hits_total`).
    pub external_prefix_cache_hits: u64,
    /// Shared-storage encoder-output lookups (`ECExampleConnector`), one per media item, by
    /// result (same labels as `kv_storage_lookups`).
    pub ec_storage_lookups: BTreeMap<String, u64>,
    /// Encoder-output records this worker wrote to the shared storage.
    pub ec_storage_stores: u64,
}

/// Counts one pull or handoff: in `metric` by result (`ok`, or the label it was `rejected_as`),
/// and in the counters, `n` more in `ok` or one more under the label in `rejections`.
pub(crate) fn tally(
    metric: &IntCounterVec,
    rejected_as: Option<&'static str>,
    ok: &mut u64,
    n: u64,
    rejections: &mut BTreeMap<String, u64>,
) {
    metric
        .with_label_values(&[rejected_as.unwrap_or("ok")])
        .inc();
    match rejected_as {
        None => *ok += n,
        Some(label) => *rejections.entry(label.into()).or_default() += 1,
    }
}
