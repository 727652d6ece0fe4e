//! `topology-extractor` — each endpoint's locality (host, rack, zone, region), from its labels.
//!
//! - **Type:** `topology-extractor`
//! - **Extension points:** data producer: the `Topology` of every endpoint, read by
//!   `topology-affinity-filter` and `topology-affinity-scorer` (which name it by
//!   `topologyProducerName`, default `topology-extractor`).
//! - **Parameters:** the label keys to read, each an empty string meaning its default:
//!   `hostname` (default [`DEFAULT_HOSTNAME_LABEL`] `kubernetes.io/hostname`), `rack`
//!   ([`DEFAULT_RACK_LABEL`] `topology.kubernetes.io/rack`), `zone` ([`DEFAULT_ZONE_LABEL`]
//!   `topology.kubernetes.io/zone`), `region` ([`DEFAULT_REGION_LABEL`]
//!   `topology.kubernetes.io/region`).
//! - **Inputs:** the endpoint's labels (Kubernetes pod labels, or the endpoints file's).
//! - **Outputs:** [`Topology`] = the four label values; an absent or empty label is an
//!   unknown field, and an endpoint whose four fields are all unknown has no topology.
//!   [`Topology::compare`] gives the tightest level two topologies share ([`Level`]): a field
//!   matches only when both values are non-empty and equal, checked host, rack, zone, region.
//! - **Limitations:** llm-d falls back to the pod's `spec.hostname` (from Pod watch events)
//!   when the hostname label is absent; pdgate's discovery does not carry it, so the hostname
//!   comes from the label only. Labels are read from the current endpoint snapshot at pick time
//!   (no copy is kept), so a relabelled pod is seen with the next discovery update.
//!   Source: llm-d `pkg/epp/framework/plugins/datalayer/extractor/topology/extractor.go`,
//!   `pkg/epp/framework/plugins/datalayer/attribute/topology/data_types.go`,
//!   `pkg/epp/framework/plugins/scheduling/util/topology/{level.go,peer.go}`.

use crate::endpoint::EndpointState;
use crate::plugin_build::{decode, effective, BuildCtx, Built, PluginError, PluginType, Stage};
use crate::plugins::disagg_profile_handler::PEER_ENDPOINT;
use crate::request::RequestCtx;
use serde::{Deserialize, Serialize};
use serde_yaml_ng::Value;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Registry entry.
pub const TYPE: PluginType = PluginType {
    name: "topology-extractor",
    stage: Stage::Producer,
    build,
};

/// Default label of the host (node) name.
pub const DEFAULT_HOSTNAME_LABEL: &str = "kubernetes.io/hostname";
/// Default label of the rack.
pub const DEFAULT_RACK_LABEL: &str = "topology.kubernetes.io/rack";
/// Default label of the zone.
pub const DEFAULT_ZONE_LABEL: &str = "topology.kubernetes.io/zone";
/// Default label of the region.
pub const DEFAULT_REGION_LABEL: &str = "topology.kubernetes.io/region";

/// Parameters: the label key of each field (llm-d names; empty → default).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Params {
    /// Label of the host name.
    pub hostname: String,
    /// Label of the rack.
    pub rack: String,
    /// Label of the zone.
    pub zone: String,
    /// Label of the region.
    pub region: String,
}

impl Default for Params {
    fn default() -> Self {
        Params {
            hostname: DEFAULT_HOSTNAME_LABEL.into(),
            rack: DEFAULT_RACK_LABEL.into(),
            zone: DEFAULT_ZONE_LABEL.into(),
            region: DEFAULT_REGION_LABEL.into(),
        }
    }
}

impl Params {
    /// The parameters with every empty key replaced by its default.
    fn with_defaults(mut self) -> Self {
        let d = Params::default();
        for (v, d) in [
            (&mut self.hostname, d.hostname),
            (&mut self.rack, d.rack),
            (&mut self.zone, d.zone),
            (&mut self.region, d.region),
        ] {
            if v.is_empty() {
                *v = d;
            }
        }
        self
    }

