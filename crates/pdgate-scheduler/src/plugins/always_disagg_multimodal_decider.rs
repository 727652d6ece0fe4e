//! `always-disagg-multimodal-decider` — runs the encode stage for every request that carries
//! multimodal items.
//!
//! - **Type:** `always-disagg-multimodal-decider`
//! - **Extension points:** Decider (named by `disagg-profile-handler`'s `deciders.encode`).
//! - **Parameters:** none.
//! - **Inputs:** the request's multimodal items ([`SchedulingRequest::media`]: the image,
//!   audio and video parts of a chat request, one content hash per item, found once at
//!   ingress).
//! - **Outputs:** `Split` (run the encode stage) iff the request has at least one item, else
//!   `Keep`. The decode endpoint is not read. The disagg handler records the answer for the
//!   request (`disagg_profile_handler::encode_decision`); `pdgate serve` then sends one encode
//!   leg per item to the handler's encode profile before prefill (when encode endpoints
//!   exist), or none on `Keep` (the prefilling engine encodes its media itself).
//! - **Limitations:** llm-d reads the token-producer's `MultiModalFeatures`, so without a
//!   tokenizer it never splits; pdgate reads the request's media parts directly, so it needs
//!   no tokenizer (the same items vLLM would find: `image_url`, `video_url`, `input_audio`,
//!   `audio_url` parts of `messages[*].content`). `/v1/completions` bodies have no media
//!   parts and never split. As a conditional-decode decider it would answer 412 for every
//!   multimodal probe; it is meant for `deciders.encode` only. `pdgate epp` does not run an
//!   encode stage (no `x-encoder-hosts-ports` yet): there the answer is recorded only.
//!   Source: llm-d `pkg/epp/framework/plugins/scheduling/profilehandler/disagg/
//!   always_disagg_mm_decider.go`, `multimodal_helpers.go`.
//!
//! [`SchedulingRequest::media`]: crate::request::SchedulingRequest::media

use crate::endpoint::EndpointState;
use crate::plugin::{Decider, Decision};
use crate::plugin_build::{decode, BuildCtx, Built, NoParams, PluginError, PluginType, Stage};
use crate::request::RequestCtx;
use serde_yaml_ng::Value;
use std::sync::Arc;

/// Registry entry.
pub const TYPE: PluginType = PluginType {
    name: "always-disagg-multimodal-decider",
    stage: Stage::Consumer,
    build,
};

/// The decider.
#[derive(Debug, Default)]
pub struct AlwaysDisaggMultimodalDecider;

impl Decider for AlwaysDisaggMultimodalDecider {
    fn decide(&self, ctx: &RequestCtx<'_>, _decode: &EndpointState) -> Decision {
        if ctx.req.media.is_empty() {
            Decision::Keep
        } else {
            Decision::Split
        }
    }
}

fn build(params: Option<&Value>, _: &mut BuildCtx<'_>) -> Result<Built, PluginError> {
    decode::<NoParams>(params)?;
    Ok(Built {
        decider: Some(Arc::new(AlwaysDisaggMultimodalDecider)),
        ..Built::default()
    })
}

#[cfg(test)]
#[path = "always_disagg_multimodal_decider_tests.rs"]
mod tests;
