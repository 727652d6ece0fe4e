//! The `EndpointPickerConfig` document as written (llm-d `apix/config/v1alpha1`).

use super::lines;
use crate::error::ConfigError;
use serde::de::{DeserializeOwned, IgnoredAny};
use serde::Deserialize;
use serde_yaml_ng::Value;

/// API versions accepted in `apiVersion`: llm-d's `v1alpha1` (first: the effective config
/// writes it, which every llm-d release reads) and `v1` (the same fields, as far as pdgate
/// reads them), and the older gateway-api-inference-extension group.
pub const API_VERSIONS: &[&str] = &[
    "llm-d.ai/v1alpha1",
    "llm-d.ai/v1",
    "inference.networking.x-k8s.io/v1alpha1",
];
/// The only accepted `kind`.
pub const KIND: &str = "EndpointPickerConfig";

/// The document as parsed: every entry well-formed.
pub type RawConfig = RawDoc<RawPlugin, RawProfile>;

/// Top level, with plugin entries `P` and profile entries `S` (typed, or [`Value`] to check
/// entries one by one). The other sections are accepted here and decoded strictly by their
/// own readers (`featureGates`, `flowControl`, `saturationDetector`: [`crate::flow::config`];
/// `dataLayer`: `config/datalayer.rs`), except `requestHandler`, ignored; any other key is an
/// error.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawDoc<P, S> {
    /// `llm-d.ai/v1alpha1`.
    pub api_version: Option<String>,
    /// `EndpointPickerConfig`.
    pub kind: Option<String>,
    /// Plugin instances.
    #[serde(default)]
    pub plugins: Vec<P>,
    /// Scheduling profiles.
    #[serde(default)]
    pub scheduling_profiles: Vec<S>,
    /// Ignored.
    #[serde(rename = "featureGates")]
    _feature_gates: Option<IgnoredAny>,
    /// Ignored.
    #[serde(rename = "saturationDetector")]
    _saturation_detector: Option<IgnoredAny>,
    /// Read by `config/datalayer.rs`.
    #[serde(rename = "dataLayer")]
    _data_layer: Option<IgnoredAny>,
    /// Ignored.
    #[serde(rename = "flowControl")]
    _flow_control: Option<IgnoredAny>,
    /// Ignored.
    #[serde(rename = "requestHandler")]
    _request_handler: Option<IgnoredAny>,
}

/// `plugins[]`: `{name?, type, parameters?}`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPlugin {
    /// Instance name; defaults to the type.
    pub name: Option<String>,
    /// Plugin type, e.g. `queue-scorer`.
    #[serde(rename = "type")]
    pub plugin_type: String,
    /// Parameters, decoded strictly by the plugin's factory.
    pub parameters: Option<Value>,
    /// A malformed entry (reported already); `name` and `type` as far as known.
    #[serde(skip)]
    pub broken: bool,
}

/// `schedulingProfiles[]`: `{name, plugins: [{pluginRef, weight?}]}`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawProfile {
    /// Profile name.
    pub name: String,
    /// Plugin references.
    #[serde(default)]
    pub plugins: Vec<RawPluginRef>,
    /// A malformed entry (reported already); `name` as far as known (else empty).
    #[serde(skip)]
    pub broken: bool,
}

/// `{pluginRef, weight?}`; weight defaults to 1 and matters for scorers.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawPluginRef {
    /// Name of a plugin instance.
    pub plugin_ref: String,
    /// Scorer weight.
    pub weight: Option<f64>,
}

/// A parsed document and the errors of its malformed entries (which are kept, `broken`).
pub struct Parsed {
    /// The document.
    pub raw: RawConfig,
    /// One error per malformed `plugins` or `schedulingProfiles` entry.
    pub errors: Vec<ConfigError>,
}

