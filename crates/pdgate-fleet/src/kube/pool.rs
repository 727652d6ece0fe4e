//! The `InferencePool` a Gateway routes to (Gateway API Inference Extension), read from its
//! JSON: which pods are in the pool and which of their ports serve.
//!
//! Two API versions, by the pool's group (llm-d's `--pool-group`):
//! - `inference.networking.k8s.io/v1`: `spec.selector.matchLabels` (a map; `matchExpressions`
//!   is not part of the v1 pool selector), `spec.targetPorts[].number` (1–8 ports; port *i*
//!   of a pod is its data-parallel rank *i*), `spec.appProtocol` (`http`, the default, or
//!   `kubernetes.io/h2c`).
//! - `inference.networking.x-k8s.io/v1alpha2` (the older pools): `spec.selector` (a map) and
//!   `spec.targetPortNumber` (one port).

use serde::Deserialize;
use std::collections::BTreeMap;

/// Group of the v1 `InferencePool` (llm-d's default `--pool-group`).
pub const GROUP_V1: &str = "inference.networking.k8s.io";
/// Group of the older `v1alpha2` pools.
pub const GROUP_V1ALPHA2: &str = "inference.networking.x-k8s.io";
/// Most target ports of a v1 pool (the CRD's `maxItems`).
pub const MAX_TARGET_PORTS: usize = 8;

/// The API version served for a pool group: `v1` for [`GROUP_V1`], `v1alpha2` for
/// [`GROUP_V1ALPHA2`].
///
/// Errors: another group, naming `--pool-group` and the accepted ones.
pub fn version_of(group: &str) -> Result<&'static str, String> {
    match group {
        GROUP_V1 => Ok("v1"),
        GROUP_V1ALPHA2 => Ok("v1alpha2"),
        other => Err(format!(
            "--pool-group {other:?} is not an InferencePool group (expected {GROUP_V1} or {GROUP_V1ALPHA2})"
        )),
    }
}

/// What pdgate reads of a pool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolSpec {
    /// Labels a pod must carry (all of them).
    pub selector: BTreeMap<String, String>,
    /// The serving ports of each pod, in rank order.
    pub ports: Vec<u16>,
}

impl PoolSpec {
    /// The selector as a Kubernetes label selector string (`k1=v1,k2=v2`, keys sorted).
    pub fn selector_string(&self) -> String {
        self.selector
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(",")
    }
}

