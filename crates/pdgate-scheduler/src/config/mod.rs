//! Loading an llm-d `EndpointPickerConfig`: strict parsing, llm-d default injection, plugin
//! construction, profile resolution and the effective config.
//!
//! Defaults injected as llm-d does: a plugin's `name` defaults to its `type`; a config using
//! `prefix-cache-scorer`, `prefix-based-pd-decider` or pdgate's `kv-cost-scorer` without naming a
//! producer (`prefixMatchInfoProducerName`) and without an `approx-prefix-cache-producer` gets
//! one with default parameters; no profiles → one `default` profile referencing every
//! filter, scorer and picker; a profile without a picker gets `max-score-picker`; one profile
//! and no handler → `single-profile-handler`; a ref's `weight` defaults to 1.
//!
//! Errors are collected ([`load_all`], [`check`]): every plugin entry, profile and handler
//! problem is reported, in file order, each at most once (a plugin that fails is not reported
//! again by the profiles or plugins referring to it). A document that is not valid YAML or not
//! an `EndpointPickerConfig` at all is one error. [`load`] keeps the first error only.

mod datalayer;
mod effective;
mod lines;
mod loader;
mod profiles;
mod raw;

pub use crate::datalayer::{DataLayer, DataPlugin};
use crate::error::ConfigError;
pub use crate::error::ConfigErrors;
use crate::plugin::{
    Admitter, MetricsSource, PreRequest, ProfileHandler, RequestAbandoned, RequestRejected,
    ResponseHeader, Screener,
};
use crate::prefix::PrefixSource;
use crate::profile::Profile;
use crate::registry::{self, Built, Stage};
pub use datalayer::ENDPOINT_EXTRACTORS;
use effective::{Effective, EffectivePlugin};
use loader::Loader;
use std::sync::Arc;

/// A loaded config, ready for the [`crate::Scheduler`].
pub struct Loaded {
    /// Profiles in config order.
    pub profiles: Vec<Profile>,
    /// The profile handler.
    pub handler: Arc<dyn ProfileHandler>,
    /// Screeners and lifecycle hooks, in build order.
    pub hooks: Hooks,
    /// Prefix indexes by slot, with their producer's name.
    pub indexes: Vec<(String, PrefixSource)>,
    /// The effective config as YAML.
    pub effective_yaml: String,
    /// Flow control and admission (`featureGates`, `flowControl`).
    pub flow: crate::flow::FlowSettings,
    /// The `token-producer` parameters, when one is configured.
    pub token_producer: Option<Arc<crate::token_params::TokenProducerParams>>,
    /// What the engine scraper reads (`dataLayer` and its plugins).
    pub data_layer: Arc<DataLayer>,
}

/// The plugins implementing each per-request extension point, in build order.
#[derive(Default)]
pub struct Hooks {
    /// `(plugin name, screener)`.
    pub screeners: Vec<(String, Arc<dyn Screener>)>,
    /// `(plugin name, admitter)`.
    pub admitters: Vec<(String, Arc<dyn Admitter>)>,
    /// PreRequest hooks.
    pub pre_requests: Vec<Arc<dyn PreRequest>>,
    /// ResponseHeader hooks.
    pub response_headers: Vec<Arc<dyn ResponseHeader>>,
    /// RequestRejected hooks (opt-in).
    pub rejected: Vec<Arc<dyn RequestRejected>>,
    /// RequestAbandoned hooks, shared by every booking.
    pub abandoned: Arc<[Arc<dyn RequestAbandoned>]>,
    /// Plugins exporting metrics.
    pub metrics: Vec<Arc<dyn MetricsSource>>,
}

impl Hooks {
    fn collect(built: &[(String, String, Built)]) -> Hooks {
        let all = || built.iter().map(|(_, _, b)| b);
        Hooks {
            screeners: built
                .iter()
                .filter_map(|(n, _, b)| Some((n.clone(), b.screener.clone()?)))
                .collect(),
            admitters: built
                .iter()
                .filter_map(|(n, _, b)| Some((n.clone(), b.admitter.clone()?)))
                .collect(),
            pre_requests: all().filter_map(|b| b.pre_request.clone()).collect(),
            response_headers: all().filter_map(|b| b.response_header.clone()).collect(),
            rejected: all().filter_map(|b| b.request_rejected.clone()).collect(),
            abandoned: all().filter_map(|b| b.request_abandoned.clone()).collect(),
            metrics: all().filter_map(|b| b.metrics.clone()).collect(),
        }
    }
}

