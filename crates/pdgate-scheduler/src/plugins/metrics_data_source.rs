//! `metrics-data-source` — where and how often pdgate reads each engine's Prometheus metrics.
//!
//! - **Type:** `metrics-data-source`
//! - **Extension points:** data-layer polling source (`dataLayer.sources[].pluginRef`), feeding
//!   a `core-metrics-extractor`. Injected with default parameters when no source of this type
//!   is configured, unless `dataLayer.injectDefaults: false` (as llm-d does).
//! - **Parameters:**
//!   - `scheme` (default [`DEFAULT_SCHEME`] `http`): only `http`; `https` is refused.
//!   - `path` (default [`DEFAULT_PATH`] `/metrics`): the URL path scraped; must start with `/`.
//!   - `port` (int 1..=65535, default none): scrape `host:port` instead of the endpoint's own
//!     port (a metrics port apart from the serving one). Not for data-parallel pools whose
//!     ranks each export their own metrics.
//!   - `insecureSkipVerify` (default [`DEFAULT_INSECURE_SKIP_VERIFY`] `true`), `caCertPath`,
//!     `clientCertPath`, `clientKeyPath` (default empty): TLS settings, only used with `https`;
//!     with `http` they are accepted and have no effect, as in llm-d.
//!   - `interval` (Go duration, default empty = every `--scrape-interval`): the scrape period;
//!     longer than `--scrape-interval` it is rounded to the nearest multiple of it, shorter it
//!     replaces it (at least [`MIN_INTERVAL`]) — llm-d's base-tick rule.
//! - **Inputs:** each endpoint's address (`host:port`).
//! - **Outputs:** [`MetricsSource`]: the scraper GETs `http://{host}:{port or own}{path}` every
//!   interval (bounded by `--scrape-timeout`) and hands the body to the extractor.
//! - **Limitations:** no `https` (pdgate's scraper speaks plain HTTP); one metrics source per
//!   config (pdgate keeps one set of gauges per endpoint); the scrape timeout is
//!   `--scrape-timeout` (llm-d: 1 s per poll).
//! - **Source:** llm-d-router `pkg/epp/framework/plugins/datalayer/source/metrics/datasource.go`,
//!   `source/http/datasource.go`.

use crate::config::DataPlugin;
use crate::registry::{decode, effective, BuildCtx, Built, PluginError, PluginType, Stage};
use serde::{Deserialize, Serialize};
use serde_yaml_ng::Value;
use std::time::Duration;

/// Registry entry.
pub const TYPE: PluginType = PluginType {
    name: "metrics-data-source",
    stage: Stage::Producer,
    build,
};

/// Default `scheme`.
pub const DEFAULT_SCHEME: &str = "http";
/// Default `path`.
pub const DEFAULT_PATH: &str = "/metrics";
/// Default `insecureSkipVerify`.
pub const DEFAULT_INSECURE_SKIP_VERIFY: bool = true;
/// Shortest scrape period an `interval` gives (llm-d's minimum base tick, 50 ms).
pub const MIN_INTERVAL: Duration = Duration::from_millis(50);

fn default_scheme() -> String {
    DEFAULT_SCHEME.into()
}

fn default_path() -> String {
    DEFAULT_PATH.into()
}

fn default_skip_verify() -> bool {
    DEFAULT_INSECURE_SKIP_VERIFY
}

/// Parameters as written (shared with `models-data-source`, which has no `port`).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Params {
    /// `http` (or `https`, refused).
    #[serde(default = "default_scheme")]
    pub scheme: String,
    /// URL path.
    #[serde(default = "default_path")]
    pub path: String,
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
    /// Scrape period, a Go duration; empty = every base tick.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub interval: String,
}

/// What a metrics source tells the scraper.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetricsSource {
    /// URL path, e.g. `/metrics`.
    pub path: String,
    /// Port replacing the endpoint's own.
    pub port: Option<u16>,
    /// Scrape period; `None` = every `--scrape-interval`.
    pub interval: Option<Duration>,
}

impl Default for MetricsSource {
    fn default() -> Self {
        MetricsSource {
            path: DEFAULT_PATH.into(),
            port: None,
            interval: None,
        }
    }
}

impl MetricsSource {
    /// The scrape period with base tick `base` (`--scrape-interval`): `base` without an
    /// interval (or a zero one); a shorter interval replaces it (at least [`MIN_INTERVAL`]);
    /// a longer one is rounded to the nearest multiple of `base`.
    pub fn period(&self, base: Duration) -> Duration {
        period(self.interval, base)
    }

    /// The address to scrape for an endpoint at `address` (`host:port`, `[v6]:port`): the
    /// same, or with the port replaced by `port`.
    pub fn address(&self, address: &str) -> String {
        match (self.port, address.rsplit_once(':')) {
            (Some(p), Some((host, _))) => format!("{host}:{p}"),
            _ => address.to_string(),
        }
    }
}

/// [`MetricsSource::period`] of an optional `interval`.
pub fn period(interval: Option<Duration>, base: Duration) -> Duration {
    match interval {
        None => base,
        Some(iv) if iv.is_zero() => base,
        Some(iv) if iv <= base => iv.max(MIN_INTERVAL).min(base),
        Some(iv) => {
            let n = (iv.as_secs_f64() / base.as_secs_f64()).round().max(1.0);
            base.saturating_mul(n as u32)
        }
    }
}

