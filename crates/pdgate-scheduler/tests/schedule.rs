//! Scheduling: profile runs, the disagg handler, rejections, bursts, guards, speed.

mod common;

use common::{compat, ep, snapshot};
use pdgate_api::{Phase, PromptInput};
use pdgate_scheduler::{
    Rejection, Scheduler, SchedulingRequest, DEFAULT_CONFIG_YAML, ROUND_ROBIN_CONFIG_YAML,
};
use std::collections::HashMap;

fn req<'a>(prompt: &'a PromptInput, profile: Option<&'a str>) -> SchedulingRequest<'a> {
    SchedulingRequest {
        profile,
        ..SchedulingRequest::new("r1", "m", prompt)
    }
}

fn tokens(range: std::ops::Range<u32>) -> PromptInput {
    PromptInput::Tokens(range.collect())
}

#[test]
fn profile_run_filters_then_weighted_sum_then_picker() {
    let yaml = "plugins:\n- type: decode-filter\n- type: queue-scorer\n- type: kv-cache-utilization-scorer\n\
                schedulingProfiles:\n- name: default\n  plugins:\n  - pluginRef: decode-filter\n  \
                - pluginRef: queue-scorer\n  - pluginRef: kv-cache-utilization-scorer\n    weight: 2\n";
    let s = Scheduler::from_yaml(yaml, "t").unwrap();
    let eps = [
        ep("a", Some("decode")),
        ep("b", Some("decode")),
        ep("p", Some("prefill")),
    ];
    eps[0].load.set_scraped(Some(0.0), Some(0.0), Some(0.9)); // 1·1 + 2·0.1 = 1.2
    eps[1].load.set_scraped(Some(4.0), Some(0.0), Some(0.0)); // 1·0 + 2·1.0 = 2.0
                                                              // p would score 3.0 but the decode filter removes it.
    let prompt = tokens(0..8);
    let r = s.schedule(&req(&prompt, None), &snapshot(&eps)).unwrap();
    assert_eq!(r.decode.endpoint.endpoint.name, "b");
    assert_eq!(
        (r.decode.phase, r.decode.profile.as_str()),
        (Phase::Aggregated, "default")
    );
    assert!(r.prefill.is_none());
    assert_eq!(eps[1].load.in_flight(), 1);
    drop(r);
    assert_eq!(eps[1].load.in_flight(), 0);
}

#[test]
fn disagg_splits_then_serves_cached_prompt_aggregated() {
    let s = Scheduler::from_yaml(&compat("sim-pd-epp-config.yaml"), "sim").unwrap();
    let eps = [ep("p1", Some("prefill")), ep("d1", Some("decode"))];
    let snap = snapshot(&eps);
    let prompt = tokens(0..64); // 4 blocks of 16
    let first = s.schedule(&req(&prompt, None), &snap).unwrap();
    let pre = first
        .prefill
        .as_ref()
        .expect("split: nothing cached, 64 ≥ 16 uncached");
    assert_eq!(
        (
            pre.endpoint.endpoint.name.as_str(),
            pre.phase,
            pre.profile.as_str()
        ),
        ("p1", Phase::Prefill, "prefill")
    );
    assert_eq!(
        (
            first.decode.endpoint.endpoint.name.as_str(),
            first.decode.phase
        ),
        ("d1", Phase::Decode)
    );
    assert_eq!((pre.cached_tokens, first.decode.cached_tokens), (0, 0));
    assert_eq!((eps[0].load.in_flight(), eps[1].load.in_flight()), (1, 1));
    // Nothing is recorded until an endpoint answers: the same prompt still splits.
    let again = s.schedule(&req(&prompt, None), &snap).unwrap();
    assert_eq!(again.decode.cached_tokens, 0);
    assert!(again.prefill.is_some());
    drop(again);
    // A 4xx answer records nothing either.
    s.response_received(&first.decode, 409);
    assert!(s
        .schedule(&req(&prompt, None), &snap)
        .unwrap()
        .prefill
        .is_some());
    // Both phases answer 200: the producer records the prompt on p1 and d1.
    s.response_received(pre, 200);
    s.response_received(&first.decode, 200);
    drop(first);
    // 0 uncached tokens on d1 < 16 → aggregated on d1.
    let second = s.schedule(&req(&prompt, None), &snap).unwrap();
    assert!(second.prefill.is_none());
    assert_eq!(
        (
            second.decode.endpoint.endpoint.name.as_str(),
            second.decode.phase
        ),
        ("d1", Phase::Aggregated)
    );
    assert_eq!(second.decode.cached_tokens, 64);
    // 40 new tokens → 2 new full blocks, 32 + 8 uncached ≥ 16 → split again.
    let longer = tokens(0..104);
    let third = s.schedule(&req(&longer, None), &snap).unwrap();
    assert_eq!(third.decode.cached_tokens, 64);
    assert!(third.prefill.is_some());
}

