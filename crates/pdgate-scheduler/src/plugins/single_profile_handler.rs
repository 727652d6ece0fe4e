//! `single-profile-handler` — runs the one scheduling profile.
//!
//! - **Type:** `single-profile-handler`
//! - **Extension points:** ProfileHandler
//! - **Parameters:** none.
//! - **Inputs:** the only profile of the config (injected by default when there is one
//!   profile and no handler).
//! - **Outputs:** one pick, phase `Aggregated`.
//! - **Limitations:** a config with more than one profile is rejected at load time.

use crate::error::Rejection;
use crate::plugin::{ProfileHandler, ProfileRunner};
use crate::plugin_build::{decode, BuildCtx, Built, NoParams, PluginError, PluginType, Stage};
use crate::request::{RequestCtx, SchedulingResult};
use pdgate_api::Phase;
use serde_yaml_ng::Value;
use std::sync::Arc;

/// Registry entry.
pub const TYPE: PluginType = PluginType {
    name: "single-profile-handler",
    stage: Stage::Handler,
    build,
};

/// The handler.
#[derive(Debug)]
pub struct SingleProfileHandler {
    profile: String,
}

impl ProfileHandler for SingleProfileHandler {
    fn handle(
        &self,
        ctx: &RequestCtx<'_>,
        runner: &dyn ProfileRunner,
    ) -> Result<SchedulingResult, Rejection> {
        Ok(SchedulingResult {
            prefill: None,
            decode: runner.run(ctx, &self.profile, Phase::Aggregated)?,
            prefill_unavailable: None,
        })
    }
}

fn build(params: Option<&Value>, ctx: &mut BuildCtx<'_>) -> Result<Built, PluginError> {
    decode::<NoParams>(params)?;
    match ctx.profiles {
        [one] => Ok(Built {
            handler: Some(Arc::new(SingleProfileHandler {
                profile: one.clone(),
            })),
            ..Built::default()
        }),
        many => Err(PluginError {
            path: None,
            key: None,
            message: format!("needs exactly one scheduling profile, found {}", many.len()),
            missing: None,
        }),
    }
}
