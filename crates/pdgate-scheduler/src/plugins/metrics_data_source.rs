//! `metrics-data-source` — where and how often pdgate reads each engine's Prometheus metrics.
//!
//! - **Type:** `metrics-data-source`
//! - **Extension points:** data-layer polling source (`dataLayer.sources[].pluginRef`), feeding
//!   a `core-metrics-extractor`. Injected with default parameters when no source of this type
//!   is configured, unless `dataLayer.injectDefaults: false` (as llm-d does).
//! - **Parameters:** those of every HTTP source ([`http_source`]), with:
//!   - `path` (default [`DEFAULT_PATH`] `/metrics`): the URL path scraped.
//!   - `port` (int 1..=65535, default none): scrape `host:port` instead of the endpoint's own
//!     port (a metrics port apart from the serving one). Not for data-parallel pools whose
//!     ranks each export their own metrics.
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

use crate::datalayer::DataPlugin;
pub use crate::datalayer::{
    metrics_period as period, MetricsSource, DEFAULT_METRICS_PATH as DEFAULT_PATH, MIN_INTERVAL,
};
use crate::plugin_build::{BuildCtx, Built, PluginError, PluginType, Stage};
use crate::plugins::http_source;
use serde_yaml_ng::Value;

/// Registry entry.
pub const TYPE: PluginType = PluginType {
    name: "metrics-data-source",
    stage: Stage::Producer,
    build,
};

fn build(params: Option<&Value>, _: &mut BuildCtx<'_>) -> Result<Built, PluginError> {
    let c = http_source::check(params, TYPE.name, DEFAULT_PATH, true)?;
    let source = MetricsSource {
        path: c.path,
        port: c.port,
        interval: c.interval,
    };
    Ok(Built {
        data: Some(DataPlugin::MetricsSource(source)),
        params: c.effective,
        ..Built::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

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
