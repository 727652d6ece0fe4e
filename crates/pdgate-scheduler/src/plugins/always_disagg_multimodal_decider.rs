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
use crate::registry::{decode, BuildCtx, Built, NoParams, PluginError, PluginType, Stage};
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
mod tests {
    use super::*;
    use crate::plugins::disagg_profile_handler::encode_decision;
    use crate::plugins::testutil::ep;
    use crate::request::SchedulingRequest;
    use crate::{Scheduler, Snapshot};
    use pdgate_api::PromptInput;

    #[test]
    fn splits_iff_the_request_has_media_items() {
        let prompt = PromptInput::Text("describe".into());
        let d = ep("d", Some("decode"));
        for (media, want) in [
            (&[][..], Decision::Keep),
            (&[7u64][..], Decision::Split),
            (&[7, 7, 9][..], Decision::Split),
        ] {
            let req = SchedulingRequest {
                media,
                ..SchedulingRequest::new("r", "m", &prompt)
            };
            let ctx = RequestCtx::new(&req, 0);
            assert_eq!(AlwaysDisaggMultimodalDecider.decide(&ctx, &d), want);
        }
    }

    #[test]
    fn takes_no_parameters() {
        let v: Value = serde_yaml_ng::from_str("x: 1").unwrap();
        let mut ctx = BuildCtx {
            built: &[],
            profiles: &[],
            next_slot: 0,
        };
        let e = build(Some(&v), &mut ctx).err().expect("refused");
        assert_eq!(e.key.as_deref(), Some("x"));
    }

    /// The sample E/PD config: the disagg handler asks this decider and keeps its answer.
    #[test]
    fn the_disagg_handler_records_the_encode_answer() {
        let text = include_str!("../../tests/data/llm-d-router/sim-e-pd-epp-config.yaml");
        let s = Scheduler::from_yaml(text, "sim-e-pd-epp-config.yaml").unwrap();
        let snapshot = Snapshot {
            endpoints: vec![ep("e", Some("encode")), ep("d", Some("decode"))],
            version: 1,
        };
        let prompt = PromptInput::Text("what is in the picture".into());
        for (media, want) in [(&[][..], false), (&[0xabcu64][..], true)] {
            let req = SchedulingRequest {
                media,
                ..SchedulingRequest::new("r", "m", &prompt)
            };
            let r = s.schedule(&req, &snapshot).unwrap();
            assert_eq!(r.decode.endpoint.endpoint.name, "d");
            assert_eq!(encode_decision(r.decode.guard.state()), Some(want));
        }
    }
}
