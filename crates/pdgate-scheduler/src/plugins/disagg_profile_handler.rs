//! `disagg-profile-handler` — P/D: decode first, then prefill when the decider says so.
//!
//! - **Type:** `disagg-profile-handler`
//! - **Extension points:** ProfileHandler
//! - **Parameters:** `profiles.decode` (default `decode`), `profiles.prefill` (default
//!   `prefill`), `profiles.encode` (default `encode`); `deciders.prefill` (name of a decider
//!   plugin; absent = never split); `deciders.encode` (name of a decider plugin, e.g.
//!   `always-disagg-multimodal-decider`; absent = pdgate's default, below).
//! - **Inputs:** the decode and prefill profiles; the prefill decider.
//! - **Outputs:** runs the decode profile (its rejection is the request's); asks the prefill
//!   decider with the decode pick; if it splits, runs the prefill profile → prefill pick
//!   (phase `Prefill`) + decode pick (phase `Decode`). Otherwise — no decider, decider says no,
//!   no prefill profile, or the prefill filters leave nothing (no prefill endpoints) — the
//!   decode pick alone with phase `Aggregated` (llm-d DisaggProfileHandler, fail open).
//!   When the prefill pick is the decode pick itself (an endpoint of role
//!   `prefill-decode` chosen by both profiles) and no prefill pin asks for it, the request
//!   runs aggregated there: a split onto one endpoint adds a hop and a self-transfer.
//!   A conditional-decode probe (`Prefer: if-available`) runs the decode profile only: the
//!   prefill decider's `Keep` serves it aggregated on the decode pick; `Split` or `Unknown`
//!   rejects it with 412 (`Rejection::DecodeDeferred`); no decider → always served.
//!   With an encode decider, its answer for the decode pick is kept for the request
//!   ([`encode_decision`]): `Split` runs the encode stage (`pdgate serve`: one encode leg
//!   per media item on the encode profile), `Keep` skips it. Without one, `pdgate serve`
//!   runs the encode stage for every request with media items when the config has the
//!   encode profile and encode endpoints exist (llm-d runs none without a decider).
//!   Before the prefill profile runs, the decode pick is published as the request's peer
//!   ([`PEER_ENDPOINT`]) for the topology-affinity plugins.
//! - **Limitations:** the encode stage runs in the server, after scheduling (encode picks
//!   are made per leg); a prefill-profile saturation falls back to aggregated rather than
//!   rejecting.

use crate::endpoint::EndpointState;
use crate::error::Rejection;
use crate::plugin::conditional_verdict;
use crate::plugin::{Decider, Decision, ProfileHandler, ProfileRunner};
use crate::plugin_build::{decode, effective, BuildCtx, Built, PluginError, PluginType, Stage};
use crate::request::{RequestCtx, RequestState, SchedulingResult};
use pdgate_api::Phase;
use serde::{Deserialize, Serialize};
use serde_yaml_ng::Value;
use std::sync::Arc;

/// Registry entry.
pub const TYPE: PluginType = PluginType {
    name: "disagg-profile-handler",
    stage: Stage::Handler,
    build,
};

/// Parameters.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Params {
    /// Profile names.
    pub profiles: ProfileNames,
    /// Decider plugin names.
    pub deciders: DeciderNames,
}

/// `profiles`: names of the stage profiles.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ProfileNames {
    /// Decode profile (default `decode`).
    pub decode: String,
    /// Prefill profile (default `prefill`).
    pub prefill: String,
    /// Encode profile (default `encode`).
    pub encode: String,
}

impl Default for ProfileNames {
    fn default() -> Self {
        ProfileNames {
            decode: "decode".into(),
            prefill: "prefill".into(),
            encode: "encode".into(),
        }
    }
}

/// `deciders`: decider plugin names per optional stage.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct DeciderNames {
    /// Prefill decider; absent = P/D disabled.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prefill: Option<String>,
    /// Encode decider; absent = the server's default (encode media when it can).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub encode: Option<String>,
}

/// [`crate::request::RequestState`] key of the peer pick (`Arc<EndpointState>`): the decode
/// pick, set just before the prefill profile runs (llm-d request attribute
/// `peer-endpoint/disagg-profile-handler`, decode-first order).
pub const PEER_ENDPOINT: &str = "peer-endpoint/disagg-profile-handler";

/// The handler.
pub struct DisaggProfileHandler {
    decode: String,
    prefill: String,
    encode: String,
    prefill_decider: Option<Arc<dyn Decider>>,
    encode_decider: Option<Arc<dyn Decider>>,
}

/// [`RequestState`] key of the encode decider's answer.
const ENCODE_DECISION: &str = "disagg-profile-handler/encode";

/// Whether the request's encode decider asked for the encode stage: `Some(true)` on `Split`,
/// `Some(false)` on `Keep` or `Unknown`; `None` when no encode decider ran (another handler,
/// no `deciders.encode`, or a header-selected profile).
pub fn encode_decision(state: &RequestState) -> Option<bool> {
    state.get(ENCODE_DECISION)
}

