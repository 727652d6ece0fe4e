//! `endpoint-notification-source` — endpoint add/update/delete events for the plugins that
//! keep per-endpoint state.
//!
//! - **Type:** `endpoint-notification-source`
//! - **Extension points:** data-layer event source (`dataLayer.sources[].pluginRef`); its
//!   extractors must be plugins that consume endpoint events:
//!   [`crate::config::ENDPOINT_EXTRACTORS`] (`topology-extractor`,
//!   `mm-embeddings-cache-producer`, `precise-prefix-cache-producer`).
//! - **Parameters:** none.
//! - **Inputs:** pdgate's endpoint discovery (flags, endpoints file or Kubernetes).
//! - **Outputs:** none of its own: pdgate already delivers every endpoint change to the plugins
//!   that keep per-endpoint state (departed endpoints are forgotten by the prefix indexes, new
//!   ones get their labels read), so listing them as its extractors changes nothing; the
//!   entry is checked (the extractors must be of the types above) and accepted.
//! - **Limitations:** none known; llm-d auto-creates this source for its extractors, pdgate
//!   needs no source at all.
//! - **Source:** llm-d-router
//!   `pkg/epp/framework/plugins/datalayer/source/notifications/endpoint_datasource.go`.

use crate::datalayer::DataPlugin;
use crate::plugin_build::{decode, BuildCtx, Built, NoParams, PluginError, PluginType, Stage};
use serde_yaml_ng::Value;

/// Registry entry.
pub const TYPE: PluginType = PluginType {
    name: "endpoint-notification-source",
    stage: Stage::Producer,
    build,
};

fn build(params: Option<&Value>, _: &mut BuildCtx<'_>) -> Result<Built, PluginError> {
    decode::<NoParams>(params)?;
    Ok(Built {
        data: Some(DataPlugin::EndpointEvents),
        ..Built::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn built(yaml: Option<&str>) -> Result<Built, PluginError> {
        let v: Option<Value> = yaml.map(|y| serde_yaml_ng::from_str(y).unwrap());
        let mut ctx = BuildCtx {
            built: &[],
            profiles: &[],
            next_slot: 0,
        };
        build(v.as_ref(), &mut ctx)
    }

    #[test]
    fn takes_no_parameters_and_is_an_endpoint_source() {
        let b = built(None).unwrap();
        assert!(matches!(b.data, Some(DataPlugin::EndpointEvents)));
        assert!(b.params.is_null());
        assert!(built(Some("{}")).is_ok());
        let e = built(Some("watch: pods\n")).err().unwrap();
        assert_eq!(e.key.as_deref(), Some("watch"));
        assert!(
            e.message.starts_with("unknown field `watch`"),
            "{}",
            e.message
        );
    }
}