#[derive(Deserialize)]
struct Pool<S> {
    spec: S,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SpecV1 {
    selector: SelectorV1,
    #[serde(default)]
    target_ports: Vec<PortV1>,
    app_protocol: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SelectorV1 {
    #[serde(default)]
    match_labels: BTreeMap<String, String>,
}

#[derive(Deserialize)]
struct PortV1 {
    number: i64,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SpecV1alpha2 {
    #[serde(default)]
    selector: BTreeMap<String, String>,
    target_port_number: i64,
}

/// Reads a pool object (`{"spec": …}` plus whatever else the API server sends) of `group`.
///
/// Errors: a message naming the field: a missing or ill-typed `spec` field, no selector
/// labels (a pool that selects every pod is refused), no port, more than
/// [`MAX_TARGET_PORTS`], a port outside 1–65535, a port given twice, an `appProtocol` other
/// than `http` (pdgate speaks HTTP/1.1 to engines).
pub fn parse(group: &str, object: &serde_json::Value) -> Result<PoolSpec, String> {
    let spec_error = |e: serde_json::Error| {
        format!(
            "spec: {}",
            pdgate_api::serde_text::plain_expectation(&e.to_string())
        )
    };
    let (selector, raw_ports) = if group == GROUP_V1ALPHA2 {
        let p: Pool<SpecV1alpha2> = serde_json::from_value(object.clone()).map_err(spec_error)?;
        (p.spec.selector, vec![p.spec.target_port_number])
    } else {
        let p: Pool<SpecV1> = serde_json::from_value(object.clone()).map_err(spec_error)?;
        if let Some(proto) = p.spec.app_protocol.filter(|a| a != "http") {
            return Err(format!(
                "spec.appProtocol {proto:?} is not supported (pdgate speaks http to engines)"
            ));
        }
        let ports = p.spec.target_ports.iter().map(|p| p.number).collect();
        (p.spec.selector.match_labels, ports)
    };
    if selector.is_empty() {
        return Err("spec.selector: no labels (a pool must select its pods by label)".into());
    }
    if raw_ports.is_empty() {
        return Err("spec.targetPorts: at least one port is needed".into());
    }
    if raw_ports.len() > MAX_TARGET_PORTS {
        return Err(format!(
            "spec.targetPorts: {} ports, at most {MAX_TARGET_PORTS}",
            raw_ports.len()
        ));
    }
    let mut ports = Vec::with_capacity(raw_ports.len());
    for (i, n) in raw_ports.into_iter().enumerate() {
        let port = u16::try_from(n)
            .ok()
            .filter(|p| *p != 0)
            .ok_or_else(|| format!("spec.targetPorts[{i}].number {n} is not a port (1-65535)"))?;
        if ports.contains(&port) {
            return Err(format!(
                "spec.targetPorts[{i}].number {port} is given twice"
            ));
        }
        ports.push(port);
    }
    Ok(PoolSpec { selector, ports })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn v1_and_v1alpha2_pools() {
        let v1 = json!({"apiVersion": "inference.networking.k8s.io/v1", "kind": "InferencePool",
            "metadata": {"name": "p"},
            "spec": {"selector": {"matchLabels": {"app": "vllm", "llm-d.ai/inference-serving": "true"}},
                     "targetPorts": [{"number": 8000}, {"number": 8001}],
                     "endpointPickerRef": {"name": "epp", "port": {"number": 9002}}}});
        let spec = parse(GROUP_V1, &v1).unwrap();
        assert_eq!(spec.ports, vec![8000, 8001]);
        assert_eq!(
            spec.selector_string(),
            "app=vllm,llm-d.ai/inference-serving=true"
        );
        let old = json!({"spec": {"selector": {"app": "vllm"}, "targetPortNumber": 8000,
            "extensionRef": {"name": "epp"}}});
        assert_eq!(parse(GROUP_V1ALPHA2, &old).unwrap().ports, vec![8000]);
        assert_eq!(version_of(GROUP_V1).unwrap(), "v1");
        assert!(version_of("example.com")
            .unwrap_err()
            .contains("--pool-group \"example.com\""));
    }

    #[test]
    fn bad_pools_name_the_field() {
        let with = |spec: serde_json::Value| parse(GROUP_V1, &json!({ "spec": spec })).unwrap_err();
        let sel = json!({"matchLabels": {"app": "v"}});
        assert!(
            with(json!({"selector": {}, "targetPorts": [{"number": 1}]}))
                .starts_with("spec.selector")
        );
        assert!(with(json!({"selector": sel, "targetPorts": []})).starts_with("spec.targetPorts"));
        assert!(
            with(json!({"selector": sel, "targetPorts": [{"number": 70000}]}))
                .starts_with("spec.targetPorts[0].number 70000")
        );
        assert!(
            with(json!({"selector": sel, "targetPorts": [{"number": 80}, {"number": 80}]}))
                .contains("given twice")
        );
        let nine: Vec<_> = (1..=9).map(|n| json!({ "number": n })).collect();
        assert!(with(json!({"selector": sel, "targetPorts": nine})).contains("at most 8"));
        assert!(
            with(json!({"selector": sel, "targetPorts": [{"number": 80}],
            "appProtocol": "kubernetes.io/h2c"}))
            .starts_with("spec.appProtocol")
        );
        assert!(with(json!({"targetPorts": [{"number": 80}]})).contains("selector"));
        // Ill-typed parts say what shape was expected, never a Rust type name.
        assert_eq!(
            with(json!(5)),
            "spec: invalid type: integer `5`, expected a mapping"
        );
        assert_eq!(
            with(json!({"selector": 5, "targetPorts": [{"number": 80}]})),
            "spec: invalid type: integer `5`, expected a mapping"
        );
    }
}