/// Checks the fields both HTTP sources share; returns the interval.
///
/// Errors: `scheme` not `http` (`https` is refused, anything else is llm-d's error), `path`
/// not starting with `/`, `interval` not a Go duration.
pub fn check_http(
    scheme: &str,
    path: &str,
    interval: &str,
) -> Result<Option<Duration>, PluginError> {
    match scheme {
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
    if !path.starts_with('/') || path.contains(char::is_whitespace) {
        return Err(PluginError::invalid(
            "path",
            format!("`{path}` must start with `/` and hold no spaces"),
        ));
    }
    if interval.is_empty() {
        return Ok(None);
    }
    crate::flow::duration::parse(interval)
        .map(Some)
        .map_err(|e| PluginError::invalid("interval", format!("invalid interval: {e}")))
}

fn build(params: Option<&Value>, _: &mut BuildCtx<'_>) -> Result<Built, PluginError> {
    let p: Params = decode(params)?;
    let interval = check_http(&p.scheme, &p.path, &p.interval)?;
    let port = match p.port {
        None => None,
        Some(n) => Some(u16::try_from(n).ok().filter(|n| *n > 0).ok_or_else(|| {
            PluginError::invalid(
                "port",
                format!("invalid port {n}: must be between 1 and 65535"),
            )
        })?),
    };
    let source = MetricsSource {
        path: p.path.clone(),
        port,
        interval,
    };
    Ok(Built {
        data: Some(DataPlugin::MetricsSource(source)),
        params: effective(&p),
        ..Built::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(yaml: &str) -> Result<(MetricsSource, Value), PluginError> {
        let v: Value = serde_yaml_ng::from_str(yaml).unwrap();
        let mut ctx = BuildCtx {
            built: &[],
            profiles: &[],
            next_slot: 0,
        };
        let b = build(Some(&v), &mut ctx)?;
        match b.data {
            Some(DataPlugin::MetricsSource(s)) => Ok((s, b.params)),
            _ => panic!("not a metrics source"),
        }
    }

    #[test]
    fn defaults_and_effective_parameters() {
        let (s, params) = source("{}").unwrap();
        assert_eq!(s, MetricsSource::default());
        assert_eq!(
            serde_yaml_ng::to_string(&params).unwrap(),
            "scheme: http\npath: /metrics\ninsecureSkipVerify: true\n"
        );
        let (s, _) = source(
            "path: /engine/metrics\nport: 9090\ninterval: 1s\ninsecureSkipVerify: false\n\
             caCertPath: /ca.pem\n",
        )
        .unwrap();
        assert_eq!(
            s,
            MetricsSource {
                path: "/engine/metrics".into(),
                port: Some(9090),
                interval: Some(Duration::from_secs(1)),
            }
        );
        assert_eq!(s.address("10.0.0.1:8000"), "10.0.0.1:9090");
        assert_eq!(s.address("[::1]:8000"), "[::1]:9090");
        assert_eq!(MetricsSource::default().address("h:8000"), "h:8000");
    }

    #[test]
    fn interval_rounds_to_the_base_tick_like_llm_d() {
        let ms = Duration::from_millis;
        assert_eq!(period(None, ms(200)), ms(200));
        assert_eq!(period(Some(ms(0)), ms(200)), ms(200));
        // Shorter than the base tick: it becomes the tick, at least 50 ms.
        assert_eq!(period(Some(ms(100)), ms(200)), ms(100));
        assert_eq!(period(Some(ms(10)), ms(200)), ms(50));
        assert_eq!(period(Some(ms(10)), ms(20)), ms(20));
        // Longer: the nearest multiple (1000/200 = 5; 1100/200 = 5.5 → 6; 1050/200 = 5.25 → 5).
        assert_eq!(period(Some(ms(1000)), ms(200)), ms(1000));
        assert_eq!(period(Some(ms(1100)), ms(200)), ms(1200));
        assert_eq!(period(Some(ms(1050)), ms(200)), ms(1000));
    }

    #[test]
    fn bad_parameters_name_their_field() {
        let err = |y: &str| {
            let e = source(y).unwrap_err();
            (e.path.unwrap_or_default(), e.message)
        };
        assert_eq!(
            err("port: 0\n"),
            (
                "port".into(),
                "invalid port 0: must be between 1 and 65535".into()
            )
        );
        assert_eq!(
            err("port: 70000\n").1,
            "invalid port 70000: must be between 1 and 65535"
        );
        let (f, m) = err("scheme: https\n");
        assert_eq!(f, "scheme");
        assert!(m.starts_with("`https` is not supported"), "{m}");
        assert_eq!(
            err("scheme: ftp\n").1,
            "unsupported scheme: ftp (expected `http`)"
        );
        assert_eq!(
            err("path: metrics\n"),
            (
                "path".into(),
                "`metrics` must start with `/` and hold no spaces".into()
            )
        );
        let (f, m) = err("interval: 5\n");
        assert_eq!(f, "interval");
        assert!(m.contains("without a unit"), "{m}");
        let (f, m) = err("bogus: 1\n");
        assert_eq!(f, "");
        assert!(m.starts_with("unknown field `bogus`"), "{m}");
    }
}