/// Why a split request found no prefill endpoint, when the fleet has prefill endpoints for
/// its model (none Ready, every one's circuit open, or filtered out); `None` for a fleet
/// without prefill endpoints, which runs aggregated by design.
fn prefill_unavailable(ctx: &RequestCtx<'_>) -> Option<String> {
    let known = ctx
        .snapshot()
        .endpoints
        .iter()
        .filter(|e| {
            e.endpoint
                .role
                .is_some_and(|r| r.can_prefill() && !r.can_decode())
                && e.load.serves(ctx.req.model)
        })
        .count();
    (known > 0).then(|| {
        format!(
            "no prefill endpoint can serve the request ({known} known: none Ready, \
             circuits open or filtered out)"
        )
    })
}

impl ProfileHandler for DisaggProfileHandler {
    fn handle(
        &self,
        ctx: &RequestCtx<'_>,
        runner: &dyn ProfileRunner,
    ) -> Result<SchedulingResult, Rejection> {
        // The decode pick reads the Decode pin (decode pin, else worker pin) whether it ends
        // split or aggregated.
        let mut decode = runner.run(ctx, &self.decode, Phase::Decode)?;
        if let Some(d) = &self.encode_decider {
            let split = d.decide(ctx, &decode.endpoint) == Decision::Split;
            ctx.state().set(ENCODE_DECISION, split);
        }
        if ctx.req.conditional {
            let decision = self.conditional_decode(ctx, &decode.endpoint);
            conditional_verdict(decision, &decode.endpoint.endpoint.name)?;
            decode.phase = Phase::Aggregated;
            return Ok(SchedulingResult {
                prefill: None,
                decode,
                prefill_unavailable: None,
            });
        }
        // A client's prefill pin asks for a split prefill on that endpoint: honoured whatever
        // the decider says (a pin never goes silently unused).
        let split = runner.has_profile(&self.prefill)
            && (ctx.pins().prefill.is_some()
                || self
                    .prefill_decider
                    .as_ref()
                    .is_some_and(|d| d.decide(ctx, &decode.endpoint) == Decision::Split));
        if split {
            // The prefill profile's plugins see the decode pick as the peer (topology affinity).
            ctx.state().set(PEER_ENDPOINT, decode.endpoint.clone());
            match runner.run(ctx, &self.prefill, Phase::Prefill) {
                // Both picks landed on one endpoint that serves both phases: a split there
                // would only add a hop and a KV transfer onto itself, so it runs aggregated.
                // A prefill pin is honoured as asked.
                Ok(prefill)
                    if ctx.pins().prefill.is_none()
                        && prefill.endpoint.load.uid() == decode.endpoint.load.uid() => {}
                Ok(mut prefill) => {
                    prefill.phase = Phase::Prefill;
                    decode.phase = Phase::Decode;
                    return Ok(SchedulingResult {
                        prefill: Some(prefill),
                        decode,
                        prefill_unavailable: None,
                    });
                }
                Err(Rejection::Saturated { .. }) => {
                    decode.phase = Phase::Aggregated;
                    return Ok(SchedulingResult {
                        prefill: None,
                        decode,
                        prefill_unavailable: prefill_unavailable(ctx),
                    });
                }
                Err(e) => return Err(e),
            }
        }
        decode.phase = Phase::Aggregated;
        Ok(SchedulingResult {
            prefill: None,
            decode,
            prefill_unavailable: None,
        })
    }

    fn conditional_decode(&self, ctx: &RequestCtx<'_>, decode: &EndpointState) -> Decision {
        match &self.prefill_decider {
            Some(d) => d.decide(ctx, decode),
            None => Decision::Keep,
        }
    }

    fn profile_for(&self, phase: Phase) -> Option<&str> {
        match phase {
            Phase::Prefill => Some(&self.prefill),
            Phase::Decode => Some(&self.decode),
            Phase::Encode => Some(&self.encode),
            Phase::Aggregated => None,
        }
    }
}

fn build(params: Option<&Value>, ctx: &mut BuildCtx<'_>) -> Result<Built, PluginError> {
    let p: Params = decode(params)?;
    if !ctx.profiles.contains(&p.profiles.decode) {
        return Err(PluginError::invalid(
            "profiles.decode",
            format!("scheduling profile `{}` is not defined", p.profiles.decode),
        ));
    }
    let prefill_decider = match &p.deciders.prefill {
        Some(name) => Some(ctx.decider(name, "deciders.prefill")?),
        None => None,
    };
    let encode_decider = match &p.deciders.encode {
        Some(name) => Some(ctx.decider(name, "deciders.encode")?),
        None => None,
    };
    let handler = DisaggProfileHandler {
        decode: p.profiles.decode.clone(),
        prefill: p.profiles.prefill.clone(),
        encode: p.profiles.encode.clone(),
        prefill_decider,
        encode_decider,
    };
    Ok(Built {
        handler: Some(Arc::new(handler)),
        params: effective(&p),
        ..Built::default()
    })
}