/// Plugin types that read a prefix producer: a config using one without any
/// `approx-prefix-cache-producer` gets one with default parameters (llm-d's injection).
const PRODUCER_CONSUMERS: &[&str] = &[
    "prefix-cache-scorer",
    "prefix-based-pd-decider",
    "kv-cost-scorer",
    "no-hit-lru-scorer",
];

/// Loads `yaml`; `source` names the file in errors; `extra` are plugin types registered
/// by the embedding program, looked up before the built-in ones.
///
/// Errors: the first of [`load_all`]'s errors (see [`crate::Scheduler::from_yaml`]).
pub fn load(
    yaml: &str,
    source: &str,
    extra: &[registry::PluginType],
) -> Result<Loaded, ConfigError> {
    load_all(yaml, source, extra).map_err(ConfigErrors::into_first)
}

/// Validates `yaml` against the built-in plugin types and returns the effective config (llm-d
/// defaults injected) as YAML; `source` names the file in errors (`pdgate check-config`).
///
/// Errors: every problem found, see [`load_all`].
pub fn check(yaml: &str, source: &str) -> Result<String, ConfigErrors> {
    load_all(yaml, source, &[]).map(|l| {
        // Settings that load but do nothing are said, as YAML comments (`serve` logs them).
        let mut y = l.effective_yaml;
        for w in &l.flow.warnings {
            y += &format!("# warning: {w}\n");
        }
        y
    })
}

/// [`load`], reporting every problem instead of the first: each plugin entry's (unsupported
/// type, duplicate name, rejected parameters), each profile's (unknown `pluginRef`, not a
/// filter/scorer/picker, two pickers, bad weight, duplicate profile) and the handler's, sorted
/// by line (errors without a line last).
///
/// Errors: [`ConfigErrors`], never empty; a document that does not parse as an
/// `EndpointPickerConfig` gives a single error.
pub fn load_all(
    yaml: &str,
    source: &str,
    extra: &[registry::PluginType],
) -> Result<Loaded, ConfigErrors> {
    let raw::Parsed { raw, errors } = raw::parse(yaml, source)?;
    let mut ld = Loader::new(yaml, source, extra);
    ld.errors = errors;
    let items = lines::seq_items(yaml, "plugins");
    for (i, p) in raw.plugins.into_iter().enumerate() {
        let name = p.name.unwrap_or_else(|| p.plugin_type.clone());
        if p.broken {
            ld.declare_malformed(name, p.plugin_type);
        } else {
            ld.declare(name, p.plugin_type, p.parameters, items.get(i).cloned());
        }
    }
    // Only consumers that name no producer read the injected approximate one.
    let needs_producer = ld.decls.iter().any(|d| {
        PRODUCER_CONSUMERS.contains(&d.plugin_type.as_str())
            && !names_producer(d.params.as_ref(), &d.plugin_type)
    });
    let producer = crate::plugins::approx_prefix_cache_producer::TYPE.name;
    if needs_producer
        && !ld.decls.iter().any(|d| d.plugin_type == producer)
        && ld.declare(producer.into(), producer.into(), None, None)
    {
        let injected = ld.decls.pop().expect("just declared");
        ld.decls.insert(0, injected);
    }
    // llm-d's default multimodal-cache producer, for scorers that read it and no plugin of
    // its name is declared.
    let mm = crate::plugins::mm_embeddings_cache_producer::TYPE.name;
    let needs_mm = ld.decls.iter().any(|d| {
        use crate::plugins::mm_embeddings_cache_scorer as scorer;
        d.plugin_type == scorer::TYPE.name && scorer::reads_default_producer(d.params.as_ref())
    });
    if needs_mm && !ld.is_declared(mm) && ld.declare(mm.into(), mm.into(), None, None) {
        let injected = ld.decls.pop().expect("just declared");
        ld.decls.insert(0, injected);
    }
    for stage in [Stage::Producer, Stage::Consumer] {
        for i in 0..ld.decls.len() {
            if ld.decls[i].stage == stage {
                ld.build(i, &[]);
            }
        }
    }
    let raw_profiles = if raw.scheduling_profiles.is_empty() {
        vec![ld.default_profile()]
    } else {
        raw.scheduling_profiles
    };
    let resolved = ld.profiles(&raw_profiles);
    let handler = handler(&mut ld, &resolved.names);
    let flow = flow_settings(&mut ld, yaml);
    let data = datalayer::resolve(&mut ld);
    if !ld.errors.is_empty() {
        let mut errors = ld.errors;
        errors.sort_by_key(|e| e.line.unwrap_or(usize::MAX));
        return Err(ConfigErrors(errors));
    }
    let handler = handler.expect("a load without errors has built one handler");
    let effective = Effective {
        api_version: raw::API_VERSIONS[0],
        kind: raw::KIND,
        plugins: ld
            .decls
            .iter()
            .filter_map(|d| {
                let (_, _, b) = ld.find_built(&d.name)?;
                Some(EffectivePlugin {
                    name: d.name.clone(),
                    plugin_type: d.plugin_type.clone(),
                    parameters: b.params.clone(),
                })
            })
            .collect(),
        scheduling_profiles: resolved.effective,
        feature_gates: flow.as_ref().map(|f| f.1.clone()).unwrap_or_default(),
        flow_control: flow.as_ref().and_then(|f| f.2.clone()),
        saturation_detector: flow.as_ref().and_then(|f| f.3.clone()),
        data_layer: data.as_ref().and_then(|d| d.1.clone()),
    };
    let flow = flow.map(|f| f.0).unwrap_or_default();
    Ok(Loaded {
        profiles: resolved.profiles,
        handler,
        hooks: Hooks::collect(&ld.built),
        indexes: ld
            .built
            .iter()
            .filter_map(|(n, _, b)| Some((n.clone(), b.index.clone()?)))
            .collect(),
        effective_yaml: effective.to_yaml(),
        flow,
        token_producer: ld
            .built
            .iter()
            .find_map(|(_, _, b)| b.token_producer.clone()),
        data_layer: Arc::new(data.map(|d| d.0).unwrap_or_default()),
    })
}

