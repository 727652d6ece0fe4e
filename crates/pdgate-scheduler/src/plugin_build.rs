//! What building a plugin takes and yields: a factory ([`Factory`], registered as a
//! [`PluginType`] with its [`Stage`]) decodes its `parameters`, may look up plugins built
//! before it ([`BuildCtx`]), and returns a [`Built`] holding the extension points it
//! implements plus its effective parameters.
//!
//! The plugin modules import this module (and [`crate::plugin_params`], re-exported here)
//! instead of the registry: the registry ([`crate::registry`], the table type name → factory)
//! and the config loader import the plugins, never the other way round. The types a built
//! plugin carries (flow-control policies, saturation detectors, tokenizer and data-layer
//! settings, prefix indexes) live below the plugins too.

use crate::datalayer::DataPlugin;
use crate::flow::policy::FlowPolicy;
use crate::flow::saturation::SaturationDetector;
use crate::plugin::{
    Admitter, Decider, Filter, MetricsSource, Picker, PreRequest, ProfileHandler, RequestAbandoned,
    RequestRejected, ResponseHeader, Scorer, Screener,
};
pub use crate::plugin_params::{decode, effective, NoParams, PluginError};
use crate::prefix::PrefixSource;
use crate::token_params::TokenProducerParams;
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
    pub saturation: Option<Arc<dyn SaturationDetector>>,
    /// Flow-control policy (fairness, ordering, usage limit).
    pub flow_policy: Option<FlowPolicy>,
    /// Tokenization parameters (`token-producer`), for the front ends to act on.
    pub token_producer: Option<Arc<TokenProducerParams>>,
    /// State a data producer shares with the consumers that name it (e.g. the per-endpoint
    /// caches of `mm-embeddings-cache-producer`); a consumer downcasts it to the producer's
    /// own type, found by the producer's name in [`BuildCtx::built`].
    pub shared: Option<Arc<dyn std::any::Any + Send + Sync>>,
    /// Data-layer plugin (`dataLayer.sources`: a data source or an extractor).
    pub data: Option<DataPlugin>,
    /// Effective parameters (`Value::Null` for plugins without parameters).
    pub params: Value,
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
