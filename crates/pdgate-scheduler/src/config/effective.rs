//! The effective config (defaults injected), serialized back to YAML.

use serde::{Serialize, Serializer};
use serde_yaml_ng::Value;

/// Whole document.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Effective {
    /// Always `llm-d.ai/v1alpha1`.
    pub api_version: &'static str,
    /// Always `EndpointPickerConfig`.
    pub kind: &'static str,
    /// Every plugin, injected ones included, with all parameters.
    pub plugins: Vec<EffectivePlugin>,
    /// Every profile, with explicit weights and pickers.
    pub scheduling_profiles: Vec<EffectiveProfile>,
    /// `featureGates` as written; left out when empty.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub feature_gates: Vec<String>,
    /// `flowControl` as written; left out when absent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub flow_control: Option<Value>,
    /// The deprecated top-level `saturationDetector` as written; left out when absent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub saturation_detector: Option<Value>,
    /// `dataLayer` as written; left out when absent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data_layer: Option<Value>,
}

/// One plugin.
#[derive(Debug, Serialize)]
pub struct EffectivePlugin {
    /// Instance name.
    pub name: String,
    /// Type.
    #[serde(rename = "type")]
    pub plugin_type: String,
    /// Effective parameters; left out for plugins without any.
    #[serde(skip_serializing_if = "Value::is_null")]
    pub parameters: Value,
}

/// One profile.
#[derive(Debug, Serialize)]
pub struct EffectiveProfile {
    /// Name.
    pub name: String,
    /// References.
    pub plugins: Vec<EffectiveRef>,
}

/// One reference; `weight` only for scorers.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EffectiveRef {
    /// Plugin name.
    pub plugin_ref: String,
    /// Scorer weight (printed as an integer when integral).
    #[serde(skip_serializing_if = "Option::is_none", serialize_with = "weight")]
    pub weight: Option<f64>,
}

fn weight<S: Serializer>(w: &Option<f64>, s: S) -> Result<S::Ok, S::Error> {
    match w {
        Some(w) if w.fract() == 0.0 && w.abs() < 1e15 => s.serialize_i64(*w as i64),
        Some(w) => s.serialize_f64(*w),
        None => s.serialize_none(),
    }
}

impl Effective {
    /// As YAML text.
    pub fn to_yaml(&self) -> String {
        serde_yaml_ng::to_string(self).unwrap_or_default()
    }
}