/// Whether a consumer's raw parameters name their producer (`prefixMatchInfoProducerName`,
/// or the decider's alias `prefixPluginName`; `no-hit-lru-scorer`'s deprecated
/// `prefixPluginName` names nothing, and an empty name there means the default).
fn names_producer(params: Option<&serde_yaml_ng::Value>, plugin_type: &str) -> bool {
    let Some(serde_yaml_ng::Value::Mapping(m)) = params else {
        return false;
    };
    if plugin_type == crate::plugins::no_hit_lru_scorer::TYPE.name {
        return m
            .get("prefixMatchInfoProducerName")
            .is_some_and(|v| !v.is_null() && v.as_str() != Some(""));
    }
    ["prefixMatchInfoProducerName", "prefixPluginName"]
        .iter()
        .any(|k| m.get(*k).is_some_and(|v| !v.is_null()))
}

/// The first `…`-quoted text of `message`.
fn quoted(message: &str) -> Option<&str> {
    let (_, rest) = message.split_once('`')?;
    Some(rest.split_once('`')?.0).filter(|v| !v.is_empty())
}

/// 1-based line of the `nth` (0-based) `key: value` or `- value` whose value is `value`
/// (quotes and comments ignored).
fn line_of_value(yaml: &str, value: &str, nth: usize) -> Option<usize> {
    yaml.lines()
        .enumerate()
        .filter(|(_, l)| {
            let t = l.split('#').next().unwrap_or("").trim();
            let v = match t.strip_prefix("- ") {
                Some(item) if !item.contains(": ") => item,
                _ => t.rsplit_once(": ").map_or("", |(_, v)| v),
            };
            v.trim().trim_matches(|c| c == '"' || c == '\'') == value
        })
        .nth(nth)
        .map(|(i, _)| i + 1)
}

