//! The parameters every HTTP polling data source shares (`metrics-data-source`,
//! `models-data-source`), decoded and checked in one place.
//!
//! - `scheme` (default [`DEFAULT_SCHEME`] `http`): only `http`; `https` is refused, anything
//!   else is llm-d's "unsupported scheme".
//! - `path` (default: the source's own, e.g. `/metrics`): must start with `/`, no spaces.
//! - `port` (int 1..=65535, default none): only for sources that scrape a port of their own.
//! - `insecureSkipVerify` (default [`DEFAULT_INSECURE_SKIP_VERIFY`] `true`), `caCertPath`,
//!   `clientCertPath`, `clientKeyPath` (default empty): TLS settings, only used with `https`;
//!   with `http` they are accepted and have no effect, as in llm-d.
//! - `interval` (Go duration, default empty): the polling period; each source says how it
//!   maps onto pdgate's scrape tick.
//!
//! Source: llm-d-router `pkg/epp/framework/plugins/datalayer/source/http/datasource.go`.

use crate::plugin_params::{decode, effective, PluginError};
use serde::{Deserialize, Serialize};
use serde_yaml_ng::Value;
use std::time::Duration;

/// Default `scheme`.
pub const DEFAULT_SCHEME: &str = "http";
/// Default `insecureSkipVerify`.
pub const DEFAULT_INSECURE_SKIP_VERIFY: bool = true;

fn default_scheme() -> String {
    DEFAULT_SCHEME.into()
}

fn default_skip_verify() -> bool {
    DEFAULT_INSECURE_SKIP_VERIFY
}

/// Parameters as written.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Params {
    /// `http` (or `https`, refused).
    #[serde(default = "default_scheme")]
    pub scheme: String,
    /// URL path; `None` until the source's default is filled in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Port overriding the endpoint's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<i64>,
    /// TLS: skip server verification (https only).
    #[serde(default = "default_skip_verify")]
    pub insecure_skip_verify: bool,
    /// TLS: CA bundle (https only).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub ca_cert_path: String,
    /// TLS: client certificate (https only).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub client_cert_path: String,
    /// TLS: client key (https only).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub client_key_path: String,
    /// Polling period, a Go duration; empty = the source's own cadence.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub interval: String,
}

/// What a source's parameters come to once checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checked {
    /// URL path, e.g. `/metrics`.
    pub path: String,
    /// Port replacing the endpoint's own.
    pub port: Option<u16>,
    /// Polling period; `None` = the source's own cadence.
    pub interval: Option<Duration>,
    /// The effective parameters (defaults filled in), for `check-config`.
    pub effective: Value,
}

/// Decodes and checks `params` for the source `type_name`, whose default path is
/// `default_path`; `with_port` says whether it takes `port`.
///
/// Errors: an unknown field (`port` too, without `with_port`), `scheme` not `http`, `path`
/// not starting with `/` or holding a space, `port` outside 1..=65535, `interval` not a Go
/// duration; each names its field.
pub fn check(
    params: Option<&Value>,
    type_name: &str,
    default_path: &str,
    with_port: bool,
) -> Result<Checked, PluginError> {
    let mut p: Params = decode(params)?;
    if p.port.is_some() && !with_port {
        return Err(PluginError {
            path: None,
            key: Some("port".into()),
            message: format!("unknown field `port`: {type_name} reads the endpoint's own port"),
            missing: None,
        });
    }
    match p.scheme.as_str() {
        "http" => {}
        "https" => return Err(PluginError::invalid(
            "scheme",
            "`https` is not supported: pdgate reads engine metrics and models over plain HTTP only",
        )),
        other => {
            return Err(PluginError::invalid(
                "scheme",
                format!("unsupported scheme: {other} (expected `http`)"),
            ))
        }
    }
    let path = p.path.get_or_insert_with(|| default_path.into()).clone();
    if !path.starts_with('/') || path.contains(char::is_whitespace) {
        return Err(PluginError::invalid(
            "path",
            format!("`{path}` must start with `/` and hold no spaces"),
        ));
    }
    let port = match p.port {
        None => None,
        Some(n) => Some(u16::try_from(n).ok().filter(|n| *n > 0).ok_or_else(|| {
            PluginError::invalid(
                "port",
                format!("invalid port {n}: must be between 1 and 65535"),
            )
        })?),
    };
    let interval = if p.interval.is_empty() {
        None
    } else {
        Some(
            crate::flow::duration::parse(&p.interval)
                .map_err(|e| PluginError::invalid("interval", format!("invalid interval: {e}")))?,
        )
    };
    Ok(Checked {
        path,
        port,
        interval,
        effective: effective(&p),
    })
}