/// Parses the document; errors carry serde_yaml_ng's line. A document whose only problems
/// are malformed plugin or profile entries parses, with one error per such entry; anything
/// else (invalid YAML, unknown top-level key, wrong `kind`) is one error.
pub fn parse(yaml: &str, source: &str) -> Result<Parsed, ConfigError> {
    let error = |line: Option<usize>, message: String| ConfigError {
        source_name: source.into(),
        line,
        plugin: None,
        message,
    };
    let (raw, errors) = match serde_yaml_ng::from_str::<RawConfig>(yaml) {
        Ok(raw) => (raw, Vec::new()),
        Err(e) => {
            let strict = error(e.location().map(|l| l.line()), strip_location(&e));
            let Ok(doc) = serde_yaml_ng::from_str::<RawDoc<Value, Value>>(yaml) else {
                return Err(strict);
            };
            let (plugins, mut found) = entries(yaml, "plugins", doc.plugins);
            let (profiles, more) = entries(yaml, "schedulingProfiles", doc.scheduling_profiles);
            found.extend(more);
            let errors: Vec<ConfigError> = found.into_iter().map(|(l, m)| error(l, m)).collect();
            if errors.is_empty() {
                return Err(strict);
            }
            let raw = RawConfig {
                api_version: doc.api_version,
                kind: doc.kind,
                plugins: plugins.into_iter().map(broken_plugin).collect(),
                scheduling_profiles: profiles.into_iter().map(broken_profile).collect(),
                ..RawDoc::default()
            };
            (raw, errors)
        }
    };
    if let Some(v) = &raw.api_version {
        if !API_VERSIONS.contains(&v.as_str()) {
            return Err(error(
                None,
                format!(
                    "apiVersion `{v}` is not supported, expected one of `{}`",
                    API_VERSIONS.join("`, `")
                ),
            ));
        }
    }
    if let Some(k) = &raw.kind {
        if k != KIND {
            return Err(error(
                None,
                format!("kind `{k}` is not supported, expected `{KIND}`"),
            ));
        }
    }
    Ok(Parsed { raw, errors })
}

impl<P, S> Default for RawDoc<P, S> {
    fn default() -> Self {
        RawDoc {
            api_version: None,
            kind: None,
            plugins: Vec::new(),
            scheduling_profiles: Vec::new(),
            _feature_gates: None,
            _saturation_detector: None,
            _data_layer: None,
            _flow_control: None,
            _request_handler: None,
        }
    }
}

/// serde_yaml_ng's message without its ` at line L column C` suffix.
fn strip_location(e: &serde_yaml_ng::Error) -> String {
    let text = e.to_string();
    match text.rfind(" at line ") {
        Some(i) => text[..i].to_string(),
        None => text,
    }
}

/// A malformed entry's 1-based line (when known) and message.
type EntryError = (Option<usize>, String);

/// Decodes each entry of the top-level sequence `section` on its own: `Ok` entries, or the
/// entry as written with its `(line, message)`. The line and the message's field path come
/// from decoding the entry's own lines (block style); the message reads like a whole-document
/// error (`plugins[1]: unknown field …`).
fn entries<T: DeserializeOwned>(
    yaml: &str,
    section: &str,
    values: Vec<Value>,
) -> (Vec<Result<T, Value>>, Vec<EntryError>) {
    let items = lines::seq_items(yaml, section);
    let text: Vec<&str> = yaml.lines().collect();
    let mut errors = Vec::new();
    let mut out = Vec::new();
    // Line ranges are trusted only when they match the entries one to one.
    let aligned = items.len() == values.len();
    for (i, v) in values.into_iter().enumerate() {
        let item = items.get(i).filter(|_| aligned);
        let from_text =
            item.map(|r| serde_yaml_ng::from_str::<Vec<T>>(&text[r.clone()].join("\n")));
        let err = match (T::deserialize(v.clone()), from_text) {
            (Ok(t), _) => {
                out.push(Ok(t));
                continue;
            }
            (Err(_), Some(Ok(mut ts))) if ts.len() == 1 => {
                out.push(Ok(ts.pop().expect("one entry")));
                continue;
            }
            (Err(e), Some(Err(te))) => {
                let line = te.location().zip(item).map(|(l, r)| r.start + l.line());
                let msg = strip_location(&te);
                match msg.strip_prefix(".[0]").or_else(|| msg.strip_prefix("[0]")) {
                    Some(rest) => (line, format!("{section}[{i}]{rest}")),
                    None => (None, format!("{section}[{i}]: {e}")),
                }
            }
            (Err(e), _) => (None, format!("{section}[{i}]: {e}")),
        };
        errors.push(err);
        out.push(Err(v));
    }
    (out, errors)
}

/// The string field `key` of a mapping entry, if any.
fn field(v: &Value, key: &str) -> Option<String> {
    v.get(key).and_then(Value::as_str).map(str::to_string)
}

fn broken_plugin(entry: Result<RawPlugin, Value>) -> RawPlugin {
    entry.unwrap_or_else(|v| RawPlugin {
        name: field(&v, "name"),
        plugin_type: field(&v, "type").unwrap_or_default(),
        broken: true,
        ..RawPlugin::default()
    })
}

fn broken_profile(entry: Result<RawProfile, Value>) -> RawProfile {
    entry.unwrap_or_else(|v| RawProfile {
        name: field(&v, "name").unwrap_or_default(),
        broken: true,
        ..RawProfile::default()
    })
}