/// The sections as written (kept for the effective config) and what they resolve to.
type FlowSections = (
    crate::flow::FlowSettings,
    Vec<String>,
    Option<serde_yaml_ng::Value>,
    Option<serde_yaml_ng::Value>,
);

/// Reads `featureGates`, `flowControl` and the top-level `saturationDetector`, resolving
/// their plugin references against the built plugins; records any problem (with its line)
/// and returns `None` then.
fn flow_settings(ld: &mut Loader<'_>, yaml: &str) -> Option<FlowSections> {
    use crate::flow::config::{self as fc, Declared, RawSections};
    #[derive(serde::Deserialize)]
    struct Verbatim {
        #[serde(rename = "saturationDetector")]
        saturation_detector: Option<serde_yaml_ng::Value>,
    }
    let raw: RawSections = match serde_yaml_ng::from_str(yaml) {
        Ok(r) => r,
        Err(e) => {
            // serde places errors of a nested value at its map's first key: the line of the
            // value the message quotes is the better one.
            let line = quoted(&e.to_string())
                .and_then(|v| line_of_value(yaml, v, 0))
                .or(e.location().map(|l| l.line()));
            let msg = e.to_string();
            let msg = msg
                .rfind(" at line ")
                .map_or(msg.as_str(), |i| &msg[..i])
                .to_string();
            ld.report(line, None, msg);
            return None;
        }
    };
    let gates = raw.feature_gates.clone();
    let verbatim: Option<Verbatim> = serde_yaml_ng::from_str(yaml).ok();
    let built = &ld.built;
    let lookup = |name: &str| -> Option<Declared> {
        let (_, _, b) = built.iter().find(|(n, _, _)| n == name)?;
        Some(Declared::of(b))
    };
    match fc::resolve(raw, &lookup) {
        Ok(settings) => {
            // flowControl with its defaults written out; the deprecated top-level detector
            // as written.
            let f = settings.effective.clone();
            let s = verbatim.and_then(|v| v.saturation_detector);
            Some((settings, gates, f, s))
        }
        Err((field, message)) => {
            let path = field.replace(|c: char| c == '[' || c.is_ascii_digit() || c == ']', "");
            let path = path.replace("..", ".");
            let all = 0..yaml.lines().count();
            // A duplicate is the second copy; a bad value is where it is written.
            let nth = usize::from(message.starts_with("duplicate"));
            let line = message
                .strip_prefix("duplicate priority level ")
                .or_else(|| quoted(&message))
                .and_then(|v| line_of_value(yaml, v, nth))
                .or_else(|| lines::find_path(yaml, &all, &path));
            ld.report(line, None, format!("{field}: {message}"));
            None
        }
    }
}

/// Builds the profile handler for the profiles `names` (injecting `single-profile-handler`
/// for a single profile); records a missing or extra handler and every handler's own
/// problems. `None` unless exactly one handler was built.
fn handler(ld: &mut Loader<'_>, names: &[String]) -> Option<Arc<dyn ProfileHandler>> {
    let mut handlers: Vec<usize> = (0..ld.decls.len())
        .filter(|i| ld.decls[*i].stage == Stage::Handler)
        .collect();
    match handlers.len() {
        0 if names.len() == 1 => {
            let t = crate::plugins::single_profile_handler::TYPE.name;
            if ld.declare(t.into(), t.into(), None, None) {
                handlers.push(ld.decls.len() - 1);
            }
        }
        // A handler whose type is unsupported was reported already.
        0 if ld.handler_unknown => {}
        0 => {
            let msg = format!(
                "no profile handler: {} scheduling profiles need one (e.g. `disagg-profile-handler`)",
                names.len()
            );
            ld.report(None, None, msg);
        }
        1 => {}
        _ => {
            let list: Vec<String> = handlers
                .iter()
                .map(|i| format!("`{}`", ld.decls[*i].name))
                .collect();
            let msg = format!("more than one profile handler: {}", list.join(", "));
            ld.report(None, None, msg);
        }
    }
    let mut built = Vec::new();
    for i in handlers {
        if ld.build(i, names) {
            built.push(ld.built.last().and_then(|(_, _, b)| b.handler.clone()));
        }
    }
    match built.as_slice() {
        [Some(h)] => Some(h.clone()),
        _ => None,
    }
}
