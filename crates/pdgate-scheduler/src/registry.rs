//! Plugin registry: llm-d plugin type name → factory.
//!
//! A factory decodes its `parameters` strictly (serde `deny_unknown_fields`; absent parameters
//! mean all defaults) and returns a [`Built`] plugin holding the extension points it
//! implements plus its effective parameters (defaults filled in) for `effective_config_yaml`.

use crate::plugin::{
    Admitter, Decider, Filter, MetricsSource, Picker, PreRequest, ProfileHandler, RequestAbandoned,
    RequestRejected, ResponseHeader, Scorer, Screener,
};
use crate::plugins;
use crate::prefix::PrefixSource;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_yaml_ng::Value;
use std::sync::Arc;

/// Build order: producers first (consumers look them up), handlers last (they look deciders up).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Stage {
    /// Data producers (`approx-prefix-cache-producer`).
    Producer,
    /// Filters, scorers, pickers, deciders.
    Consumer,
    /// Profile handlers.
    Handler,
}

/// A built plugin: the extension points it implements. The framework finds each point by
/// its field; a plugin fills only the ones it implements.
#[derive(Default)]
pub struct Built {
    /// Screener extension point (runs once per request, before any profile).
    pub screener: Option<Arc<dyn Screener>>,
    /// Admitter extension point (runs once per request, after the screeners).
    pub admitter: Option<Arc<dyn Admitter>>,
    /// Filter extension point.
    pub filter: Option<Arc<dyn Filter>>,
    /// Scorer extension point.
    pub scorer: Option<Arc<dyn Scorer>>,
    /// Picker extension point.
    pub picker: Option<Arc<dyn Picker>>,
    /// Decider extension point.
    pub decider: Option<Arc<dyn Decider>>,
    /// Profile-handler extension point.
    pub handler: Option<Arc<dyn ProfileHandler>>,
    /// PreRequest hook.
    pub pre_request: Option<Arc<dyn PreRequest>>,
    /// ResponseHeader hook.
    pub response_header: Option<Arc<dyn ResponseHeader>>,
    /// Opt-in RequestRejected hook.
    pub request_rejected: Option<Arc<dyn RequestRejected>>,
    /// RequestAbandoned hook.
    pub request_abandoned: Option<Arc<dyn RequestAbandoned>>,
    /// Metrics the plugin exports.
    pub metrics: Option<Arc<dyn MetricsSource>>,
    /// Prefix index, for producers.
    pub index: Option<PrefixSource>,
    /// Saturation detector (flow control, legacy admission).
    pub saturation: Option<Arc<dyn crate::flow::SaturationDetector>>,
    /// Flow-control policy (fairness, ordering, usage limit).
    pub flow_policy: Option<crate::flow::plugins::FlowPolicy>,
    /// Tokenization parameters (`token-producer`), for the front ends to act on.
    pub token_producer: Option<Arc<crate::plugins::token_producer::TokenProducerParams>>,
    /// State a data producer shares with the consumers that name it (e.g. the per-endpoint
    /// caches of `mm-embeddings-cache-producer`); a consumer downcasts it to the producer's
    /// own type, found by the producer's name in [`BuildCtx::built`].
    pub shared: Option<Arc<dyn std::any::Any + Send + Sync>>,
    /// Data-layer plugin (`dataLayer.sources`: a data source or an extractor).
    pub data: Option<crate::config::DataPlugin>,
    /// Effective parameters (`Value::Null` for plugins without parameters).
    pub params: Value,
}

/// A parameter error. `path` is the dotted path inside `parameters` shown in the message
/// (`None` for the parameters object itself); `key` is the dotted path used to find the YAML
/// line (for an unknown field, the unknown key itself).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginError {
    /// Dotted path shown in the message.
    pub path: Option<String>,
    /// Dotted path of the offending key, for the line.
    pub key: Option<String>,
    /// What is wrong.
    pub message: String,
    /// The plugin this one refers to and could not find (a missing producer or decider), so
    /// that a config check reports the missing plugin once, not again for each dependent.
    pub missing: Option<String>,
}

impl PluginError {
    /// An invalid value of `field` (dotted path inside `parameters`).
    pub fn invalid(field: &str, message: impl Into<String>) -> Self {
        PluginError {
            path: Some(field.to_string()),
            key: Some(field.to_string()),
            message: message.into(),
            missing: None,
        }
    }

    /// `field` names a plugin `name` that is not there (or not of the needed kind).
    pub fn missing(field: &str, name: &str, message: impl Into<String>) -> Self {
        PluginError {
            missing: Some(name.to_string()),
            ..PluginError::invalid(field, message)
        }
    }
}

