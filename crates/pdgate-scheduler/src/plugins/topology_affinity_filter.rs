//! `topology-affinity-filter` — keeps the candidates close enough to the peer pick.
//!
//! - **Type:** `topology-affinity-filter`
//! - **Extension points:** Filter
//! - **Parameters:** `minAffinity` (default [`DEFAULT_MIN_AFFINITY`] `host`; `host`, `rack`,
//!   `zone` or `region`; `""` means the default): the loosest level a candidate may share
//!   with the peer; `topologyProducerName` (default `topology-extractor`): the
//!   `topology-extractor` whose labels are read — it must be configured.
//! - **Inputs:** the peer — the endpoint an earlier profile of the request picked: with
//!   `disagg-profile-handler`, the decode pick when the prefill profile runs — and the
//!   topology (host, rack, zone, region labels) of the peer and of each candidate.
//! - **Outputs:** the candidates whose tightest common level with the peer
//!   ([`Topology::compare`]) is `minAffinity` or tighter; candidates without a topology are
//!   dropped. Fails open: with no peer (the decode profile itself, a header-selected profile,
//!   a single-profile config), a peer without topology, or when no candidate is close enough,
//!   every candidate is kept.
//! - **Limitations:** the peer is known only inside one router's schedule (the decode-first
//!   order of `disagg-profile-handler`); a coordinator that schedules each phase on another
//!   router (layout (b)) gives the prefill router no peer, so the filter keeps every
//!   candidate there (llm-d: the same for coordinator deployments). A pinned prefill endpoint
//!   skips the filters, and a session-bound one always passes (alone, it fails open).
//!   Source: llm-d `pkg/epp/framework/plugins/scheduling/filter/topologyaffinity/filter.go`.

use crate::plugin::{Candidates, Filter};
use crate::plugin_build::{decode, effective, BuildCtx, Built, PluginError, PluginType, Stage};
use crate::plugins::topology_extractor::{self, Level, Params as Labels, Topology};
use crate::request::RequestCtx;
use serde::{Deserialize, Serialize};
use serde_yaml_ng::Value;
use std::sync::Arc;

/// Registry entry.
pub const TYPE: PluginType = PluginType {
    name: "topology-affinity-filter",
    stage: Stage::Consumer,
    build,
};

/// Default `minAffinity`: the same host.
pub const DEFAULT_MIN_AFFINITY: &str = "host";

/// Parameters (llm-d names).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct Params {
    /// Loosest level kept: `host`, `rack`, `zone` or `region` (default `host`).
    pub min_affinity: String,
    /// The `topology-extractor` to read (default `topology-extractor`).
    pub topology_producer_name: String,
}

impl Default for Params {
    fn default() -> Self {
        Params {
            min_affinity: DEFAULT_MIN_AFFINITY.into(),
            topology_producer_name: topology_extractor::TYPE.name.into(),
        }
    }
}

/// The filter.
#[derive(Debug, Clone)]
pub struct TopologyAffinityFilter {
    labels: Arc<Labels>,
    min: Level,
}

impl TopologyAffinityFilter {
    /// Whether a candidate with topology `cand` is close enough to `peer`.
    fn near(&self, peer: &Topology<'_>, cand: Option<Topology<'_>>) -> bool {
        cand.is_some_and(|c| peer.compare(&c) <= self.min)
    }
}

impl Filter for TopologyAffinityFilter {
    fn filter(&self, ctx: &RequestCtx<'_>, candidates: &mut Candidates<'_>) {
        let Some(peer) = topology_extractor::peer(ctx) else {
            return;
        };
        let Some(pt) = self.labels.topology(&peer.endpoint.labels) else {
            return;
        };
        let near = |c: &&Arc<crate::endpoint::EndpointState>| {
            self.near(&pt, self.labels.topology(&c.endpoint.labels))
        };
        if candidates.iter().any(near) {
            candidates.retain(near);
        }
    }
}

fn build(params: Option<&Value>, ctx: &mut BuildCtx<'_>) -> Result<Built, PluginError> {
    let mut p: Params = decode(params)?;
    if p.min_affinity.is_empty() {
        p.min_affinity = DEFAULT_MIN_AFFINITY.into();
    }
    let Some(min) = Level::parse(&p.min_affinity) else {
        return Err(PluginError::invalid(
            "minAffinity",
            format!(
                "invalid topology level \"{}\", must be one of host, rack, zone, region",
                p.min_affinity
            ),
        ));
    };
    if p.topology_producer_name.is_empty() {
        p.topology_producer_name = topology_extractor::TYPE.name.into();
    }
    let labels =
        topology_extractor::producer(ctx, Some(&p.topology_producer_name), "topologyProducerName")?;
    Ok(Built {
        filter: Some(Arc::new(TopologyAffinityFilter { labels, min })),
        params: effective(&p),
        ..Built::default()
    })
}

/// Test helpers shared with the scorer: a built extractor, endpoints with topology labels, and
/// a context whose peer is set.
#[cfg(test)]
pub(crate) mod testing {
    use crate::endpoint::EndpointState;
    use crate::plugin_build::{BuildCtx, Built, PluginError};
    use crate::plugins::disagg_profile_handler::PEER_ENDPOINT;
    use crate::plugins::testutil::ep_labels;
    use crate::request::{RequestCtx, SchedulingRequest};
    use pdgate_api::PromptInput;
    use serde_yaml_ng::Value;
    use std::sync::Arc;