#[test]
fn no_prefill_pool_runs_aggregated() {
    for yaml in [
        compat("pd-epp-config.yaml"),
        DEFAULT_CONFIG_YAML.to_string(),
        ROUND_ROBIN_CONFIG_YAML.to_string(),
    ] {
        let s = Scheduler::from_yaml(&yaml, "pd").unwrap();
        let eps = [ep("d1", Some("decode")), ep("d2", None)];
        let prompt = tokens(0..640);
        let r = s.schedule(&req(&prompt, None), &snapshot(&eps)).unwrap();
        assert!(r.prefill.is_none());
        assert_eq!(
            (r.decode.phase, r.decode.profile.as_str()),
            (Phase::Aggregated, "decode")
        );
    }
}

#[test]
fn rejections() {
    let s = Scheduler::from_yaml(&compat("pd-epp-config.yaml"), "pd").unwrap();
    let prompt = tokens(0..10);
    let only_prefill = [ep("p1", Some("prefill"))];
    assert_eq!(
        s.schedule(&req(&prompt, None), &snapshot(&only_prefill))
            .unwrap_err()
            .reason,
        Rejection::Saturated {
            profile: "decode".into()
        }
    );
    let down = ep("d1", Some("decode"));
    let mut e = down.endpoint.clone();
    e.ready = false;
    let down = std::sync::Arc::new(pdgate_scheduler::EndpointState {
        endpoint: e,
        load: down.load.clone(),
    });
    assert_eq!(
        s.schedule(&req(&prompt, None), &snapshot(&[down]))
            .unwrap_err()
            .reason,
        Rejection::NoEndpoints
    );
    let eps = [ep("p1", Some("prefill")), ep("d1", Some("decode"))];
    assert_eq!(
        s.schedule(&req(&prompt, Some("encode")), &snapshot(&eps))
            .unwrap_err()
            .reason,
        Rejection::UnknownProfile("encode".into())
    );
    assert_eq!(
        Rejection::UnknownProfile("x".into()).to_string(),
        "unknown scheduling profile `x`"
    );
    assert_eq!(
        Rejection::Saturated {
            profile: "decode".into()
        }
        .to_string(),
        "scheduling profile `decode`: filters left no endpoint"
    );
}

#[test]
fn header_selected_profile_runs_alone() {
    let s = Scheduler::from_yaml(&compat("pd-epp-config.yaml"), "pd").unwrap();
    let eps = [ep("p1", Some("prefill")), ep("d1", Some("decode"))];
    let prompt = tokens(0..64);
    let r = s
        .schedule(&req(&prompt, Some("prefill")), &snapshot(&eps))
        .unwrap();
    assert!(r.prefill.is_none());
    assert_eq!(
        (r.decode.endpoint.endpoint.name.as_str(), r.decode.phase),
        ("p1", Phase::Prefill)
    );
}