    /// The topology the endpoint's `labels` give, `None` when all four fields are unknown.
    pub fn topology<'a>(&self, labels: &'a BTreeMap<String, String>) -> Option<Topology<'a>> {
        let get = |k: &String| labels.get(k).map_or("", String::as_str);
        let t = Topology {
            hostname: get(&self.hostname),
            rack: get(&self.rack),
            zone: get(&self.zone),
            region: get(&self.region),
        };
        (!(t.hostname.is_empty() && t.rack.is_empty() && t.zone.is_empty() && t.region.is_empty()))
            .then_some(t)
    }
}

/// An endpoint's locality; `""` = unknown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Topology<'a> {
    /// Host (node) name.
    pub hostname: &'a str,
    /// Rack.
    pub rack: &'a str,
    /// Zone.
    pub zone: &'a str,
    /// Region.
    pub region: &'a str,
}

/// A topology tier, tightest first: the same host implies the same rack, zone and region.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    /// Same host.
    Host,
    /// Same rack.
    Rack,
    /// Same zone.
    Zone,
    /// Same region.
    Region,
    /// Nothing in common.
    None,
}

impl Level {
    /// The level a config names: `host`, `rack`, `zone` or `region`.
    pub fn parse(s: &str) -> Option<Level> {
        match s {
            "host" => Some(Level::Host),
            "rack" => Some(Level::Rack),
            "zone" => Some(Level::Zone),
            "region" => Some(Level::Region),
            _ => None,
        }
    }
}

impl Topology<'_> {
    /// The tightest level at which `self` and `other` share a value: host, then rack, zone,
    /// region; an unknown field never matches (not even another unknown one).
    pub fn compare(&self, other: &Topology<'_>) -> Level {
        let same = |a: &str, b: &str| !a.is_empty() && a == b;
        if same(self.hostname, other.hostname) {
            Level::Host
        } else if same(self.rack, other.rack) {
            Level::Rack
        } else if same(self.zone, other.zone) {
            Level::Zone
        } else if same(self.region, other.region) {
            Level::Region
        } else {
            Level::None
        }
    }
}

/// The request's peer: the endpoint an earlier profile picked (the decode pick, published
/// by `disagg-profile-handler` before it runs the prefill profile); `None` before that.
pub fn peer(ctx: &RequestCtx<'_>) -> Option<Arc<EndpointState>> {
    ctx.state().get::<Arc<EndpointState>>(PEER_ENDPOINT)
}

/// The label keys of the `topology-extractor` named `name` (default `topology-extractor`),
/// for a consumer's parameter `field` (`topologyProducerName`).
///
/// Errors: no plugin of that name ([`PluginError::missing`]: without an extractor no endpoint
/// has a topology and the consumer would do nothing), or a plugin of another type.
pub fn producer(
    ctx: &BuildCtx<'_>,
    name: Option<&str>,
    field: &str,
) -> Result<Arc<Params>, PluginError> {
    let name = name.filter(|n| !n.is_empty()).unwrap_or(TYPE.name);
    let found = ctx.built.iter().find(|(n, _, _)| n == name);
    if let Some(labels) = found
        .filter(|(_, t, _)| t == TYPE.name)
        .and_then(|(_, _, b)| b.shared.clone())
        .and_then(|s| s.downcast::<Params>().ok())
    {
        return Ok(labels);
    }
    match found {
        Some((_, t, _)) => Err(PluginError::invalid(
            field,
            format!("plugin `{name}` is a `{t}`, not a `{}`", TYPE.name),
        )),
        None => Err(PluginError::missing(
            field,
            name,
            format!(
                "no `{}` plugin named `{name}`: without one no endpoint has a topology and \
                 this plugin would do nothing (declare `- type: {}`)",
                TYPE.name, TYPE.name
            ),
        )),
    }
}

