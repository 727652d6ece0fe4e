//! Pods to endpoints (pure): what a pool's pods mean to the scheduler.
//!
//! - Address: `status.podIP` and each of the pool's ports (`[ip]:port` for IPv6). A pod
//!   without an IP (not scheduled or not started yet) is skipped.
//! - Name: the pod's name with one port; with several, port *i* is endpoint
//!   `<pod>-rank-<i>` with data-parallel rank *i* (as llm-d's EPP names them, and as the
//!   endpoints file's `dp_size` does).
//! - Labels: the pod's labels (`llm-d.ai/role`, `disaggregatedset.x-k8s.io/revision`, …). A
//!   pod whose `llm-d.ai/role` is not a role pdgate knows is skipped and named in the log:
//!   routing it as unlabeled would send it traffic of every kind.
//! - Ready: condition `Ready=True` and no `metadata.deletionTimestamp`; a pod being deleted
//!   is kept as `terminating` (no new traffic, its in-flight requests still counted) until
//!   its DELETE.

use k8s_openapi::api::core::v1::Pod;
use pdgate_api::{labels, Role};
use pdgate_scheduler::Endpoint;

/// A pod that was left out of the endpoint list, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    /// `metadata.name`.
    pub pod: String,
    /// Why (e.g. "no podIP yet").
    pub reason: String,
}

/// The endpoints of `pods` serving on `ports` (rank order), sorted by name, and the pods
/// left out.
pub fn endpoints<'a>(
    pods: impl IntoIterator<Item = &'a Pod>,
    ports: &[u16],
) -> (Vec<Endpoint>, Vec<Skipped>) {
    let mut out = Vec::new();
    let mut skipped = Vec::new();
    for pod in pods {
        let name = pod.metadata.name.clone().unwrap_or_default();
        let skip = |reason: String| Skipped {
            pod: name.clone(),
            reason,
        };
        let Some(ip) = pod.status.as_ref().and_then(|s| s.pod_ip.as_deref()) else {
            skipped.push(skip("no podIP yet".into()));
            continue;
        };
        let pod_labels = pod.metadata.labels.clone().unwrap_or_default();
        if let Some(role) = pod_labels.get(labels::ROLE) {
            if let Err(e) = role.parse::<Role>() {
                skipped.push(skip(format!("label {}: {e}", labels::ROLE)));
                continue;
            }
        }
        let terminating = pod.metadata.deletion_timestamp.is_some();
        let ready = !terminating && is_ready(pod);
        let host = match ip.contains(':') {
            true => format!("[{ip}]"),
            false => ip.to_string(),
        };
        for (rank, port) in ports.iter().enumerate() {
            let (ep_name, dp_rank) = match ports.len() {
                1 => (name.clone(), None),
                _ => (
                    pdgate_api::labels::rank_endpoint_name(&name, rank),
                    Some(rank as u32),
                ),
            };
            let mut ep = Endpoint::new(ep_name, format!("{host}:{port}"), pod_labels.clone());
            ep.ready = ready;
            ep.terminating = terminating;
            ep.dp_rank = dp_rank;
            out.push(ep);
        }
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    (out, skipped)
}

/// True when the pod's `Ready` condition is `True`.
fn is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn pod(name: &str, ip: Option<&str>, ready: bool, role: &str) -> Pod {
        let mut p = pdgate_sim::kube_api::pod("ns", name, "", ready, &[(labels::ROLE, role)]);
        p.status.as_mut().unwrap().pod_ip = ip.map(Into::into);
        p
    }

    #[test]
    fn ranks_readiness_terminating_and_skips() {
        let mut gone = pod("d-1", Some("10.0.0.2"), true, "decode");
        gone.metadata.deletion_timestamp = Some(Time(Default::default()));
        let pods = [
            pod("p-0", Some("10.0.0.1"), true, "prefill"),
            gone,
            pod("d-0", Some("fd00::3"), false, "decode"),
            pod("pending", None, false, "decode"),
            pod("typo", Some("10.0.0.9"), true, "prefil"),
        ];
        let (eps, skipped) = endpoints(&pods, &[8000]);
        let view: Vec<_> = eps
            .iter()
            .map(|e| (e.name.as_str(), e.address.as_str(), e.ready, e.terminating))
            .collect();
        assert_eq!(
            view,
            [
                ("d-0", "[fd00::3]:8000", false, false),
                ("d-1", "10.0.0.2:8000", false, true),
                ("p-0", "10.0.0.1:8000", true, false),
            ]
        );
        assert_eq!(eps[2].role, Some(Role::Prefill));
        assert_eq!(skipped.len(), 2);
        assert_eq!(skipped[0].pod, "pending");
        assert!(skipped[1].reason.contains("llm-d.ai/role"));

        let (eps, _) = endpoints(&pods[..1], &[8000, 8001]);
        let view: Vec<_> = eps
            .iter()
            .map(|e| (e.name.as_str(), e.address.as_str(), e.dp_rank))
            .collect();
        assert_eq!(
            view,
            [
                ("p-0-rank-0", "10.0.0.1:8000", Some(0)),
                ("p-0-rank-1", "10.0.0.1:8001", Some(1))
            ]
        );
    }
}
