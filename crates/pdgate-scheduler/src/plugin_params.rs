//! Decoding a plugin's `parameters`: strict serde decoding into the plugin's own parameter
//! type ([`decode`]), the effective parameters shown by `check-config` ([`effective`]) and the
//! error a factory reports ([`PluginError`]).
//!
//! A leaf: it imports nothing of the crate, so that any module (plugins, the flow-control
//! policies, the data-layer settings) may report parameter errors without importing the
//! registry or the config loader.

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_yaml_ng::Value;

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
