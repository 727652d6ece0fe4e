//! Unit tests of `ctx.rs`: the request context owns each phase's booking, and replacing a
//! pick (a retry) moves it.

use super::*;
use pdgate_scheduler::{
    Endpoint, EndpointLoad, EndpointState, Scheduler, SchedulingRequest, Snapshot,
    DEFAULT_CONFIG_YAML,
};
use std::collections::BTreeMap;
use std::sync::Arc;

fn snapshot(names: &[(&str, &str)]) -> Snapshot {
    let endpoints = names
        .iter()
        .map(|(n, role)| {
            let labels = BTreeMap::from([("llm-d.ai/role".to_string(), role.to_string())]);
            Arc::new(EndpointState {
                endpoint: Endpoint::new(*n, format!("{n}:1"), labels),
                load: Arc::new(EndpointLoad::default()),
            })
        })
        .collect();
    Snapshot {
        endpoints,
        version: 1,
    }
}

fn in_flight(s: &Snapshot, name: &str) -> u32 {
    s.get(name).unwrap().load.in_flight()
}

fn schedule(s: &Snapshot, profile: Option<&str>) -> SchedulingResult {
    let sched = Scheduler::from_yaml(DEFAULT_CONFIG_YAML, "default").unwrap();
    let prompt = pdgate_api::PromptInput::Tokens((0..64).collect());
    let req = SchedulingRequest {
        profile,
        ..SchedulingRequest::new("r1", "m", &prompt)
    };
    sched.schedule(&req, s).unwrap()
}

#[test]
fn the_context_owns_the_bookings_until_they_are_taken_or_it_ends() {
    let s = snapshot(&[("p0", "prefill"), ("d0", "decode")]);
    let result = schedule(&s, None);
    assert!(
        result.prefill.is_some(),
        "a 64-token uncached prompt is split"
    );
    let ctx = RequestContext::new(Some(result), true);
    assert_eq!((in_flight(&s, "p0"), in_flight(&s, "d0")), (1, 1));
    assert_eq!(ctx.phase(Slot::Prefill), Some(Phase::Prefill));
    assert_eq!(ctx.phase(Slot::Main), Some(Phase::Decode));
    // The prefill leg answered 2xx: its booking ends now, completed.
    ctx.with(Slot::Prefill, |r| r.status = Some(200));
    ctx.finish_prefill();
    assert_eq!((in_flight(&s, "p0"), in_flight(&s, "d0")), (0, 1));
    // The main booking moves to the response body; dropping it releases it.
    let main = ctx.take_main_pick().unwrap();
    drop(ctx);
    assert_eq!(in_flight(&s, "d0"), 1, "the body holds it");
    drop(main);
    assert_eq!(in_flight(&s, "d0"), 0);
}

#[test]
fn a_replaced_pick_ends_the_old_booking_and_a_dropped_context_ends_all() {
    let s = snapshot(&[("d0", "decode"), ("d1", "decode")]);
    let first = schedule(&s, Some("decode"));
    let retry = schedule(&s, Some("decode"));
    let (a, b) = (
        first.decode.endpoint.endpoint.name.clone(),
        retry.decode.endpoint.endpoint.name.clone(),
    );
    assert_ne!(
        a, b,
        "the second pick spreads to the other endpoint (booked load)"
    );
    let ctx = RequestContext::new(Some(first), false);
    assert_eq!(ctx.phase(Slot::Main), Some(Phase::Decode));
    ctx.with(Slot::Main, |r| r.pick = Some(retry.decode));
    assert_eq!(
        (in_flight(&s, &a), in_flight(&s, &b)),
        (0, 1),
        "booking moved"
    );
    // A split that was not planned keeps no prefill pick.
    assert!(ctx.with(Slot::Prefill, |r| r.pick.is_none() && r.phase.is_none()));
    drop(ctx);
    assert_eq!(in_flight(&s, &b), 0, "client gone: every booking released");
}

#[test]
fn each_leg_finds_the_slot_of_its_phase() {
    use Phase::*;
    let slots =
        |ctx: &RequestContext| [Prefill, Decode, Aggregated, Encode].map(|p| ctx.slot_for(p));
    // A split request (or a coordinator of routers: no picks): prefill in its slot, the
    // probe, decode and a fallback's aggregated leg in the main one, encode legs nowhere.
    let s = snapshot(&[("p0", "prefill"), ("d0", "decode")]);
    let split = RequestContext::new(Some(schedule(&s, None)), true);
    let expected = [
        Some(Slot::Prefill),
        Some(Slot::Main),
        Some(Slot::Main),
        None,
    ];
    assert_eq!(slots(&split), expected);
    assert_eq!(slots(&RequestContext::new(None, true)), expected);
    // A per-role router's own phase is the leg the client gets: the main slot.
    for (profile, phase) in [("prefill", Prefill), ("decode", Decode)] {
        let one = RequestContext::new(Some(schedule(&s, Some(profile))), false);
        assert_eq!(one.phase(Slot::Main), Some(phase), "{profile}");
        assert_eq!(one.slot_for(phase), Some(Slot::Main), "{profile}");
    }
}
