//! Plugin registry: llm-d plugin type name → factory.
//!
//! A factory decodes its `parameters` strictly (serde `deny_unknown_fields`; absent parameters
//! mean all defaults) and returns a [`Built`] plugin holding the extension points it
//! implements plus its effective parameters (defaults filled in) for `effective_config_yaml`.
//!
//! This module is the table only: the types of a plugin build live in
//! [`crate::plugin_build`] and [`crate::plugin_params`] (re-exported here), which the plugin
//! modules import, so that the registry imports the plugins and they never import it back.

pub use crate::plugin_build::{BuildCtx, Built, Factory, PluginType, Stage};
pub use crate::plugin_params::{decode, effective, NoParams, PluginError};
use crate::plugins;

/// Every built-in plugin type.
pub static PLUGIN_TYPES: &[PluginType] = &[
    plugins::approx_prefix_cache_producer::TYPE,
    plugins::precise_prefix_cache_producer::TYPE,
    plugins::prefill_filter::TYPE,
    plugins::decode_filter::TYPE,
    plugins::encode_filter::TYPE,
    plugins::label_selector_filter::TYPE,
    plugins::by_label::TYPE,
    plugins::prefix_cache_scorer::TYPE,
    plugins::queue_scorer::TYPE,
    plugins::kv_cache_utilization_scorer::TYPE,
    plugins::kv_cost_scorer::TYPE,
    plugins::load_aware_scorer::TYPE,
    plugins::active_request_scorer::TYPE,
    plugins::running_requests_size_scorer::TYPE,
    plugins::max_score_picker::TYPE,
    plugins::random_picker::TYPE,
    plugins::round_robin_picker::TYPE,
    plugins::weighted_random_picker::TYPE,
    plugins::prefix_based_pd_decider::TYPE,
    plugins::always_disagg_pd_decider::TYPE,
    plugins::single_profile_handler::TYPE,
    plugins::disagg_profile_handler::TYPE,
    plugins::header_profile_handler::TYPE,
    plugins::session_affinity_scorer::TYPE,
    plugins::session_affinity_filter::TYPE,
    plugins::rollout::TYPE,
    plugins::token_producer::TYPE,
    plugins::token_producer::LEGACY_TYPE,
    plugins::request_parsers::TYPE,
    plugins::request_parsers::ANTHROPIC_TYPE,
    plugins::request_parsers::VLLMHTTP_TYPE,
    plugins::data_parallel_profile_handler::TYPE,
    plugins::always_disagg_multimodal_decider::TYPE,
    plugins::mm_embeddings_cache_producer::TYPE,
    plugins::mm_embeddings_cache_scorer::TYPE,
    plugins::no_hit_lru_scorer::TYPE,
    plugins::burst_prefix_cache_producer::TYPE,
    plugins::probabilistic_admitter::TYPE,
    plugins::endpoint_attribute_filter::TYPE,
    plugins::endpoint_attribute_scorer::TYPE,
    plugins::topology_extractor::TYPE,
    plugins::topology_affinity_filter::TYPE,
    plugins::topology_affinity_scorer::TYPE,
    plugins::lora_affinity_scorer::TYPE,
    plugins::metrics_data_source::TYPE,
    plugins::core_metrics_extractor::TYPE,
    plugins::endpoint_notification_source::TYPE,
    plugins::models_data_source::TYPE,
    plugins::models_data_extractor::TYPE,
];

