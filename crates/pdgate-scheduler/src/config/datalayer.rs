//! The `dataLayer` section of an EndpointPickerConfig: which data sources feed which
//! extractors (llm-d-router `apix/config/v1alpha1` `DataLayerConfig`,
//! `pkg/epp/config/loader/{configloader.go,defaults.go}`, `pkg/epp/datalayer/runtime.go`).
//!
//! ```yaml
//! dataLayer:
//!   injectDefaults: true          # false: no default metrics source (refused, see below)
//!   sources:
//!   - pluginRef: metrics-data-source
//!     extractors:
//!     - pluginRef: core-metrics-extractor
//!   - pluginRef: endpoint-notification-source
//!     extractors:
//!     - pluginRef: precise-prefix-cache-producer
//! ```
//!
//! Decoded strictly (unknown keys are errors, with their line). What it becomes is a
//! [`DataLayer`]: the path, port and period of the engines' metrics scrape, the engine-type →
//! metric-name mapping of its extractor, and the path and period of the model-list read.
//!
//! As in llm-d, when no source is a `metrics-data-source` (and `injectDefaults` is not
//! `false`), a source `metrics-data-source` with extractor `core-metrics-extractor` is added,
//! using the plugins of those names when the config declares them (else defaults).
//!
//! Checked at load, each problem reported with its line: every `pluginRef` names a declared
//! plugin (a plugin that failed is not reported again); a source is a data source and its
//! extractors fit it (a metrics source takes one `core-metrics-extractor`, a models source a
//! `models-data-extractor`, an endpoint source the plugins of [`ENDPOINT_EXTRACTORS`]); no
//! extractor type twice on one source (llm-d's rule); a plugin listed once as a source.
//! Refused because pdgate cannot honour them: a second metrics or models source (pdgate keeps
//! one set of gauges and one model list per endpoint), a metrics source without its extractor
//! or `injectDefaults: false` without a metrics source (pdgate always reads engine load), a
//! metrics source or extractor that no source entry uses (its parameters would not apply),
//! `discovery` (pdgate discovers endpoints from its own flags), `peerDiscovery`,
//! `crossReplicaSyncerPluginRef` and `crossReplicaSyncInterval` (pdgate replicas share no
//! state).

use super::lines;
use super::loader::Loader;
use crate::datalayer::engine_metrics::EngineMetrics;
use crate::datalayer::{DataLayer, DataPlugin, MetricsSource, ModelsSource};
use serde::Deserialize;
use serde_yaml_ng::Value;
use std::sync::Arc;

/// Plugin types that take endpoint events (llm-d `EndpointExtractor`s): the only extractors an
/// `endpoint-notification-source` accepts.
pub const ENDPOINT_EXTRACTORS: &[&str] = &[
    "topology-extractor",
    "mm-embeddings-cache-producer",
    "precise-prefix-cache-producer",
];

#[derive(Deserialize)]
struct TypedDoc {
    #[serde(rename = "dataLayer")]
    data_layer: Option<RawDataLayer>,
}

