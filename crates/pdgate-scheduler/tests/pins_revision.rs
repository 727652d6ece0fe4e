//! A pin in one phase fixes the revision for the whole request (design.md §5.3): the other
//! phase stays in the pinned endpoint's revision, and when that revision lacks the other
//! role the request is refused with 503 and that reason.

mod common;

use common::snapshot;
use pdgate_api::hints::RoutingHints;
use pdgate_api::PromptInput;
use pdgate_scheduler::{
    Endpoint, EndpointLoad, EndpointState, Rejection, Scheduler, SchedulingRequest,
    DEFAULT_CONFIG_YAML,
};
use std::collections::BTreeMap;
use std::sync::Arc;

fn ep(name: &str, role: &str, rev: &str) -> Arc<EndpointState> {
    let labels = BTreeMap::from([
        ("llm-d.ai/role".to_string(), role.to_string()),
        (
            "disaggregatedset.x-k8s.io/revision".to_string(),
            rev.to_string(),
        ),
    ]);
    Arc::new(EndpointState {
        endpoint: Endpoint::new(name, format!("{name}:8000"), labels),
        load: Arc::new(EndpointLoad::default()),
    })
}

fn hints(pairs: &[(&str, &str)]) -> RoutingHints {
    RoutingHints::parse(
        |n| pairs.iter().find(|(k, _)| *k == n).map(|(_, v)| *v),
        &pdgate_api::RawObject::parse("{}".into()).unwrap(),
    )
    .unwrap()
}

#[test]
fn the_other_phase_stays_in_the_pinned_revision_or_the_request_is_503() {
    let s = Scheduler::from_yaml(DEFAULT_CONFIG_YAML, "default").unwrap();
    let eps = [
        ep("p-a", "prefill", "a"),
        ep("p-b", "prefill", "b"),
        ep("d-b", "decode", "b"),
    ];
    let snap = snapshot(&eps);
    let prompt = PromptInput::Tokens((0..64).collect());
    // Decode pinned to d-b (revision b): prefill always p-b, never p-a.
    let h = hints(&[("x-worker-instance-id", "d-b")]);
    for _ in 0..50 {
        let r = s
            .schedule(
                &SchedulingRequest {
                    hints: Some(&h),
                    ..SchedulingRequest::new("r", "m", &prompt)
                },
                &snap,
            )
            .unwrap();
        assert_eq!(r.prefill.unwrap().endpoint.endpoint.name, "p-b");
        assert_eq!(r.decode.endpoint.endpoint.name, "d-b");
    }
    // Prefill pinned to p-a (revision a), which has no decode endpoint: 503 with the reason.
    let h = hints(&[("x-prefill-instance-id", "p-a")]);
    let e = s
        .schedule(
            &SchedulingRequest {
                hints: Some(&h),
                ..SchedulingRequest::new("r", "m", &prompt)
            },
            &snap,
        )
        .unwrap_err();
    assert_eq!(
        e.reason,
        Rejection::Pin {
            kind: pdgate_scheduler::PinFault::Unavailable,
            reason: "pinned_revision_incomplete",
            message: "the pinned endpoint's revision `a` has no endpoint for scheduling profile \
                      `decode`"
                .into()
        }
    );
    assert!(eps.iter().all(|e| e.load.in_flight() == 0));
}