/// What a factory may look up: plugins built so far and the configured profile names.
pub struct BuildCtx<'a> {
    /// `(name, type, plugin)` of the plugins built so far, in build order.
    pub built: &'a [(String, String, Built)],
    /// Names of the scheduling profiles (after default injection).
    pub profiles: &'a [String],
    /// Slot for the next prefix producer.
    pub next_slot: usize,
}

impl BuildCtx<'_> {
    /// The prefix index of producer `name` (approximate or precise), or of the first
    /// approximate producer when `name` is `None` (llm-d: a consumer naming no producer
    /// reads the auto-spawned approximate one). The one resolution point of
    /// `prefixMatchInfoProducerName`.
    pub fn producer(&self, name: Option<&str>, field: &str) -> Result<PrefixSource, PluginError> {
        let found = self.built.iter().find(|(n, _, b)| match (&b.index, name) {
            (Some(_), Some(w)) => w == n,
            (Some(ix), None) => ix.approx().is_some(),
            (None, _) => false,
        });
        match (found, name) {
            (Some((_, _, b)), _) => Ok(b.index.clone().expect("checked")),
            (None, Some(n)) => Err(PluginError::missing(
                field,
                n,
                format!("no prefix producer plugin named `{n}`"),
            )),
            (None, None) => Err(PluginError::invalid(
                field,
                "no approx-prefix-cache-producer configured",
            )),
        }
    }

    /// The decider plugin named `name`.
    pub fn decider(&self, name: &str, field: &str) -> Result<Arc<dyn Decider>, PluginError> {
        match self.built.iter().find(|(n, _, _)| n == name) {
            Some((_, _, b)) => b.decider.clone().ok_or_else(|| {
                PluginError::invalid(field, format!("plugin `{name}` is not a decider"))
            }),
            None => Err(PluginError::missing(
                field,
                name,
                format!("no plugin named `{name}`"),
            )),
        }
    }
}

/// Factory signature.
pub type Factory = fn(Option<&Value>, &mut BuildCtx<'_>) -> Result<Built, PluginError>;

/// One registered plugin type.
pub struct PluginType {
    /// llm-d type name, e.g. `queue-scorer`.
    pub name: &'static str,
    /// When it is built.
    pub stage: Stage,
    /// The factory.
    pub build: Factory,
}

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

/// Decodes `params` strictly into `T` (absent or null → `{}`, i.e. all defaults).
///
/// Errors carry the dotted field path (from serde_yaml_ng's path) and serde's message without
/// its snippet-relative location.
pub fn decode<T: DeserializeOwned>(params: Option<&Value>) -> Result<T, PluginError> {
    let text = match params {
        None | Some(Value::Null) => "{}".to_string(),
        Some(v) => serde_yaml_ng::to_string(v).map_err(|e| PluginError {
            path: None,
            key: None,
            message: e.to_string(),
            missing: None,
        })?,
    };
    serde_yaml_ng::from_str(&text).map_err(|e| split_serde_error(&e.to_string()))
}

/// The effective parameters of `p` as a YAML value.
pub fn effective<T: Serialize>(p: &T) -> Value {
    serde_yaml_ng::to_value(p).unwrap_or(Value::Null)
}

fn split_serde_error(msg: &str) -> PluginError {
    let msg = match msg.rfind(" at line ") {
        Some(i) if msg[i..].contains(" column ") => &msg[..i],
        _ => msg,
    };
    let (path, rest) = match msg.split_once(": ") {
        Some((p, r)) if !p.is_empty() && !p.contains(' ') => (Some(p.to_string()), r),
        _ => (None, msg),
    };
    let unknown = rest
        .strip_prefix("unknown field `")
        .and_then(|r| r.split_once('`'))
        .map(|(f, _)| f);
    let key = match (&path, unknown) {
        (Some(p), Some(u)) => Some(format!("{p}.{u}")),
        (None, Some(u)) => Some(u.to_string()),
        (p, None) => p.clone(),
    };
    PluginError {
        path,
        key,
        message: rest.to_string(),
        missing: None,
    }
}

/// Parameters of plugins that take none: any field is an error.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NoParams {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serde_errors_are_split_into_path_key_and_message() {
        let e = split_serde_error(
            "deciders.prefill: invalid type: sequence, expected a string at line 2 column 12",
        );
        assert_eq!(
            (e.path.as_deref(), e.key.as_deref()),
            (Some("deciders.prefill"), Some("deciders.prefill"))
        );
        assert_eq!(e.message, "invalid type: sequence, expected a string");
        let e = split_serde_error("unknown field `bogus`, expected `a` or `b`");
        assert_eq!((e.path, e.key.as_deref()), (None, Some("bogus")));
        let e =
            split_serde_error("deciders: unknown field `x`, expected `prefill` at line 2 column 3");
        assert_eq!(
            (e.path.as_deref(), e.key.as_deref()),
            (Some("deciders"), Some("deciders.x"))
        );
        assert_eq!(e.message, "unknown field `x`, expected `prefill`");
    }
}