    /// Builds plugin `factory` with `params` next to a default `topology-extractor`.
    pub fn build_with_extractor(
        factory: crate::plugin_build::Factory,
        params: &str,
    ) -> Result<Built, PluginError> {
        let mut none = BuildCtx {
            built: &[],
            profiles: &[],
            next_slot: 0,
        };
        let ext = (crate::plugins::topology_extractor::TYPE.build)(None, &mut none).unwrap();
        let built = vec![(
            "topology-extractor".to_string(),
            "topology-extractor".to_string(),
            ext,
        )];
        let mut ctx = BuildCtx {
            built: &built,
            profiles: &[],
            next_slot: 0,
        };
        let v: Value = serde_yaml_ng::from_str(params).unwrap();
        factory(Some(&v), &mut ctx)
    }

    /// An endpoint `name` at `host`, `rack`, `zone`, `region` ("" = label absent).
    pub fn at(name: &str, loc: [&str; 4]) -> Arc<EndpointState> {
        let keys = [
            "kubernetes.io/hostname",
            "topology.kubernetes.io/rack",
            "topology.kubernetes.io/zone",
            "topology.kubernetes.io/region",
        ];
        let pairs: Vec<(&str, &str)> = keys
            .iter()
            .zip(loc)
            .filter(|(_, v)| !v.is_empty())
            .map(|(k, v)| (*k, v))
            .collect();
        ep_labels(name, &pairs)
    }

    /// Runs `f` with a context whose peer is `peer` (none when `None`).
    pub fn with_peer<R>(
        peer: Option<&Arc<EndpointState>>,
        f: impl FnOnce(&RequestCtx<'_>) -> R,
    ) -> R {
        let prompt = PromptInput::Tokens(vec![]);
        let req = SchedulingRequest::new("r", "m", &prompt);
        let ctx = RequestCtx::new(&req, 0);
        if let Some(p) = peer {
            ctx.state().set(PEER_ENDPOINT, p.clone());
        }
        f(&ctx)
    }
}

#[cfg(test)]
mod tests {
    use super::testing::{at, build_with_extractor, with_peer};
    use super::*;

    /// Names of the candidates kept by a filter built with `params`, peer `d` at host h1,
    /// rack r1, zone z1, region g1.
    fn kept(params: &str, peer: bool) -> Vec<String> {
        let d = at("d", ["h1", "r1", "z1", "g1"]);
        let eps = [
            at("same-host", ["h1", "r9", "", ""]),
            at("same-rack", ["h2", "r1", "z1", "g1"]),
            at("same-zone", ["h3", "r3", "z1", "g1"]),
            at("same-region", ["h4", "r4", "z4", "g1"]),
            at("far", ["h5", "r5", "z5", "g5"]),
            at("unlabelled", ["", "", "", ""]),
        ];
        let f = build_with_extractor(build, params).unwrap().filter.unwrap();
        let mut c: Candidates<'_> = eps.iter().collect();
        with_peer(peer.then_some(&d), |ctx| f.filter(ctx, &mut c));
        c.iter().map(|e| e.endpoint.name.clone()).collect()
    }

    #[test]
    fn keeps_candidates_at_min_affinity_or_tighter() {
        assert_eq!(kept("{}", true), ["same-host"]);
        assert_eq!(kept("minAffinity: \"\"", true), ["same-host"]);
        assert_eq!(kept("minAffinity: rack", true), ["same-host", "same-rack"]);
        assert_eq!(
            kept("minAffinity: zone", true),
            ["same-host", "same-rack", "same-zone"]
        );
        assert_eq!(
            kept("minAffinity: region", true),
            ["same-host", "same-rack", "same-zone", "same-region"]
        );
    }

    #[test]
    fn fails_open_without_peer_peer_topology_or_any_match() {
        let all = [
            "same-host",
            "same-rack",
            "same-zone",
            "same-region",
            "far",
            "unlabelled",
        ];
        assert_eq!(kept("{}", false), all);
        // A peer without topology labels.
        let bare = at("bare", ["", "", "", ""]);
        let eps = [at("a", ["h1", "", "", ""]), at("b", ["", "", "", ""])];
        let f = build_with_extractor(build, "{}").unwrap().filter.unwrap();
        let mut c: Candidates<'_> = eps.iter().collect();
        with_peer(Some(&bare), |ctx| f.filter(ctx, &mut c));
        assert_eq!(c.len(), 2);
        // Nobody on the peer's host: everyone stays.
        let d = at("d", ["h9", "", "", ""]);
        with_peer(Some(&d), |ctx| f.filter(ctx, &mut c));
        assert_eq!(c.len(), 2);
    }

    #[test]
    fn bad_parameters_name_the_field() {
        let e = build_with_extractor(build, "minAffinity: node")
            .err()
            .unwrap();
        assert_eq!(e.path.as_deref(), Some("minAffinity"));
        assert_eq!(
            e.message,
            "invalid topology level \"node\", must be one of host, rack, zone, region"
        );
        let e = build_with_extractor(build, "topologyProducerName: other")
            .err()
            .unwrap();
        assert_eq!(e.path.as_deref(), Some("topologyProducerName"));
        assert_eq!(e.missing.as_deref(), Some("other"));
        let e = build_with_extractor(build, "bogus: 1").err().unwrap();
        assert_eq!(e.key.as_deref(), Some("bogus"));
        // No extractor at all.
        let mut ctx = BuildCtx {
            built: &[],
            profiles: &[],
            next_slot: 0,
        };
        let e = build(None, &mut ctx).err().unwrap();
        assert_eq!(e.missing.as_deref(), Some("topology-extractor"));
    }

    #[test]
    fn effective_params_fill_the_defaults() {
        let b = build_with_extractor(build, "minAffinity: \"\"").unwrap();
        let want: Value =
            serde_yaml_ng::from_str("minAffinity: host\ntopologyProducerName: topology-extractor")
                .unwrap();
        assert_eq!(b.params, want);
    }
}
