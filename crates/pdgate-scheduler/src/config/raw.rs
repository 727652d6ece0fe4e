//! The `EndpointPickerConfig` document as written (llm-d `apix/config/v1alpha1`).

use crate::error::ConfigError;
use serde::de::IgnoredAny;
use serde::Deserialize;
use serde_yaml_ng::Value;

/// API versions accepted in `apiVersion` (current llm-d, and the older
/// gateway-api-inference-extension group).
pub const API_VERSIONS: &[&str] = &[
    "llm-d.ai/v1alpha1",
    "inference.networking.x-k8s.io/v1alpha1",
];
/// The only accepted `kind`.
pub const KIND: &str = "EndpointPickerConfig";

/// Top level. Sections pdgate does not use yet (`featureGates`, `saturationDetector`,
/// `dataLayer`, `flowControl`, `requestHandler`) are accepted and ignored; any other key is
/// an error.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawConfig {
    /// `llm-d.ai/v1alpha1`.
    pub api_version: Option<String>,
    /// `EndpointPickerConfig`.
    pub kind: Option<String>,
    /// Plugin instances.
    #[serde(default)]
    pub plugins: Vec<RawPlugin>,
    /// Scheduling profiles.
    #[serde(default)]
    pub scheduling_profiles: Vec<RawProfile>,
    /// Ignored.
    #[serde(rename = "featureGates")]
    _feature_gates: Option<IgnoredAny>,
    /// Ignored.
    #[serde(rename = "saturationDetector")]
    _saturation_detector: Option<IgnoredAny>,
    /// Ignored.
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
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPlugin {
    /// Instance name; defaults to the type.
    pub name: Option<String>,
    /// Plugin type, e.g. `queue-scorer`.
    #[serde(rename = "type")]
    pub plugin_type: String,
    /// Parameters, decoded strictly by the plugin's factory.
    pub parameters: Option<Value>,
}

/// `schedulingProfiles[]`: `{name, plugins: [{pluginRef, weight?}]}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawProfile {
    /// Profile name.
    pub name: String,
    /// Plugin references.
    #[serde(default)]
    pub plugins: Vec<RawPluginRef>,
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

/// Parses the document; errors carry serde_yaml_ng's line.
pub fn parse(yaml: &str, source: &str) -> Result<RawConfig, ConfigError> {
    let raw: RawConfig = serde_yaml_ng::from_str(yaml).map_err(|e| {
        let text = e.to_string();
        let message = match text.rfind(" at line ") {
            Some(i) => text[..i].to_string(),
            None => text,
        };
        ConfigError {
            source_name: source.into(),
            line: e.location().map(|l| l.line()),
            plugin: None,
            message,
        }
    })?;
    let err = |message: String| ConfigError {
        source_name: source.into(),
        line: None,
        plugin: None,
        message,
    };
    if let Some(v) = &raw.api_version {
        if !API_VERSIONS.contains(&v.as_str()) {
            return Err(err(format!(
                "apiVersion `{v}` is not supported, expected `{}`",
                API_VERSIONS[0]
            )));
        }
    }
    if let Some(k) = &raw.kind {
        if k != KIND {
            return Err(err(format!(
                "kind `{k}` is not supported, expected `{KIND}`"
            )));
        }
    }
    Ok(raw)
}
