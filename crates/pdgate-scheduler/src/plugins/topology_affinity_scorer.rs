//! `topology-affinity-scorer` — prefers candidates close to the peer pick.
//!
//! - **Type:** `topology-affinity-scorer`
//! - **Extension points:** Scorer (llm-d category `Affinity`)
//! - **Parameters:** `topologyProducerName` (default `topology-extractor`): the
//!   `topology-extractor` whose labels are read — it must be configured.
//! - **Inputs:** the peer — the endpoint an earlier profile of the request picked: with
//!   `disagg-profile-handler`, the decode pick when the prefill profile runs — and the
//!   topology (host, rack, zone, region labels) of the peer and of each candidate.
//! - **Outputs:** by the tightest level a candidate shares with the peer
//!   ([`crate::plugins::topology_extractor::Topology::compare`]): host [`HOST_SCORE`] `1.0`,
//!   rack [`RACK_SCORE`] `0.2`, zone [`ZONE_SCORE`] `0.05`, region [`REGION_SCORE`] `0.02`,
//!   none `0` (llm-d's fixed curve: KV transfer over NVLink on one host, one switch in a rack,
//!   more hops beyond). Every candidate scores 0 without a peer (the decode profile itself, a
//!   header-selected profile) or when the peer has no topology; a candidate without topology
//!   scores 0.
//! - **Limitations:** the peer is known only inside one router's schedule (decode-first
//!   `disagg-profile-handler`); behind a coordinator that schedules each phase on another
//!   router the prefill router has no peer, so every candidate scores 0 (llm-d: the same for
//!   coordinator deployments). The curve is fixed, as in llm-d.
//!   Source: llm-d `pkg/epp/framework/plugins/scheduling/scorer/topologyaffinity/scorer.go`.

use crate::endpoint::EndpointState;
use crate::plugin::Scorer;
use crate::plugin_build::{decode, effective, BuildCtx, Built, PluginError, PluginType, Stage};
use crate::plugins::topology_extractor::{self, Level, Params as Labels};
use crate::request::RequestCtx;
use serde::{Deserialize, Serialize};
use serde_yaml_ng::Value;
use std::sync::Arc;

/// Registry entry.
pub const TYPE: PluginType = PluginType {
    name: "topology-affinity-scorer",
    stage: Stage::Consumer,
    build,
};

/// Score of a candidate on the peer's host.
pub const HOST_SCORE: f64 = 1.0;
/// Score of a candidate in the peer's rack (not its host).
pub const RACK_SCORE: f64 = 0.2;
/// Score of a candidate in the peer's zone (not its rack).
pub const ZONE_SCORE: f64 = 0.05;
/// Score of a candidate in the peer's region (not its zone).
pub const REGION_SCORE: f64 = 0.02;

/// The score of a level.
pub fn level_score(level: Level) -> f64 {
    match level {
        Level::Host => HOST_SCORE,
        Level::Rack => RACK_SCORE,
        Level::Zone => ZONE_SCORE,
        Level::Region => REGION_SCORE,
        Level::None => 0.0,
    }
}

/// Parameters (llm-d names).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct Params {
    /// The `topology-extractor` to read (default `topology-extractor`).
    pub topology_producer_name: String,
}

impl Default for Params {
    fn default() -> Self {
        Params {
            topology_producer_name: topology_extractor::TYPE.name.into(),
        }
    }
}

/// The scorer.
#[derive(Debug, Clone)]
pub struct TopologyAffinityScorer {
    labels: Arc<Labels>,
}

impl Scorer for TopologyAffinityScorer {
    fn score(&self, ctx: &RequestCtx<'_>, candidates: &[&Arc<EndpointState>], out: &mut [f64]) {
        out.fill(0.0);
        let Some(peer) = topology_extractor::peer(ctx) else {
            return;
        };
        let Some(pt) = self.labels.topology(&peer.endpoint.labels) else {
            return;
        };
        for (o, c) in out.iter_mut().zip(candidates) {
            if let Some(t) = self.labels.topology(&c.endpoint.labels) {
                *o = level_score(pt.compare(&t));
            }
        }
    }
}

fn build(params: Option<&Value>, ctx: &mut BuildCtx<'_>) -> Result<Built, PluginError> {
    let mut p: Params = decode(params)?;
    if p.topology_producer_name.is_empty() {
        p.topology_producer_name = topology_extractor::TYPE.name.into();
    }
    let labels =
        topology_extractor::producer(ctx, Some(&p.topology_producer_name), "topologyProducerName")?;
    Ok(Built {
        scorer: Some(Arc::new(TopologyAffinityScorer { labels })),
        params: effective(&p),
        ..Built::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::topology_affinity_filter::testing::{at, build_with_extractor, with_peer};

    fn scores(peer: Option<[&str; 4]>) -> Vec<f64> {
        let d = peer.map(|loc| at("d", loc));
        let eps = [
            at("same-host", ["h1", "r9", "", ""]),
            at("same-rack", ["h2", "r1", "z1", "g1"]),
            at("same-zone", ["h3", "r3", "z1", "g1"]),
            at("same-region", ["h4", "r4", "z4", "g1"]),
            at("far", ["h5", "r5", "z5", "g5"]),
            at("unlabelled", ["", "", "", ""]),
        ];
        let s = build_with_extractor(build, "{}").unwrap().scorer.unwrap();
        let c: Vec<_> = eps.iter().collect();
        let mut out = vec![0.5; c.len()];
        with_peer(d.as_ref(), |ctx| s.score(ctx, &c, &mut out));
        out
    }

    #[test]
    fn scores_by_tightest_common_level() {
        assert_eq!(
            scores(Some(["h1", "r1", "z1", "g1"])),
            [1.0, 0.2, 0.05, 0.02, 0.0, 0.0]
        );
        // Peer with only a zone: only zone matches count.
        assert_eq!(
            scores(Some(["", "", "z1", ""])),
            [0.0, 0.05, 0.05, 0.0, 0.0, 0.0]
        );
    }

    #[test]
    fn no_peer_or_peer_without_topology_scores_all_zero() {
        assert_eq!(scores(None), [0.0; 6]);
        assert_eq!(scores(Some(["", "", "", ""])), [0.0; 6]);
    }

    #[test]
    fn bad_parameters_name_the_field() {
        let e = build_with_extractor(build, "topologyProducerName: topo2")
            .err()
            .unwrap();
        assert_eq!(
            (e.path.as_deref(), e.missing.as_deref()),
            (Some("topologyProducerName"), Some("topo2"))
        );
        let e = build_with_extractor(build, "minAffinity: host")
            .err()
            .unwrap();
        assert_eq!(e.key.as_deref(), Some("minAffinity"));
        let b = build_with_extractor(build, "topologyProducerName: \"\"").unwrap();
        let want: Value =
            serde_yaml_ng::from_str("topologyProducerName: topology-extractor").unwrap();
        assert_eq!(b.params, want);
    }
}
