//! Scheduler plugins' own metrics (e.g. `pdgate_revision_share{revision}`), exported through
//! the router's Prometheus registry.
//!
//! Plugins report current values ([`PluginMetric`]); on every scrape each family is reset and
//! refilled, so a series a plugin stops reporting (a revision that left) disappears.

use parking_lot::Mutex;
use pdgate_scheduler::plugin::{MetricKind, PluginMetric};
use prometheus::{CounterVec, GaugeVec, Opts, Registry};
use std::collections::HashMap;

enum Family {
    Gauge(GaugeVec),
    Counter(CounterVec),
}

/// The plugin metric families registered so far, by name.
pub struct PluginFamilies {
    registry: Registry,
    families: Mutex<HashMap<&'static str, Family>>,
}

impl PluginFamilies {
    /// Families registered in `registry` on first sight.
    pub fn new(registry: Registry) -> Self {
        PluginFamilies {
            registry,
            families: Mutex::new(HashMap::new()),
        }
    }

    /// Replaces every family's series with `samples`. A sample whose label names differ
    /// from its family's first sample, or whose name clashes with a router metric, is
    /// dropped (logged at debug level).
    pub fn set(&self, samples: &[PluginMetric]) {
        let mut families = self.families.lock();
        for f in families.values() {
            match f {
                Family::Gauge(g) => g.reset(),
                Family::Counter(c) => c.reset(),
            }
        }
        for s in samples {
            if !families.contains_key(s.name) {
                match self.register(s) {
                    Ok(f) => {
                        families.insert(s.name, f);
                    }
                    Err(e) => {
                        tracing::debug!(metric = s.name, error = %e, "plugin metric dropped");
                        continue;
                    }
                }
            }
            let values: Vec<&str> = s.labels.iter().map(|(_, v)| v.as_str()).collect();
            let result = match &families[s.name] {
                Family::Gauge(g) => g
                    .get_metric_with_label_values(&values)
                    .map(|m| m.set(s.value)),
                Family::Counter(c) => c
                    .get_metric_with_label_values(&values)
                    .map(|m| m.inc_by(s.value.max(0.0))),
            };
            if let Err(e) = result {
                tracing::debug!(metric = s.name, error = %e, "plugin metric sample dropped");
            }
        }
    }

    fn register(&self, s: &PluginMetric) -> prometheus::Result<Family> {
        let names: Vec<&str> = s.labels.iter().map(|(k, _)| *k).collect();
        let opts = Opts::new(s.name, s.help);
        let family = match s.kind {
            MetricKind::Gauge => Family::Gauge(GaugeVec::new(opts, &names)?),
            MetricKind::Counter => Family::Counter(CounterVec::new(opts, &names)?),
        };
        match &family {
            Family::Gauge(g) => self.registry.register(Box::new(g.clone()))?,
            Family::Counter(c) => self.registry.register(Box::new(c.clone()))?,
        }
        Ok(family)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus::{Encoder, TextEncoder};

    fn share(rev: &str, v: f64) -> PluginMetric {
        PluginMetric {
            name: "pdgate_revision_share",
            help: "Share of new requests per revision.",
            kind: MetricKind::Gauge,
            labels: vec![("revision", rev.to_string())],
            value: v,
        }
    }

    fn text(r: &Registry) -> String {
        let mut out = Vec::new();
        TextEncoder::new().encode(&r.gather(), &mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn series_follow_the_latest_samples_and_vanish_when_not_reported() {
        let r = Registry::new();
        let f = PluginFamilies::new(r.clone());
        let misses = PluginMetric {
            name: "pdgate_revision_strict_misses_total",
            help: "Strict revision headers naming an uncovered revision.",
            kind: MetricKind::Counter,
            labels: vec![],
            value: 3.0,
        };
        f.set(&[share("a", 0.6), share("b", 0.4), misses.clone()]);
        let t = text(&r);
        assert!(
            t.contains("pdgate_revision_share{revision=\"a\"} 0.6"),
            "{t}"
        );
        assert!(
            t.contains("pdgate_revision_share{revision=\"b\"} 0.4"),
            "{t}"
        );
        assert!(t.contains("pdgate_revision_strict_misses_total 3"), "{t}");
        f.set(&[share("a", 1.0), misses]);
        let t = text(&r);
        assert!(t.contains("pdgate_revision_share{revision=\"a\"} 1"), "{t}");
        assert!(!t.contains("revision=\"b\""), "{t}");
        assert!(t.contains("pdgate_revision_strict_misses_total 3"), "{t}");
    }
}