fn build(params: Option<&Value>, _: &mut BuildCtx<'_>) -> Result<Built, PluginError> {
    let p = decode::<Params>(params)?.with_defaults();
    Ok(Built {
        params: effective(&p),
        shared: Some(Arc::new(p)),
        ..Built::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn build_yaml(params: Option<&str>) -> Result<Built, PluginError> {
        let v = params.map(|p| serde_yaml_ng::from_str::<Value>(p).unwrap());
        let mut ctx = BuildCtx {
            built: &[],
            profiles: &[],
            next_slot: 0,
        };
        build(v.as_ref(), &mut ctx)
    }

    #[test]
    fn reads_the_default_labels_and_unknown_fields_never_match() {
        let p = Params::default();
        let a = labels(&[
            ("kubernetes.io/hostname", "n1"),
            ("topology.kubernetes.io/rack", "r1"),
            ("topology.kubernetes.io/zone", "z1"),
            ("topology.kubernetes.io/region", "eu"),
        ]);
        let ta = p.topology(&a).unwrap();
        assert_eq!(
            ta,
            Topology {
                hostname: "n1",
                rack: "r1",
                zone: "z1",
                region: "eu"
            }
        );
        let t = |pairs: &[(&str, &str)]| {
            let l = labels(pairs);
            p.topology(&l).map(|t| ta.compare(&t))
        };
        assert_eq!(t(&[("kubernetes.io/hostname", "n1")]), Some(Level::Host));
        assert_eq!(
            t(&[
                ("kubernetes.io/hostname", "n2"),
                ("topology.kubernetes.io/rack", "r1")
            ]),
            Some(Level::Rack)
        );
        assert_eq!(
            t(&[("topology.kubernetes.io/zone", "z1")]),
            Some(Level::Zone)
        );
        assert_eq!(
            t(&[("topology.kubernetes.io/region", "eu")]),
            Some(Level::Region)
        );
        assert_eq!(
            t(&[("topology.kubernetes.io/region", "us")]),
            Some(Level::None)
        );
        // No topology label (or only empty ones): no topology at all.
        assert_eq!(t(&[("llm-d.ai/role", "prefill")]), None);
        assert_eq!(t(&[("kubernetes.io/hostname", "")]), None);
        // Empty never matches empty.
        let x = labels(&[("topology.kubernetes.io/zone", "z")]);
        let y = labels(&[("topology.kubernetes.io/zone", "z2")]);
        let (tx, ty) = (p.topology(&x).unwrap(), p.topology(&y).unwrap());
        assert_eq!(tx.compare(&ty), Level::None);
        assert!(Level::Host < Level::Rack && Level::Region < Level::None);
    }

    #[test]
    fn custom_label_keys_and_empty_means_default() {
        let b = build_yaml(Some("hostname: node\nzone: \"\"")).unwrap();
        let want: Value = serde_yaml_ng::from_str(
            "hostname: node\nrack: topology.kubernetes.io/rack\nzone: topology.kubernetes.io/zone\n\
             region: topology.kubernetes.io/region",
        )
        .unwrap();
        assert_eq!(b.params, want);
        let p: Params = serde_yaml_ng::from_value(b.params).unwrap();
        let l = labels(&[("node", "n7"), ("kubernetes.io/hostname", "ignored")]);
        assert_eq!(p.topology(&l).unwrap().hostname, "n7");
        assert_eq!(
            build_yaml(None).unwrap().params,
            effective(&Params::default())
        );
    }

    #[test]
    fn consumers_find_the_extractor_by_name() {
        let ext = build_yaml(Some("rack: my/rack")).unwrap();
        let built = vec![
            ("topology-extractor".to_string(), TYPE.name.to_string(), ext),
            (
                "q".to_string(),
                "queue-scorer".to_string(),
                Built::default(),
            ),
        ];
        let ctx = BuildCtx {
            built: &built,
            profiles: &[],
            next_slot: 0,
        };
        let p = producer(&ctx, None, "topologyProducerName").unwrap();
        assert_eq!(p.rack, "my/rack");
        assert_eq!(producer(&ctx, Some(""), "f").unwrap().rack, "my/rack");
        let e = producer(&ctx, Some("topo"), "topologyProducerName").unwrap_err();
        assert_eq!(e.path.as_deref(), Some("topologyProducerName"));
        assert_eq!(e.missing.as_deref(), Some("topo"));
        assert!(e
            .message
            .starts_with("no `topology-extractor` plugin named `topo`"));
        let e = producer(&ctx, Some("q"), "topologyProducerName").unwrap_err();
        assert_eq!(
            e.message,
            "plugin `q` is a `queue-scorer`, not a `topology-extractor`"
        );
    }

    #[test]
    fn unknown_parameters_are_refused() {
        let e = build_yaml(Some("node: x")).err().unwrap();
        assert_eq!(e.key.as_deref(), Some("node"));
    }
}
