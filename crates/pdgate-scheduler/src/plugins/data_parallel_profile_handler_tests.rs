//! Unit tests of `data_parallel_profile_handler.rs`.

use super::*;
use crate::plugins::testutil::ep;
use crate::request::SchedulingRequest;
use crate::{Endpoint, EndpointLoad, EndpointState, Scheduler, Snapshot};
use pdgate_api::PromptInput;
use std::collections::BTreeMap;

fn build_with(params: &str, profiles: &[&str]) -> Result<Built, PluginError> {
    let v: Value = serde_yaml_ng::from_str(params).unwrap();
    let profiles: Vec<String> = profiles.iter().map(|s| s.to_string()).collect();
    let mut ctx = BuildCtx {
        built: &[],
        profiles: &profiles,
        next_slot: 0,
    };
    build(Some(&v), &mut ctx)
}

#[test]
fn routes_through_the_primary_port() {
    assert_eq!(
        route_to("10.0.0.1:8001", 8000),
        DataParallelRoute {
            host_port: "10.0.0.1:8001".into(),
            destination: "10.0.0.1:8000".into(),
        }
    );
    assert_eq!(
        route_to("[fd00::3]:8002", 9000).destination,
        "[fd00::3]:9000"
    );
    assert_eq!(route_to("pod-a.ns:8003", 80).destination, "pod-a.ns:80");
    // No port: the whole address is the host.
    assert_eq!(route_to("pod-a", 8000).destination, "pod-a:8000");
    assert_eq!(route_to("[fd00::3]", 8000).destination, "[fd00::3]:8000");
    assert_eq!(route_to("fd00::3", 8000).destination, "fd00::3:8000");
}

#[test]
fn parameters_default_and_are_validated() {
    let b = build_with("{}", &["default"]).unwrap();
    assert_eq!(
        serde_yaml_ng::to_string(&b.params).unwrap(),
        "primaryPort: 8000\n"
    );
    let b = build_with("primaryPort: 65535", &["default"]).unwrap();
    assert_eq!(
        serde_yaml_ng::to_string(&b.params).unwrap(),
        "primaryPort: 65535\n"
    );
    for bad in [0, -1, 65536] {
        let e = build_with(&format!("primaryPort: {bad}"), &["default"])
            .err()
            .expect("refused");
        assert_eq!(e.path.as_deref(), Some("primaryPort"));
        assert_eq!(e.message, format!("must be between 1 and 65535, got {bad}"));
    }
    let e = build_with("primaryPort: x", &["default"])
        .err()
        .expect("refused");
    assert_eq!(e.path.as_deref(), Some("primaryPort"));
    let e = build_with("port: 1", &["default"]).err().expect("refused");
    assert_eq!(e.key.as_deref(), Some("port"));
    let e = build_with("{}", &["a", "b"]).err().expect("refused");
    assert_eq!(
        e.message,
        "needs exactly one scheduling profile (it routes one pick to a rank), found 2"
    );
}

fn rank(pod: &str, i: u32, port: u16) -> Arc<EndpointState> {
    let mut labels = BTreeMap::new();
    labels.insert(pdgate_api::labels::ROLE.to_string(), "decode".to_string());
    let mut e = Endpoint::new(
        pdgate_api::labels::rank_endpoint_name(pod, i),
        format!("10.0.0.7:{port}"),
        labels,
    );
    e.dp_rank = Some(i);
    Arc::new(EndpointState {
        endpoint: e,
        load: Arc::new(EndpointLoad::default()),
    })
}

#[test]
fn the_pick_keeps_its_rank_route() {
    let yaml = "plugins:\n- type: decode-filter\n- type: queue-scorer\n\
                    - type: data-parallel-profile-handler\n  parameters: {primaryPort: 8000}\n\
                    schedulingProfiles:\n- name: default\n  plugins:\n  - pluginRef: decode-filter\n  \
                    - pluginRef: queue-scorer\n";
    let s = Scheduler::from_yaml(yaml, "dp.yaml").unwrap();
    assert_eq!(s.profile_for(Phase::Encode), None);
    // Rank 0 is busier: the queue scorer picks rank 1, at port 8001.
    let snapshot = Snapshot {
        endpoints: vec![rank("pod", 0, 8000), rank("pod", 1, 8001)],
        version: 1,
    };
    snapshot.endpoints[0]
        .load
        .set_scraped(Some(3.0), Some(0.0), None);
    let prompt = PromptInput::Text("hello".into());
    let r = s
        .schedule(&SchedulingRequest::new("r", "m", &prompt), &snapshot)
        .unwrap();
    assert_eq!(r.decode.endpoint.endpoint.name, "pod-rank-1");
    assert_eq!(r.decode.phase, Phase::Aggregated);
    assert_eq!(
        route_of(r.decode.guard.state()),
        Some(DataParallelRoute {
            host_port: "10.0.0.7:8001".into(),
            destination: "10.0.0.7:8000".into(),
        })
    );
    // Another handler keeps no route.
    let single = Scheduler::from_yaml(
        "plugins:\n- type: queue-scorer\nschedulingProfiles:\n- name: default\n  plugins:\n  \
             - pluginRef: queue-scorer\n",
        "single.yaml",
    )
    .unwrap();
    let snapshot = Snapshot {
        endpoints: vec![ep("a", None)],
        version: 1,
    };
    let r = single
        .schedule(&SchedulingRequest::new("r", "m", &prompt), &snapshot)
        .unwrap();
    assert_eq!(route_of(r.decode.guard.state()), None);
}
