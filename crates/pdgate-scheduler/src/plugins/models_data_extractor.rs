//! `models-data-extractor` — keeps each engine's model list.
//!
//! - **Type:** `models-data-extractor`
//! - **Extension points:** data-layer extractor of a `models-data-source`.
//! - **Parameters:** none.
//! - **Inputs:** the `/v1/models` answer read by the source.
//! - **Outputs:** the endpoint's model objects (`EndpointLoad::set_model_cards`), entries
//!   without a string `id` dropped; requests are scheduled only on endpoints serving their
//!   model.
//! - **Limitations:** pdgate always keeps the model list (it routes by model), with or without
//!   this extractor; llm-d stores it as an endpoint attribute no in-tree plugin reads.
//! - **Source:** llm-d-router `pkg/epp/framework/plugins/datalayer/extractor/models/extractor.go`.

use crate::datalayer::DataPlugin;
use crate::plugin_build::{decode, BuildCtx, Built, NoParams, PluginError, PluginType, Stage};
use serde_yaml_ng::Value;

/// Registry entry.
pub const TYPE: PluginType = PluginType {
    name: "models-data-extractor",
    stage: Stage::Producer,
    build,
};

fn build(params: Option<&Value>, _: &mut BuildCtx<'_>) -> Result<Built, PluginError> {
    decode::<NoParams>(params)?;
    Ok(Built {
        data: Some(DataPlugin::ModelsExtractor),
        ..Built::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn takes_no_parameters() {
        let mut ctx = BuildCtx {
            built: &[],
            profiles: &[],
            next_slot: 0,
        };
        let b = build(None, &mut ctx).unwrap();
        assert!(matches!(b.data, Some(DataPlugin::ModelsExtractor)));
        let v: Value = serde_yaml_ng::from_str("path: /x\n").unwrap();
        let e = build(Some(&v), &mut ctx).err().unwrap();
        assert_eq!(e.key.as_deref(), Some("path"));
    }
}