#[derive(Deserialize)]
struct VerbatimDoc {
    #[serde(rename = "dataLayer")]
    data_layer: Option<Value>,
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawDataLayer {
    inject_defaults: Option<bool>,
    #[serde(default)]
    sources: Vec<RawSource>,
    discovery: Option<RawRef>,
    peer_discovery: Option<RawRef>,
    cross_replica_syncer_plugin_ref: Option<String>,
    cross_replica_sync_interval: Option<Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawSource {
    plugin_ref: String,
    #[serde(default)]
    extractors: Vec<RawRef>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawRef {
    plugin_ref: String,
}

/// What a `pluginRef` names.
enum Found<'b> {
    /// A built plugin: its type and data extension point.
    Built(&'b str, Option<&'b DataPlugin>),
    /// A plugin whose failure was reported already.
    Failed,
    /// Nothing.
    Missing,
}

/// Reads `dataLayer` and resolves it against the built plugins; records every problem (with
/// its line) and returns `None` then. On success: the data layer and the section as written
/// (for the effective config).
pub(super) fn resolve(ld: &mut Loader<'_>) -> Option<(DataLayer, Option<Value>)> {
    let yaml = ld.yaml;
    let section = match serde_yaml_ng::from_str::<TypedDoc>(yaml) {
        Ok(d) => d.data_layer.unwrap_or_default(),
        Err(e) => {
            let msg = e.to_string();
            let msg = msg.rfind(" at line ").map_or(msg.as_str(), |i| &msg[..i]);
            ld.report(e.location().map(|l| l.line()), None, msg.to_string());
            return None;
        }
    };
    let verbatim = serde_yaml_ng::from_str::<VerbatimDoc>(yaml)
        .ok()
        .and_then(|d| d.data_layer);
    let all = 0..yaml.lines().count();
    let line = |path: &str| lines::find_path(yaml, &all, path);
    let mut errors: Vec<(Option<usize>, String)> = Vec::new();
    let mut err =
        |path: &str, message: String| errors.push((line(path), format!("{path}: {message}")));
    let find = |name: &str| -> Found<'_> {
        match ld.built.iter().find(|(n, _, _)| n == name) {
            Some((_, t, b)) => Found::Built(t, b.data.as_ref()),
            None if ld.failed.iter().any(|f| f == name) => Found::Failed,
            None => Found::Missing,
        }
    };

    // Fields pdgate cannot honour.
    if let Some(d) = &section.discovery {
        let field = "dataLayer.discovery.pluginRef";
        match find(&d.plugin_ref) {
            Found::Failed => {}
            Found::Missing => err(field, format!("`{}` names no plugin", d.plugin_ref)),
            Found::Built(t, _) => err(
                field,
                format!(
                    "plugin `{}` (type `{t}`) is not an endpoint discovery plugin: pdgate finds \
                     endpoints itself (--endpoint, --endpoints, --pool-name or --pod-selector)",
                    d.plugin_ref
                ),
            ),
        }
    }
    let no_shared_state = "not supported: pdgate replicas share no state";
    if let Some(p) = &section.peer_discovery {
        if !matches!(find(&p.plugin_ref), Found::Failed) {
            err("dataLayer.peerDiscovery", no_shared_state.into());
        }
    }
    let syncer_failed = match &section.cross_replica_syncer_plugin_ref {
        Some(r) => {
            let failed = matches!(find(r), Found::Failed);
            if !failed {
                err(
                    "dataLayer.crossReplicaSyncerPluginRef",
                    no_shared_state.into(),
                );
            }
            failed
        }
        None => false,
    };
    if section.cross_replica_sync_interval.is_some() && !syncer_failed {
        err("dataLayer.crossReplicaSyncInterval", no_shared_state.into());
    }

    // Sources and their extractors.
    let mut referenced: Vec<&str> = Vec::new();
    let mut metrics: Option<(MetricsSource, Option<Arc<EngineMetrics>>)> = None;
    let mut models: Option<ModelsSource> = None;
    let mut has_metrics_source = false;
    for (i, s) in section.sources.iter().enumerate() {
        let field = format!("dataLayer.sources[{i}].pluginRef");
        let name = s.plugin_ref.as_str();
        if referenced.contains(&name) {
            err(&field, format!("plugin `{name}` is listed twice"));
            continue;
        }
        referenced.push(name);
        let kind = match find(name) {
            Found::Failed => continue,
            Found::Missing => {
                err(&field, format!("`{name}` names no plugin"));
                continue;
            }
            Found::Built(t, Some(k)) if k.is_source() => (t, k),
            Found::Built(t, _) => {
                err(
                    &field,
                    format!("plugin `{name}` (type `{t}`) is not a data source"),
                );
                continue;
            }
        };
        let (source_type, source) = kind;
        let mut seen_types: Vec<&str> = Vec::new();
        let mut extractor: Option<Arc<EngineMetrics>> = None;
        let mut extractor_failed = false;
        for (j, e) in s.extractors.iter().enumerate() {
            let efield = format!("dataLayer.sources[{i}].extractors[{j}].pluginRef");
            let ename = e.plugin_ref.as_str();
            referenced.push(ename);
            let (etype, edata) = match find(ename) {
                Found::Failed => {
                    extractor_failed = true;
                    continue;
                }
                Found::Missing => {
                    err(&efield, format!("`{ename}` names no plugin"));
                    extractor_failed = true;
                    continue;
                }
                Found::Built(t, d) => (t, d),
            };
            if seen_types.contains(&etype) {
                err(
                    &efield,
                    format!("a second extractor of type `{etype}` on source `{name}`"),
                );
                continue;
            }
            seen_types.push(etype);
            let fits = match (source, edata) {
                (DataPlugin::MetricsSource(_), Some(DataPlugin::MetricsExtractor(m))) => {
                    extractor = Some(m.clone());
                    true
                }
                (DataPlugin::ModelsSource(_), Some(DataPlugin::ModelsExtractor)) => true,
                (DataPlugin::EndpointEvents, _) => ENDPOINT_EXTRACTORS.contains(&etype),
                _ => false,
            };
            if !fits {
                let takes = match source {
                    DataPlugin::MetricsSource(_) => "a `core-metrics-extractor`".to_string(),
                    DataPlugin::ModelsSource(_) => "a `models-data-extractor`".to_string(),
                    _ => format!("one of `{}`", ENDPOINT_EXTRACTORS.join("`, `")),
                };
                err(
                    &efield,
                    format!(
                        "plugin `{ename}` (type `{etype}`) cannot extract from `{name}` (type \
                         `{source_type}`, which takes {takes})"
                    ),
                );
                extractor_failed = true;
            }
        }
        match source {
            DataPlugin::MetricsSource(m) => {
                has_metrics_source = true;
                if metrics.is_some() {
                    err(
                        &field,
                        format!(
                            "a second metrics-data-source (`{name}`): pdgate keeps one set of \
                             engine gauges per endpoint, read from one metrics source"
                        ),
                    );
                } else if extractor.is_none() && !extractor_failed {
                    err(
                        &format!("dataLayer.sources[{i}]"),
                        format!(
                            "metrics-data-source `{name}` has no core-metrics-extractor: pdgate \
                             reads the engine gauges from every metrics scrape"
                        ),
                    );
                }
                metrics.get_or_insert((m.clone(), extractor));
            }
            DataPlugin::ModelsSource(m) => {
                if models.is_some() {
                    err(
                        &field,
                        format!(
                            "a second models-data-source (`{name}`): pdgate keeps one model list \
                             per endpoint"
                        ),
                    );
                }
                models.get_or_insert(m.clone());
            }
            _ => {}
        }
    }

    // llm-d's default source, unless opted out.
    if !has_metrics_source {
        if section.inject_defaults == Some(false) {
            err(
                "dataLayer.injectDefaults",
                "`false` leaves no metrics-data-source, and pdgate always reads engine load from \
                 the engines' metrics: add a metrics-data-source source with a \
                 core-metrics-extractor"
                    .into(),
            );
        } else {
            let source_name = crate::plugins::metrics_data_source::TYPE.name;
            let extractor_name = crate::plugins::core_metrics_extractor::TYPE.name;
            referenced.extend([source_name, extractor_name]);
            let source = match find(source_name) {
                Found::Built(_, Some(DataPlugin::MetricsSource(m))) => Some(m.clone()),
                Found::Built(t, _) => {
                    err(
                        "dataLayer",
                        format!(
                            "the default metrics source is the plugin named `{source_name}`, \
                             which is of type `{t}`"
                        ),
                    );
                    None
                }
                _ => Some(MetricsSource::default()),
            };
            let engines = match find(extractor_name) {
                Found::Built(_, Some(DataPlugin::MetricsExtractor(m))) => Some(m.clone()),
                Found::Built(t, _) => {
                    err(
                        "dataLayer",
                        format!(
                            "the default metrics extractor is the plugin named \
                             `{extractor_name}`, which is of type `{t}`"
                        ),
                    );
                    None
                }
                _ => None,
            };
            metrics = source.map(|s| (s, engines));
        }
    }

    // Metrics plugins no source uses: their parameters would not apply.
    let mut unused = Vec::new();
    for d in &ld.decls {
        let Some((_, t, b)) = ld.built.iter().find(|(n, _, _)| *n == d.name) else {
            continue;
        };
        let what = match b.data {
            Some(DataPlugin::MetricsSource(_)) | Some(DataPlugin::ModelsSource(_)) => {
                "no dataLayer.sources entry references it"
            }
            Some(DataPlugin::MetricsExtractor(_)) => "no dataLayer source lists it as an extractor",
            _ => continue,
        };
        if !referenced.contains(&d.name.as_str()) && !d.quiet {
            let line = d.item.as_ref().map(|r| r.start + 1);
            unused.push((
                line,
                d.name.clone(),
                t.clone(),
                format!("not used: {what}, so its parameters would not apply"),
            ));
        }
    }

    let failed = !errors.is_empty() || !unused.is_empty();
    for (line, message) in errors {
        ld.report(line, None, message);
    }
    for (line, name, plugin_type, message) in unused {
        let decl = ld
            .decls
            .iter()
            .position(|d| d.name == name && d.plugin_type == plugin_type)
            .expect("a declared plugin");
        let e = ld.err(line, Some(&ld.decls[decl]), message);
        ld.errors.push(e);
    }
    if failed {
        return None;
    }
    let (metrics, engines) = metrics.unwrap_or_default();
    Some((
        DataLayer {
            metrics,
            engines: engines.unwrap_or_default(),
            models: models.unwrap_or_default(),
        },
        verbatim,
    ))
}

#[cfg(test)]
#[path = "datalayer_tests.rs"]
mod tests;
