//! Scheduling with the header profile handler, the selector filters and the load scorers.

mod common;

use common::{ep, snapshot};
use pdgate_api::{Phase, PromptInput};
use pdgate_scheduler::{
    Endpoint, EndpointLoad, EndpointState, InFlightGuard, Rejection, Scheduler, SchedulingRequest,
};
use std::collections::BTreeMap;
use std::sync::Arc;

fn req<'a>(prompt: &'a PromptInput, profile: Option<&'a str>) -> SchedulingRequest<'a> {
    SchedulingRequest {
        profile,
        ..SchedulingRequest::new("r1", "m", prompt)
    }
}

const EPD: &str = "plugins:\n- type: encode-filter\n- type: prefill-filter\n- type: decode-filter\n\
                   - type: header-profile-handler\nschedulingProfiles:\n- name: encode\n  plugins:\n  \
                   - pluginRef: encode-filter\n- name: prefill\n  plugins:\n  - pluginRef: prefill-filter\n\
                   - name: decode\n  plugins:\n  - pluginRef: decode-filter\n";

#[test]
fn header_profile_handler_runs_the_named_profile_or_the_default() {
    let s = Scheduler::from_yaml(EPD, "epd").unwrap();
    let eps = [
        ep("e", Some("encode")),
        ep("p", Some("prefill")),
        ep("d", Some("decode")),
    ];
    let snap = snapshot(&eps);
    let prompt = PromptInput::Tokens(vec![1, 2, 3]);
    let pick = |h: Option<&str>| {
        let r = s.schedule(&req(&prompt, h), &snap).unwrap();
        assert!(r.prefill.is_none());
        (
            r.decode.endpoint.endpoint.name.clone(),
            r.decode.phase,
            r.decode.profile.clone(),
        )
    };
    assert_eq!(
        pick(Some("prefill")),
        ("p".into(), Phase::Prefill, "prefill".into())
    );
    assert_eq!(
        pick(Some("encode")),
        ("e".into(), Phase::Encode, "encode".into())
    );
    assert_eq!(pick(None), ("d".into(), Phase::Decode, "decode".into()));
    assert_eq!(
        pick(Some("  ")),
        ("d".into(), Phase::Decode, "decode".into())
    );
    assert_eq!(
        s.schedule(&req(&prompt, Some("nope")), &snap)
            .unwrap_err()
            .reason,
        Rejection::UnknownProfile("nope".into())
    );
    assert_eq!(eps.iter().map(|e| e.load.in_flight()).sum::<u32>(), 0);
}

#[test]
fn header_profile_handler_with_one_profile_ignores_the_header() {
    let yaml = "plugins:\n- type: decode-filter\n- type: header-profile-handler\n";
    let s = Scheduler::from_yaml(yaml, "one").unwrap();
    let eps = [ep("d", Some("decode"))];
    let prompt = PromptInput::Tokens(vec![1]);
    let r = s
        .schedule(&req(&prompt, Some("prefill")), &snapshot(&eps))
        .unwrap();
    assert_eq!(
        (r.decode.endpoint.endpoint.name.as_str(), r.decode.phase),
        ("d", Phase::Aggregated)
    );
    // Without the header handler, a header naming no profile is still a 400.
    let plain = Scheduler::from_yaml("plugins:\n- type: decode-filter\n", "plain").unwrap();
    assert_eq!(
        plain
            .schedule(&req(&prompt, Some("prefill")), &snapshot(&eps))
            .unwrap_err()
            .reason,
        Rejection::UnknownProfile("prefill".into())
    );
}

fn labelled(name: &str, labels: &[(&str, &str)]) -> Arc<EndpointState> {
    let labels: BTreeMap<String, String> = labels
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Arc::new(EndpointState {
        endpoint: Endpoint::new(name, format!("{name}:8000"), labels),
        load: Arc::new(EndpointLoad::default()),
    })
}

#[test]
fn selector_then_active_and_running_scores_pick_exactly() {
    let yaml = "plugins:\n- type: label-selector-filter\n  name: gpu\n  parameters:\n    matchExpressions:\n    \
                - key: gpu\n      operator: In\n      values: [h100]\n- type: active-request-scorer\n\
                - type: running-requests-size-scorer\nschedulingProfiles:\n- name: default\n  plugins:\n  \
                - pluginRef: gpu\n  - pluginRef: active-request-scorer\n    weight: 2\n  \
                - pluginRef: running-requests-size-scorer\n";
    let s = Scheduler::from_yaml(yaml, "t").unwrap();
    let eps = [
        labelled("a", &[("gpu", "h100")]),
        labelled("b", &[("gpu", "h100")]),
        labelled("c", &[("gpu", "h100")]),
        labelled("x", &[("gpu", "a100")]), // filtered out although idle
    ];
    let _a = [
        InFlightGuard::book(&eps[0].load),
        InFlightGuard::book(&eps[0].load),
    ];
    let _b = InFlightGuard::book(&eps[1].load);
    eps[0].load.set_scraped(Some(0.0), None, None);
    eps[1].load.set_scraped(Some(4.0), None, None);
    eps[2].load.set_scraped(Some(8.0), None, None);
    // a: 2·0 + 1 = 1.0; b: 2·0.5 + 0.5 = 1.5; c: 2·1 + 0 = 2.0.
    let prompt = PromptInput::Tokens(vec![1]);
    let r = s.schedule(&req(&prompt, None), &snapshot(&eps)).unwrap();
    assert_eq!(r.decode.endpoint.endpoint.name, "c");
    // c now has 1 booking: a 2·0 + 1 = 1.0; b 2·0.5 + 0.5 = 1.5; c 2·0.5 + 0 = 1.0 → b.
    let r2 = s.schedule(&req(&prompt, None), &snapshot(&eps)).unwrap();
    assert_eq!(r2.decode.endpoint.endpoint.name, "b");
}
