use super::*;
use crate::config::{load, load_all};
use crate::datalayer::engine_metrics::MetricSpec;
use std::time::Duration;

fn layer(yaml: &str) -> DataLayer {
    match load(yaml, "t.yaml", &[]) {
        Ok(l) => (*l.data_layer).clone(),
        Err(e) => panic!("{e}"),
    }
}

/// Every error as `line: message`.
fn errors(yaml: &str) -> Vec<String> {
    match load_all(yaml, "t.yaml", &[]) {
        Ok(_) => panic!("loaded"),
        Err(e) => {
            e.0.iter()
                .map(|e| format!("{}: {}", e.line.unwrap_or(0), e.message))
                .collect()
        }
    }
}

const SOURCES: &str = "plugins:\n\
    - type: queue-scorer\n\
    - name: scrape\n  type: metrics-data-source\n  parameters:\n    path: /engine/metrics\n    port: 9090\n\
    - name: names\n  type: core-metrics-extractor\n  parameters:\n    defaultEngine: sglang\n\
    - type: endpoint-notification-source\n\
    - type: models-data-source\n  parameters:\n    path: /models\n\
    - type: models-data-extractor\n\
    dataLayer:\n  sources:\n  - pluginRef: scrape\n    extractors:\n    - pluginRef: names\n\
    \x20 - pluginRef: endpoint-notification-source\n\
    \x20 - pluginRef: models-data-source\n    extractors:\n    - pluginRef: models-data-extractor\n";

#[test]
fn sources_configure_the_scrape_and_reload_from_the_effective_config() {
    let d = layer(SOURCES);
    assert_eq!(d.metrics.path, "/engine/metrics");
    assert_eq!(d.metrics.port, Some(9090));
    assert_eq!(d.models.path, "/models");
    let names = d.engines.for_labels(&Default::default());
    assert_eq!(
        names.queue,
        Some(MetricSpec::named("sglang:num_queue_reqs"))
    );
    let effective = load(SOURCES, "t.yaml", &[]).unwrap().effective_yaml;
    assert!(
        effective.contains("dataLayer:\n  sources:\n  - pluginRef: scrape\n"),
        "{effective}"
    );
    assert_eq!(layer(&effective), d);
}

#[test]
fn without_a_metrics_source_the_plugins_named_like_the_defaults_are_injected() {
    assert_eq!(
        layer("plugins:\n- type: queue-scorer\n"),
        DataLayer::default()
    );
    let d = layer(
        "plugins:\n- type: queue-scorer\n- type: metrics-data-source\n  parameters:\n    \
         path: /m\n    interval: 1s\n",
    );
    assert_eq!(d.metrics.path, "/m");
    assert_eq!(
        d.metrics_period(Duration::from_millis(200)),
        Duration::from_secs(1)
    );
    assert_eq!(*d.engines, EngineMetrics::default());
    // An endpoint source alone still gets the default metrics source.
    let d = layer(
        "plugins:\n- type: queue-scorer\n- type: endpoint-notification-source\n\
         dataLayer:\n  sources:\n  - pluginRef: endpoint-notification-source\n",
    );
    assert_eq!(d.metrics, MetricsSource::default());
}

#[test]
fn wiring_errors_name_the_field_and_line() {
    let base = "plugins:\n- type: queue-scorer\n- type: metrics-data-source\n\
                - type: core-metrics-extractor\n- type: endpoint-notification-source\n";
    // Unknown key: serde's message and line.
    let e = errors(&format!(
        "{base}dataLayer:\n  sources:\n  - pluginRef: metrics-data-source\n    extractor: []\n"
    ));
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(
        e[0].starts_with("9: dataLayer.sources[0]: unknown field `extractor`"),
        "{e:?}"
    );
    let e = errors(&format!(
        "{base}dataLayer:\n  sources:\n  - pluginRef: metrics-data-source\n    extractors:\n    \
         - pluginRef: nothing\n  - pluginRef: queue-scorer\n  \
         - pluginRef: endpoint-notification-source\n    extractors:\n    \
         - pluginRef: core-metrics-extractor\n"
    ));
    assert_eq!(
        e,
        [
            "10: dataLayer.sources[0].extractors[0].pluginRef: `nothing` names no plugin",
            "11: dataLayer.sources[1].pluginRef: plugin `queue-scorer` (type `queue-scorer`) \
             is not a data source",
            "14: dataLayer.sources[2].extractors[0].pluginRef: plugin \
             `core-metrics-extractor` (type `core-metrics-extractor`) cannot extract from \
             `endpoint-notification-source` (type `endpoint-notification-source`, which takes \
             one of `topology-extractor`, `mm-embeddings-cache-producer`, \
             `precise-prefix-cache-producer`)",
        ]
    );
}

