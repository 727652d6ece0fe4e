// Shared helpers of the rollout-screener tests (included with `mod rollout_fleet;`).
#![allow(dead_code)]

use pdgate_api::labels::{DS_NAME, DS_REVISION, DS_ROLE, ROLE};
use pdgate_api::PromptInput;
use pdgate_scheduler::{
    Endpoint, EndpointLoad, EndpointState, Pick, RequestHeaders, Scheduler, SchedulingRequest,
    Snapshot, DEFAULT_CONFIG_YAML,
};
use std::collections::BTreeMap;
use std::sync::Arc;

/// An endpoint of set `set`, revision `rev`, role `role` (both role labels).
pub fn member(set: &str, rev: &str, role: &str, i: usize) -> Arc<EndpointState> {
    let name = format!("{set}-{rev}-{role}-{i}");
    let labels: BTreeMap<String, String> = [
        (ROLE, role),
        (DS_NAME, set),
        (DS_REVISION, rev),
        (DS_ROLE, role),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    Arc::new(EndpointState {
        endpoint: Endpoint::new(name.clone(), format!("{name}:8000"), labels),
        load: Arc::new(EndpointLoad::default()),
    })
}

/// Set `my-set` with `(revision, prefill count, decode count)` each.
pub fn fleet(revs: &[(&str, usize, usize)]) -> Vec<Arc<EndpointState>> {
    let mut out = Vec::new();
    for (rev, p, d) in revs {
        out.extend((0..*p).map(|i| member("my-set", rev, "prefill", i)));
        out.extend((0..*d).map(|i| member("my-set", rev, "decode", i)));
    }
    out
}

pub fn snap(eps: &[Arc<EndpointState>], version: u64) -> Snapshot {
    Snapshot {
        endpoints: eps.to_vec(),
        version,
    }
}

/// The built-in P/D config with the screener first; `params` is the YAML under
/// `parameters:` indented by four spaces (empty: defaults).
pub fn config(params: &str) -> String {
    let mut entry =
        "\nplugins:\n- type: disaggregatedset-rollout-screener\n  name: rollout-screener\n"
            .to_string();
    if !params.is_empty() {
        entry.push_str("  parameters:\n");
        for line in params.lines() {
            entry.push_str("    ");
            entry.push_str(line);
            entry.push('\n');
        }
    }
    let yaml = DEFAULT_CONFIG_YAML.replacen("\nplugins:\n", &entry, 1);
    assert!(yaml.contains("rollout-screener"));
    yaml
}

pub fn sched(params: &str) -> Scheduler {
    Scheduler::from_yaml(&config(params), "rollout.yaml").unwrap()
}

pub fn prompt() -> PromptInput {
    PromptInput::Tokens((0..64).collect())
}

pub fn request<'a>(
    prompt: &'a PromptInput,
    headers: &'a dyn RequestHeaders,
    conditional: bool,
) -> SchedulingRequest<'a> {
    SchedulingRequest {
        conditional,
        headers,
        ..SchedulingRequest::new("r", "m", prompt)
    }
}

/// The revision label of a pick.
pub fn rev(p: &Pick) -> String {
    p.endpoint
        .endpoint
        .revision()
        .unwrap_or_default()
        .to_string()
}

pub const REV: &str = "x-llm-d-disagg-revision";
