//! Unit tests of `always_disagg_multimodal_decider.rs`.

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
