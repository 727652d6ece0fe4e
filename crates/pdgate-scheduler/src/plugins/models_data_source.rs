//! `models-data-source` — where and how often pdgate reads each engine's `/v1/models`.
//!
//! - **Type:** `models-data-source`
//! - **Extension points:** data-layer polling source (`dataLayer.sources[].pluginRef`), feeding
//!   a `models-data-extractor`.
//! - **Parameters:** those of every HTTP source ([`http_source`]) but `port`, with:
//!   - `path` (default [`DEFAULT_PATH`] `/v1/models`): the URL path read.
//!   - `interval` (Go duration, default empty): how often the list is re-read, rounded to a
//!     whole number of metrics scrapes (at least one).
//! - **Inputs:** each endpoint's address.
//! - **Outputs:** [`ModelsSource`]: the scraper reads `http://{address}{path}` (an OpenAI model
//!   list, `{"data": [{"id": …}]}`) and stores the model objects per endpoint; pdgate schedules a
//!   request only on endpoints serving its model, and its own `/v1/models` lists them.
//! - **Limitations:**
//!   - pdgate reads the model list with or without this source (it routes by model); the
//!     source only changes the path and the period.
//!   - The list is read right after a successful metrics scrape: without `interval` every 25th
//!     scrape (and after an engine restart), not every tick as llm-d would.
//!   - No `https`.
//! - **Source:** llm-d-router `pkg/epp/framework/plugins/datalayer/source/models/datasource.go`.

use crate::datalayer::DataPlugin;
pub use crate::datalayer::{ModelsSource, DEFAULT_MODELS_PATH as DEFAULT_PATH};
use crate::plugin_build::{BuildCtx, Built, PluginError, PluginType, Stage};
use crate::plugins::http_source;
use serde_yaml_ng::Value;

/// Registry entry.
pub const TYPE: PluginType = PluginType {
    name: "models-data-source",
    stage: Stage::Producer,
    build,
};

fn build(params: Option<&Value>, _: &mut BuildCtx<'_>) -> Result<Built, PluginError> {
    let c = http_source::check(params, TYPE.name, DEFAULT_PATH, false)?;
    let source = ModelsSource {
        path: c.path,
        interval: c.interval,
    };
    Ok(Built {
        data: Some(DataPlugin::ModelsSource(source)),
        params: c.effective,
        ..Built::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn source(yaml: &str) -> Result<ModelsSource, PluginError> {
        let v: Value = serde_yaml_ng::from_str(yaml).unwrap();
        let mut ctx = BuildCtx {
            built: &[],
            profiles: &[],
            next_slot: 0,
        };
        match build(Some(&v), &mut ctx)?.data {
            Some(DataPlugin::ModelsSource(s)) => Ok(s),
            _ => panic!("not a models source"),
        }
    }

    #[test]
    fn path_and_interval_in_scrapes() {
        assert_eq!(source("{}").unwrap(), ModelsSource::default());
        let s = source("path: /models\ninterval: 10s\n").unwrap();
        assert_eq!(s.path, "/models");
        let ms = Duration::from_millis;
        // 10 s / 200 ms = 50 scrapes; 10 s / 3 s = 3.33 → 3; 10 s / 60 s → at least 1.
        assert_eq!(s.every(ms(200), 25), 50);
        assert_eq!(s.every(ms(3000), 25), 3);
        assert_eq!(s.every(ms(60_000), 25), 1);
        assert_eq!(ModelsSource::default().every(ms(200), 25), 25);
    }

    #[test]
    fn bad_parameters_name_their_field() {
        let e = source("scheme: https\n").unwrap_err();
        assert_eq!(e.path.as_deref(), Some("scheme"));
        let e = source("port: 80\n").unwrap_err();
        assert_eq!(e.key.as_deref(), Some("port"));
        assert!(
            e.message.starts_with("unknown field `port`"),
            "{}",
            e.message
        );
        let e = source("interval: soon\n").unwrap_err();
        assert_eq!(e.path.as_deref(), Some("interval"));
    }
}