#[test]
fn round_robin_cycles_exactly_in_both_profiles() {
    let s = Scheduler::from_yaml(ROUND_ROBIN_CONFIG_YAML, "rr").unwrap();
    let eps = [
        ep("p0", Some("prefill")),
        ep("p1", Some("prefill")),
        ep("d0", Some("decode")),
        ep("d1", Some("decode")),
        ep("d2", Some("decode")),
    ];
    let snap = snapshot(&eps);
    let prompt = tokens(0..4);
    let (mut pre, mut dec) = (Vec::new(), Vec::new());
    for _ in 0..6 {
        let r = s.schedule(&req(&prompt, None), &snap).unwrap();
        pre.push(
            r.prefill
                .expect("always split")
                .endpoint
                .endpoint
                .name
                .clone(),
        );
        dec.push(r.decode.endpoint.endpoint.name.clone());
    }
    assert_eq!(pre, ["p0", "p1", "p0", "p1", "p0", "p1"]);
    assert_eq!(dec, ["d0", "d1", "d2", "d0", "d1", "d2"]);
}

#[test]
fn burst_of_64_spreads_exactly_over_8_equal_endpoints() {
    let yaml = "plugins:\n- type: queue-scorer\n- type: max-score-picker\n";
    let s = Scheduler::from_yaml(yaml, "q").unwrap();
    let eps: Vec<_> = (0..8).map(|i| ep(&format!("e{i}"), None)).collect();
    let snap = snapshot(&eps);
    let prompt = tokens(0..100);
    let picks: Vec<_> = (0..64)
        .map(|_| s.schedule(&req(&prompt, None), &snap).unwrap())
        .collect();
    let mut count: HashMap<String, usize> = HashMap::new();
    for p in &picks {
        *count
            .entry(p.decode.endpoint.endpoint.name.clone())
            .or_default() += 1;
    }
    assert_eq!(count.len(), 8);
    assert!(count.values().all(|n| *n == 8), "{count:?}");
    assert!(eps.iter().all(|e| e.load.in_flight() == 8));
    drop(picks);
    assert!(eps.iter().all(|e| e.load.in_flight() == 0));
}

#[test]
fn default_config_spreads_a_prefix_shared_by_every_request() {
    let s = Scheduler::from_yaml(DEFAULT_CONFIG_YAML, "default").unwrap();
    let eps: Vec<_> = (0..8)
        .map(|i| ep(&format!("d{i}"), Some("decode")))
        .collect();
    let snap = snapshot(&eps);
    let mut held = Vec::new();
    for i in 0..64u32 {
        // 512 shared tokens, then 512 tokens unique to this request.
        let mut ids: Vec<u32> = (0..512).collect();
        ids.extend((0..512).map(|t| 1_000_000 + i * 1000 + t));
        let prompt = PromptInput::Tokens(ids);
        held.push(s.schedule(&req(&prompt, None), &snap).unwrap());
    }
    let mut count: HashMap<String, usize> = HashMap::new();
    for p in &held {
        *count
            .entry(p.decode.endpoint.endpoint.name.clone())
            .or_default() += 1;
    }
    assert_eq!(count.len(), 8, "{count:?}");
    assert!(count.values().all(|n| (6..=10).contains(n)), "{count:?}");
}

#[test]
fn tied_scores_are_broken_randomly() {
    let s = Scheduler::from_yaml("plugins:\n- type: decode-filter\n", "t").unwrap();
    let eps = [ep("a", None), ep("b", None), ep("c", None)];
    let snap = snapshot(&eps);
    let prompt = tokens(0..4);
    let mut seen = HashMap::<String, usize>::new();
    for _ in 0..90 {
        let r = s.schedule(&req(&prompt, None), &snap).unwrap();
        *seen
            .entry(r.decode.endpoint.endpoint.name.clone())
            .or_default() += 1;
    }
    assert_eq!(seen.len(), 3, "{seen:?}");
}

