//! Conditional decode in the scheduler (design.md §4): a probe sent with
//! `Prefer: if-available` is served by its decode pick only when the decider keeps it there.

mod common;

use common::{compat, ep, snapshot};
use pdgate_api::{Phase, PromptInput};
use pdgate_scheduler::{Rejection, Scheduler, SchedulingRequest, DEFAULT_CONFIG_YAML};

fn probe<'a>(prompt: &'a PromptInput, profile: Option<&'a str>) -> SchedulingRequest<'a> {
    SchedulingRequest {
        profile,
        conditional: true,
        ..SchedulingRequest::new("r1", "m", prompt)
    }
}

fn tokens(n: u32) -> PromptInput {
    PromptInput::Tokens((0..n).collect())
}

/// The sim P/D config with `nonCachedTokens` replaced (16 in the compat file).
fn sim_pd(non_cached: u32) -> Scheduler {
    let yaml = compat("sim-pd-epp-config.yaml").replace(
        "nonCachedTokens: 16",
        &format!("nonCachedTokens: {non_cached}"),
    );
    Scheduler::from_yaml(&yaml, "sim-pd").unwrap()
}

fn is_deferred(r: &Result<pdgate_scheduler::SchedulingResult, pdgate_scheduler::Rejected>) -> bool {
    matches!(r, Err(e) if matches!(e.reason, Rejection::DecodeDeferred { .. }))
}

#[test]
fn uncached_probe_is_deferred_and_cached_probe_is_served_by_decode() {
    let s = sim_pd(16);
    let eps = [ep("p1", Some("prefill")), ep("d1", Some("decode"))];
    let snap = snapshot(&eps);
    let prompt = tokens(64);
    for profile in [None, Some("decode")] {
        // Nothing cached: 64 uncached ≥ 16 → 412, and the probe's booking is released.
        let r = s.schedule(&probe(&prompt, profile), &snap);
        assert!(is_deferred(&r), "{profile:?}: {r:?}");
        let msg = r.unwrap_err().reason.to_string();
        assert_eq!(
            msg,
            "conditional decode deferred: decode endpoint `d1` does not hold enough of the \
             prompt's prefix"
        );
        assert_eq!((eps[0].load.in_flight(), eps[1].load.in_flight()), (0, 0));
    }
    // The coordinator goes on: prefill then decode, and both answer 200.
    let split = s
        .schedule(&SchedulingRequest::new("r1", "m", &prompt), &snap)
        .unwrap();
    s.response_received(split.prefill.as_ref().unwrap(), 200);
    s.response_received(&split.decode, 200);
    drop(split);
    // Now d1 holds all 4 blocks: 0 uncached < 16 → served by decode, no prefill pick.
    let r = s.schedule(&probe(&prompt, None), &snap).unwrap();
    assert!(r.prefill.is_none());
    assert_eq!(
        (r.decode.endpoint.endpoint.name.as_str(), r.decode.phase),
        ("d1", Phase::Aggregated)
    );
    assert_eq!(r.decode.cached_tokens, 64);
    // Through a decode router (header profile `decode`): same answer, phase Decode.
    let r = s.schedule(&probe(&prompt, Some("decode")), &snap).unwrap();
    assert_eq!(
        (r.decode.endpoint.endpoint.name.as_str(), r.decode.phase),
        ("d1", Phase::Decode)
    );
    // 15 more tokens: 15 uncached < 16 → served; 16 more → deferred.
    assert!(s.schedule(&probe(&tokens(79), None), &snap).is_ok());
    assert!(is_deferred(&s.schedule(&probe(&tokens(80), None), &snap)));
}

#[test]
fn non_cached_tokens_zero_or_no_decider_never_defers() {
    let eps = [ep("p1", Some("prefill")), ep("d1", Some("decode"))];
    let snap = snapshot(&eps);
    let prompt = tokens(4096);
    let zero = sim_pd(0);
    let yaml = compat("sim-pd-epp-config.yaml").replace(
        "    deciders:\n      prefill: prefix-based-pd-decider\n",
        "    {}\n",
    );
    assert!(!yaml.contains("prefill: prefix-based-pd-decider"));
    let no_decider = Scheduler::from_yaml(&yaml, "no-decider").unwrap();
    let single = Scheduler::from_yaml("plugins:\n- type: decode-filter\n", "single").unwrap();
    for (name, s) in [
        ("zero", &zero),
        ("no decider", &no_decider),
        ("single", &single),
    ] {
        for profile in [None, Some("decode")] {
            if name == "single" && profile.is_some() {
                continue; // the single profile is named `default`
            }
            let r = s.schedule(&probe(&prompt, profile), &snap);
            let r = r.unwrap_or_else(|e| panic!("{name} {profile:?}: {e}"));
            assert_eq!(r.decode.endpoint.endpoint.name, "d1", "{name}");
            assert!(r.prefill.is_none(), "{name}");
        }
    }
}

#[test]
fn always_disagg_decider_defers_every_probe_and_prefill_profile_is_never_conditional() {
    let s = Scheduler::from_yaml(pdgate_scheduler::ROUND_ROBIN_CONFIG_YAML, "rr").unwrap();
    let eps = [ep("p1", Some("prefill")), ep("d1", Some("decode"))];
    let snap = snapshot(&eps);
    let prompt = tokens(4);
    assert!(is_deferred(&s.schedule(&probe(&prompt, None), &snap)));
    // A probe flag on a prefill-profile request does not apply (only decode is conditional).
    let r = s.schedule(&probe(&prompt, Some("prefill")), &snap).unwrap();
    assert_eq!(r.decode.phase, Phase::Prefill);
    let d = Scheduler::from_yaml(DEFAULT_CONFIG_YAML, "default").unwrap();
    assert!(is_deferred(&d.schedule(&probe(&tokens(64), None), &snap)));
}