/// llm-d plugin types pdgate refuses, each with the reason the loader gives
/// (`unsupported plugin type `t` (reason)`) and the README's compatibility table repeats.
pub static REFUSED: &[(&str, &str)] = &[
    (
        "by-label-selector",
        "a deprecated llm-d alias: write `label-selector-filter`, with the same parameters",
    ),
    (
        "utilization-filter",
        "not implemented: an llm-d Alpha filter on per-endpoint utilization metrics",
    ),
    (
        "context-length-aware",
        "not implemented: matches the prompt length to per-endpoint context-length label ranges",
    ),
    (
        "header-label-affinity-scorer",
        "not implemented: an llm-d Alpha scorer matching a request header to an endpoint label",
    ),
    (
        "dcgm-data-source",
        "reads NVIDIA DCGM hardware GPU counters, which pdgate does not collect",
    ),
    (
        "dcgm-extractor",
        "extracts NVIDIA DCGM hardware GPU counters, which pdgate does not collect",
    ),
    (
        "disagg-headers-handler",
        "a deprecated llm-d alias: `disagg-profile-handler` sets the routing headers",
    ),
    (
        "prefill-header-handler",
        "a deprecated llm-d alias: `disagg-profile-handler` sets the routing headers",
    ),
    (
        "pd-profile-handler",
        "a deprecated llm-d alias: write `disagg-profile-handler` with `deciders`",
    ),
    (
        "token-load-scorer",
        "not implemented: pdgate's `kv-cost-scorer` scores queued tokens instead",
    ),
    (
        "precise-prefix-cache-scorer",
        "a deprecated llm-d wrapper: write `precise-prefix-cache-producer` and `prefix-cache-scorer`",
    ),
    (
        "p2p-source-producer",
        "not implemented: peer-to-peer KV transfer hints in `x-kv-cache-source-host-port`",
    ),
    (
        "multicluster-session-affinity-filter",
        "multi-cluster EPP federation: pdgate routes within one fleet",
    ),
    (
        "multicluster-queue-scorer",
        "multi-cluster EPP federation: pdgate routes within one fleet",
    ),
    (
        "multicluster-kv-cache-utilization-scorer",
        "multi-cluster EPP federation: pdgate routes within one fleet",
    ),
    (
        "multicluster-prefix-cache-scorer",
        "multi-cluster EPP federation: pdgate routes within one fleet",
    ),
    (
        "multicluster-approx-prefix-cache-producer",
        "multi-cluster EPP federation: pdgate routes within one fleet",
    ),
    (
        "multicluster-metrics-data-source",
        "multi-cluster EPP federation: pdgate routes within one fleet",
    ),
    (
        "multicluster-metrics-extractor",
        "multi-cluster EPP federation: pdgate routes within one fleet",
    ),
    (
        "multicluster-file-discovery",
        "multi-cluster EPP federation: pdgate routes within one fleet",
    ),
    (
        "sheddable-eviction-filter",
        "llm-d wires it itself for `flowControl.enableEviction`; pdgate evicts the same way with no plugin entry",
    ),
    (
        "priority-then-time-eviction-order-policy",
        "llm-d wires it itself for `flowControl.enableEviction`; pdgate evicts the same way with no plugin entry",
    ),
    (
        "inflight-load-producer",
        "pdgate counts in-flight requests and tokens itself; llm-d creates this producer on its own, no entry is needed",
    ),
    (
        "predicted-latency-producer",
        "needs llm-d's latency-predictor training and prediction sidecars, which pdgate does not run",
    ),
    (
        "latency-slo-admitter",
        "reads the predictions of `predicted-latency-producer`, which needs llm-d's latency-predictor sidecars and which pdgate does not run",
    ),
    (
        "slo-headroom-tier-filter",
        "reads the predictions of `predicted-latency-producer`, which needs llm-d's latency-predictor sidecars and which pdgate does not run",
    ),
    (
        "latency-scorer",
        "reads the predictions of `predicted-latency-producer`, which needs llm-d's latency-predictor sidecars and which pdgate does not run",
    ),
    (
        "prefix-cache-affinity-filter",
        "not implemented: the sticky prefix-cache filter of llm-d's latency-predictor family",
    ),
    (
        "session-id-producer",
        "not implemented: pdgate's session affinity reads its `x-session-token` header itself",
    ),
    (
        "header-based-testing-filter",
        "a gateway conformance-test plugin pdgate does not implement",
    ),
    (
        "destination-endpoint-served-verifier",
        "a gateway conformance-test plugin pdgate does not implement",
    ),
    (
        "k8s-notification-source",
        "delivers Kubernetes object events to notification extractors, and no pdgate plugin is one; pdgate's Kubernetes discovery watches the pods it routes to",
    ),
    (
        "request-attribute-reporter",
        "not implemented: evaluates CEL over token usage into Envoy dynamic metadata",
    ),
    (
        "passthrough-parser",
        "request parsing is built in: pdgate routes only the APIs it parses (completions, chat, messages, responses, embeddings, generate, tokenize, detokenize); other paths answer 404",
    ),
    (
        "sglanghttp-parser",
        "pdgate does not route that protocol: it parses the OpenAI, Anthropic and vLLM generate requests itself",
    ),
    (
        "vllmgrpc-parser",
        "pdgate does not route that protocol: it parses the OpenAI, Anthropic and vLLM generate requests itself",
    ),
    (
        "vertexai-parser",
        "pdgate does not route that protocol: it parses the OpenAI, Anthropic and vLLM generate requests itself",
    ),
    (
        "file-discovery",
        "pdgate discovers endpoints from its own flags; `--endpoints FILE` is its file discovery",
    ),
    (
        "agent-identity",
        "not implemented: derives the fairness id from agent session headers",
    ),
];

/// Why pdgate refuses llm-d plugin type `type_name`, when it is one of [`REFUSED`].
pub fn refusal(type_name: &str) -> Option<&'static str> {
    REFUSED
        .iter()
        .find(|(t, _)| *t == type_name)
        .map(|(_, why)| *why)
}

/// Looks a plugin type up by name: the scheduling plugins above, then the flow-control ones
/// ([`crate::flow::plugins::TYPES`]).
pub fn lookup(type_name: &str) -> Option<&'static PluginType> {
    PLUGIN_TYPES
        .iter()
        .chain(crate::flow::plugins::TYPES)
        .find(|t| t.name == type_name)
}
