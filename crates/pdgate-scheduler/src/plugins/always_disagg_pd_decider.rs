//! `always-disagg-pd-decider` — splits prefill out of every request.
//!
//! - **Type:** `always-disagg-pd-decider`
//! - **Extension points:** Decider
//! - **Parameters:** none.
//! - **Inputs:** none.
//! - **Outputs:** always `Split` (llm-d AlwaysDisaggPDDecider); as the decider of a
//!   conditional-decode probe it therefore always answers 412.
//! - **Limitations:** with no prefill endpoint the handler still falls back to aggregated.

use crate::endpoint::EndpointState;
use crate::plugin::{Decider, Decision};
use crate::plugin_build::{decode, BuildCtx, Built, NoParams, PluginError, PluginType, Stage};
use crate::request::RequestCtx;
use serde_yaml_ng::Value;
use std::sync::Arc;

/// Registry entry.
pub const TYPE: PluginType = PluginType {
    name: "always-disagg-pd-decider",
    stage: Stage::Consumer,
    build,
};

/// The decider.
#[derive(Debug, Default)]
pub struct AlwaysDisaggPdDecider;

impl Decider for AlwaysDisaggPdDecider {
    fn decide(&self, _ctx: &RequestCtx<'_>, _decode: &EndpointState) -> Decision {
        Decision::Split
    }
}

fn build(params: Option<&Value>, _: &mut BuildCtx<'_>) -> Result<Built, PluginError> {
    decode::<NoParams>(params)?;
    Ok(Built {
        decider: Some(Arc::new(AlwaysDisaggPdDecider)),
        ..Built::default()
    })
}
