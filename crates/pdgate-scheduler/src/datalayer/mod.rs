//! What the engine scraper reads, as the data-layer plugins configure it (llm-d's
//! `dataLayer`): where and how often engine metrics and model lists are read
//! ([`MetricsSource`], [`ModelsSource`]) and which metric names give the load gauges
//! ([`engine_metrics::EngineMetrics`]). The plugins that build these are
//! `metrics-data-source`, `models-data-source`, `core-metrics-extractor`,
//! `models-data-extractor` and `endpoint-notification-source` ([`crate::plugins`]); the config
//! loader checks the `dataLayer` section and assembles the [`DataLayer`].
//!
//! Below the plugins and the config: it imports neither.

pub mod engine_metrics;

use engine_metrics::EngineMetrics;
use std::sync::Arc;
use std::time::Duration;

/// What a data-layer plugin is (the `data` extension point of a built plugin).
#[derive(Debug, Clone)]
pub enum DataPlugin {
    /// `metrics-data-source`: where and how often engine metrics are read.
    MetricsSource(MetricsSource),
    /// `core-metrics-extractor`: which metric names give the gauges, per engine type.
    MetricsExtractor(Arc<EngineMetrics>),
    /// `models-data-source`: where and how often model lists are read.
    ModelsSource(ModelsSource),
    /// `models-data-extractor`.
    ModelsExtractor,
    /// `endpoint-notification-source`.
    EndpointEvents,
}

impl DataPlugin {
    /// True for a data source (`metrics-data-source`, `models-data-source`,
    /// `endpoint-notification-source`); false for an extractor.
    pub fn is_source(&self) -> bool {
        matches!(
            self,
            DataPlugin::MetricsSource(_) | DataPlugin::ModelsSource(_) | DataPlugin::EndpointEvents
        )
    }
}

/// The data layer as configured: what the engine scraper reads.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DataLayer {
    /// The metrics scrape (path, port, period).
    pub metrics: MetricsSource,
    /// The engine-type → metric-names mapping of the metrics extractor.
    pub engines: Arc<EngineMetrics>,
    /// The model-list read (path, period).
    pub models: ModelsSource,
}

impl DataLayer {
    /// The metrics scrape period with `--scrape-interval` `base`
    /// ([`MetricsSource::period`]).
    pub fn metrics_period(&self, base: Duration) -> Duration {
        self.metrics.period(base)
    }

    /// Every how many metrics scrapes the model list is re-read ([`ModelsSource::every`]),
    /// with `--scrape-interval` `base` and pdgate's default cadence `default`.
    pub fn models_every(&self, base: Duration, default: u32) -> u32 {
        self.models.every(self.metrics_period(base), default)
    }
}

/// Default `path` of a `metrics-data-source`.
pub const DEFAULT_METRICS_PATH: &str = "/metrics";
/// Shortest scrape period an `interval` gives (llm-d's minimum base tick, 50 ms).
pub const MIN_INTERVAL: Duration = Duration::from_millis(50);

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
            path: DEFAULT_METRICS_PATH.into(),
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
        metrics_period(self.interval, base)
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
pub fn metrics_period(interval: Option<Duration>, base: Duration) -> Duration {
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

/// Default `path` of a `models-data-source`.
pub const DEFAULT_MODELS_PATH: &str = "/v1/models";

/// What a models source tells the scraper.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelsSource {
    /// URL path, e.g. `/v1/models`.
    pub path: String,
    /// Re-read period; `None` = pdgate's cadence.
    pub interval: Option<Duration>,
}

impl Default for ModelsSource {
    fn default() -> Self {
        ModelsSource {
            path: DEFAULT_MODELS_PATH.into(),
            interval: None,
        }
    }
}

impl ModelsSource {
    /// Every how many metrics scrapes (of period `scrape`) the list is re-read: `default`
    /// without an interval, else `interval / scrape` rounded, at least 1.
    pub fn every(&self, scrape: Duration, default: u32) -> u32 {
        match self.interval {
            None => default.max(1),
            Some(iv) => {
                let n = (iv.as_secs_f64() / scrape.as_secs_f64().max(1e-9)).round();
                n.clamp(1.0, u32::MAX as f64) as u32
            }
        }
    }
}