#[test]
fn only_endpoints_serving_the_model_are_candidates() {
    let s = Scheduler::from_yaml("plugins:\n- type: decode-filter\n", "t").unwrap();
    let eps = [
        ep("serves-m", None),
        ep("serves-other", None),
        ep("unknown", None),
    ];
    eps[0].load.set_models(vec!["m".into()]);
    eps[1].load.set_models(vec!["other".into()]);
    let snap = snapshot(&eps);
    let prompt = tokens(0..4);
    let mut seen = HashMap::<String, usize>::new();
    for _ in 0..60 {
        let r = s.schedule(&req(&prompt, None), &snap).unwrap();
        *seen
            .entry(r.decode.endpoint.endpoint.name.clone())
            .or_default() += 1;
    }
    // `req` asks for model "m": never the endpoint that serves only "other"; an endpoint whose
    // model list is unknown stays a candidate.
    assert_eq!(seen.get("serves-other"), None, "{seen:?}");
    assert_eq!(seen.values().sum::<usize>(), 60);
    assert!(
        seen.contains_key("serves-m") && seen.contains_key("unknown"),
        "{seen:?}"
    );

    eps[2].load.set_models(vec!["other".into()]);
    eps[0].load.set_models(vec!["other".into()]);
    match s.schedule(&req(&prompt, None), &snap) {
        Err(pdgate_scheduler::Rejected {
            reason: e @ Rejection::NoEndpointForModel { .. },
            ..
        }) => {
            assert_eq!(e.to_string(), "no schedulable endpoint serves model `m`")
        }
        other => panic!(
            "{:?}",
            other.map(|r| r.decode.endpoint.endpoint.name.clone())
        ),
    }
}

/// Regression (issue 12, routing quality): in a fleet of `prefill-decode` endpoints the
/// default config split 498 of 500 trace requests, 442 of them with both phases on the same
/// endpoint. A split whose two picks are one endpoint now runs aggregated there; a prefill pin
/// onto the decode pick's endpoint is still honoured as a split.
#[test]
fn a_split_onto_one_prefill_decode_endpoint_runs_aggregated() {
    let s = Scheduler::from_yaml(DEFAULT_CONFIG_YAML, "default").unwrap();
    let eps = [
        ep("a", Some("prefill-decode")),
        ep("b", Some("prefill-decode")),
    ];
    // b is busy (tokens booked as kv-cost-scorer reads them): both profiles prefer a.
    let _busy = pdgate_scheduler::TokenGuard::book(&eps[1].load, 10_000, 20_000);
    let snap = snapshot(&eps);
    let prompt = tokens(0..4096); // 256 uncached blocks: the decider splits
    for _ in 0..20 {
        let r = s.schedule(&req(&prompt, None), &snap).unwrap();
        assert!(
            r.prefill.is_none(),
            "prefill on {:?}",
            r.prefill.as_ref().map(|p| &p.endpoint.endpoint.name)
        );
        assert_eq!(
            (r.decode.endpoint.endpoint.name.as_str(), r.decode.phase),
            ("a", Phase::Aggregated)
        );
    }
    // Phases as `(prefill endpoint, phase) + (decode endpoint, phase)` with prefill pinned.
    let pinned = |to: &str| {
        let h = pdgate_api::hints::RoutingHints::parse(
            |n| (n == "x-prefill-instance-id").then_some(to),
            &pdgate_api::RawObject::parse("{}".into()).unwrap(),
        )
        .unwrap();
        let r = s
            .schedule(
                &SchedulingRequest {
                    hints: Some(&h),
                    ..req(&prompt, None)
                },
                &snap,
            )
            .unwrap();
        let pre = r.prefill.as_ref().expect("a pinned prefill splits");
        (
            (pre.endpoint.endpoint.name.clone(), pre.phase),
            (r.decode.endpoint.endpoint.name.clone(), r.decode.phase),
        )
    };
    // A prefill pin on a asks for a split there: honoured.
    assert_eq!(
        pinned("a"),
        (("a".into(), Phase::Prefill), ("a".into(), Phase::Decode))
    );
    // Picks on different endpoints still split: prefill pinned to b, decode on a.
    assert_eq!(
        pinned("b"),
        (("b".into(), Phase::Prefill), ("a".into(), Phase::Decode))
    );
}