#[test]
fn what_pdgate_cannot_honour_is_refused_with_the_reason() {
    let e = errors(
        "plugins:\n- type: queue-scorer\n- type: metrics-data-source\n\
         - {name: m2, type: metrics-data-source}\n- type: core-metrics-extractor\n\
         dataLayer:\n  sources:\n  - pluginRef: metrics-data-source\n    extractors:\n    \
         - pluginRef: core-metrics-extractor\n  - pluginRef: m2\n    extractors: []\n",
    );
    assert_eq!(
        e,
        [
            "11: dataLayer.sources[1].pluginRef: a second metrics-data-source (`m2`): pdgate \
          keeps one set of engine gauges per endpoint, read from one metrics source"
        ]
    );
    let e = errors(
        "plugins:\n- type: queue-scorer\n- type: metrics-data-source\ndataLayer:\n  \
         sources:\n  - pluginRef: metrics-data-source\n",
    );
    assert_eq!(
        e,
        [
            "6: dataLayer.sources[0]: metrics-data-source `metrics-data-source` has no \
          core-metrics-extractor: pdgate reads the engine gauges from every metrics scrape"
        ]
    );
    let e = errors("plugins:\n- type: queue-scorer\ndataLayer:\n  injectDefaults: false\n");
    assert_eq!(e.len(), 1);
    assert!(
        e[0].starts_with("4: dataLayer.injectDefaults: `false` leaves no metrics-data-source"),
        "{e:?}"
    );
    // A metrics source no entry uses: its parameters would be dropped.
    let e = errors(
        "plugins:\n- type: queue-scorer\n- name: mine\n  type: metrics-data-source\n  \
         parameters: {path: /x}\n",
    );
    assert_eq!(
        e,
        [
            "3: not used: no dataLayer.sources entry references it, so its parameters would \
          not apply"
        ]
    );
    let e = errors(
        "plugins:\n- type: queue-scorer\ndataLayer:\n  discovery:\n    pluginRef: queue-scorer\n  \
         crossReplicaSyncInterval: 1s\n",
    );
    assert_eq!(
        e,
        [
            "5: dataLayer.discovery.pluginRef: plugin `queue-scorer` (type `queue-scorer`) is \
             not an endpoint discovery plugin: pdgate finds endpoints itself (--endpoint, \
             --endpoints, --pool-name or --pod-selector)",
            "6: dataLayer.crossReplicaSyncInterval: not supported: pdgate replicas share no \
             state",
        ]
    );
}

#[test]
fn a_refused_source_is_reported_once_with_its_reason() {
    let e = errors(
        "plugins:\n- type: queue-scorer\n- name: gpu\n  type: dcgm-data-source\n\
         - type: dcgm-extractor\ndataLayer:\n  sources:\n  - pluginRef: gpu\n    \
         extractors:\n    - pluginRef: dcgm-extractor\n",
    );
    assert_eq!(
        e,
        [
            "3: unsupported plugin type `dcgm-data-source` (reads NVIDIA DCGM hardware GPU \
             counters, which pdgate does not collect)",
            "5: unsupported plugin type `dcgm-extractor` (extracts NVIDIA DCGM hardware GPU \
             counters, which pdgate does not collect)",
        ]
    );
}
