//! `session-affinity-scorer` through `Scheduler`: the token pins a session against the load
//! scorers, its absence leaves them in charge, and the response stamps the primary pick.

mod common;

use common::{ep, snapshot};
use pdgate_api::PromptInput;
use pdgate_scheduler::{Scheduler, SchedulingRequest};
use std::collections::BTreeMap;

const CONFIG: &str = "plugins:\n- type: decode-filter\n- type: session-affinity-scorer\n\
                      - type: queue-scorer\nschedulingProfiles:\n- name: default\n  plugins:\n  \
                      - pluginRef: decode-filter\n  - pluginRef: session-affinity-scorer\n    \
                      weight: 10\n  - pluginRef: queue-scorer\n";

const TOKEN_D3: &str = "ZDM="; // base64("d3")

/// Schedules 20 requests, holding every result (its booking) until the end; returns the
/// number of picks per endpoint.
fn twenty(token: Option<&str>) -> BTreeMap<String, usize> {
    let s = Scheduler::from_yaml(CONFIG, "test").unwrap();
    let eps = [
        ep("d1", Some("decode")),
        ep("d2", Some("decode")),
        ep("d3", Some("decode")),
    ];
    let snap = snapshot(&eps);
    let prompt = PromptInput::Tokens((0..64).collect());
    let headers = [("x-session-token", token.unwrap_or_default())];
    let mut held = Vec::new();
    let mut count = BTreeMap::new();
    for _ in 0..20 {
        let req = match token {
            Some(_) => SchedulingRequest {
                headers: &headers,
                ..SchedulingRequest::new("r", "m", &prompt)
            },
            None => SchedulingRequest::new("r", "m", &prompt),
        };
        let r = s.schedule(&req, &snap).unwrap();
        *count
            .entry(r.decode.endpoint.endpoint.name.clone())
            .or_insert(0) += 1;
        held.push(r);
    }
    count
}

#[test]
fn token_pins_every_request_to_its_endpoint_despite_load() {
    let count = twenty(Some(TOKEN_D3));
    assert_eq!(count, BTreeMap::from([("d3".to_string(), 20)]));
}

#[test]
fn without_token_the_load_scorer_spreads_requests() {
    let count = twenty(None);
    assert_eq!(count.len(), 3, "{count:?}");
    assert!(count.values().all(|&n| n >= 1), "{count:?}");
    assert_eq!(count.values().sum::<usize>(), 20);
}

#[test]
fn response_carries_the_token_of_the_endpoint_that_served() {
    let s = Scheduler::from_yaml(CONFIG, "test").unwrap();
    let eps = [ep("d1", Some("decode")), ep("d2", Some("decode"))];
    let snap = snapshot(&eps);
    let prompt = PromptInput::Tokens(vec![1, 2, 3]);
    let r = s
        .schedule(&SchedulingRequest::new("r", "m", &prompt), &snap)
        .unwrap();
    let name = r.decode.endpoint.endpoint.name.clone();
    let want = if name == "d1" { "ZDE=" } else { "ZDI=" };
    assert_eq!(
        s.response_received(&r.decode, 200),
        vec![("x-session-token".to_string(), want.to_string())]
    );
    assert!(s.response_received(&r.decode, 503).is_empty());

    // The client echoes it back: the next request lands on the same endpoint.
    let headers = [("x-session-token", want)];
    let again = SchedulingRequest {
        headers: &headers,
        ..SchedulingRequest::new("r2", "m", &prompt)
    };
    for _ in 0..5 {
        let r2 = s.schedule(&again, &snap).unwrap();
        assert_eq!(r2.decode.endpoint.endpoint.name, name);
    }
}

#[test]
fn split_request_stamps_the_decode_pick_not_the_prefill_pick() {
    let yaml = "plugins:\n- type: prefill-filter\n- type: decode-filter\n\
                - type: session-affinity-scorer\n- type: always-disagg-pd-decider\n\
                - type: disagg-profile-handler\n  parameters:\n    deciders:\n      \
                prefill: always-disagg-pd-decider\nschedulingProfiles:\n- name: prefill\n  \
                plugins:\n  - pluginRef: prefill-filter\n- name: decode\n  plugins:\n  \
                - pluginRef: decode-filter\n  - pluginRef: session-affinity-scorer\n    weight: 10\n";
    let s = Scheduler::from_yaml(yaml, "test").unwrap();
    let eps = [
        ep("p1", Some("prefill")),
        ep("d1", Some("decode")),
        ep("d2", Some("decode")),
    ];
    let snap = snapshot(&eps);
    let prompt = PromptInput::Tokens(vec![1, 2, 3]);
    let headers = [("x-session-token", "ZDI=")];
    let req = SchedulingRequest {
        headers: &headers,
        ..SchedulingRequest::new("r", "m", &prompt)
    };
    let r = s.schedule(&req, &snap).unwrap();
    let prefill = r.prefill.as_ref().expect("split");
    assert_eq!(prefill.endpoint.endpoint.name, "p1");
    assert_eq!(r.decode.endpoint.endpoint.name, "d2");
    assert!(s.response_received(prefill, 200).is_empty());
    assert_eq!(
        s.response_received(&r.decode, 200),
        vec![("x-session-token".to_string(), "ZDI=".to_string())]
    );
}

#[test]
fn parameters_are_rejected() {
    let yaml = "plugins:\n- type: session-affinity-scorer\n  parameters:\n    \
                headerName: x-session-token\nschedulingProfiles:\n- name: default\n  plugins:\n  \
                - pluginRef: session-affinity-scorer\n";
    let err = Scheduler::from_yaml(yaml, "test").err().expect("rejected");
    assert!(err.to_string().contains("headerName"), "{err}");
}
