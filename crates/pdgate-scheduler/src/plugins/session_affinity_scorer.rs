//! `session-affinity-scorer` — keeps a client's session on the endpoint that served it before.
//!
//! - **Type:** `session-affinity-scorer`
//! - **Extension points:** Scorer, PreRequest (remembers the request's primary pick),
//!   ResponseHeader (stamps the session token).
//! - **Parameters:** none.
//! - **Inputs:** the request header `x-session-token`: the standard, padded base64 encoding
//!   of an endpoint's name.
//! - **Outputs:** score 1 for the candidate whose name equals the decoded token, 0 for every
//!   other; a missing, undecodable or non-UTF-8 token scores every candidate 0 (never an
//!   error). When the primary pick — the decode (or aggregated) pick, or the single pick of a
//!   header-selected profile — answers with a 2xx head, its phase response gets
//!   `x-session-token: base64(endpoint name)`, which the client sends back. A split-out
//!   prefill phase is not stamped: the token names the decode endpoint, as in llm-d.
//! - **Limitations:** stateless — the token is the only memory, so an endpoint that left (or
//!   is filtered out) leaves every candidate at 0 and the other scorers decide; the next
//!   response then names the new endpoint. The token names the endpoint in clear base64 and
//!   is not signed: a client can steer its requests to any endpoint it can name (bounded by
//!   the weight, like any score). A soft preference: a heavy enough load score outweighs it.
//!   llm-d identifies the pod by `namespace/name`; pdgate's identity is the endpoint `name`
//!   (so an llm-d token only matches an endpoint named `namespace/name`). llm-d stamps every
//!   response; pdgate only 2xx ones, so that a failing endpoint does not pin the session.
//!   Recent llm-d releases add parameters (`headerName`, `profileName`, a stateful
//!   session-id strategy); pdgate implements the default, parameterless behaviour and rejects
//!   any parameter at load time rather than ignore it.
//!   Source: llm-d session-affinity-scorer.

use crate::endpoint::EndpointState;
use crate::plugin::{PreRequest, ResponseCtx, ResponseHeader, Scorer};
use crate::plugin_build::{decode, BuildCtx, Built, NoParams, PluginError, PluginType, Stage};
use crate::request::{RequestCtx, SchedulingResult};
use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use pdgate_api::headers::SESSION_TOKEN;
use serde_yaml_ng::Value;
use std::sync::Arc;

/// Registry entry.
pub const TYPE: PluginType = PluginType {
    name: "session-affinity-scorer",
    stage: Stage::Consumer,
    build,
};

/// [`crate::request::RequestState`] key of the primary pick's endpoint name.
const PRIMARY: &str = "session-affinity-scorer/primary";

/// The scorer and its hooks.
#[derive(Debug, Default)]
pub struct SessionAffinityScorer;

/// The session token naming `endpoint`: standard, padded base64 of its name.
pub fn encode_token(endpoint: &str) -> String {
    STANDARD.encode(endpoint)
}

/// The endpoint name a session token carries; `None` when it is not valid standard, padded
/// base64 or does not decode to UTF-8.
pub fn decode_token(token: &str) -> Option<String> {
    String::from_utf8(STANDARD.decode(token).ok()?).ok()
}

impl Scorer for SessionAffinityScorer {
    fn score(&self, ctx: &RequestCtx<'_>, candidates: &[&Arc<EndpointState>], out: &mut [f64]) {
        let Some(target) = ctx.req.headers.header(SESSION_TOKEN).and_then(decode_token) else {
            return;
        };
        for (o, c) in out.iter_mut().zip(candidates) {
            *o = if c.endpoint.name == target { 1.0 } else { 0.0 };
        }
    }
}

impl PreRequest for SessionAffinityScorer {
    /// Remembers the primary pick, so that only its response carries the token.
    fn pre_request(&self, ctx: &RequestCtx<'_>, result: &SchedulingResult) {
        ctx.state()
            .set(PRIMARY, result.decode.endpoint.endpoint.name.clone());
    }
}

impl ResponseHeader for SessionAffinityScorer {
    /// Stamps `x-session-token` on a 2xx head of the primary pick (or of any pick when the
    /// request was not scheduled through `schedule`, which leaves no primary recorded).
    fn response_header(&self, ctx: &ResponseCtx<'_>, out: &mut Vec<(String, String)>) {
        if !(200..300).contains(&ctx.status) {
            return;
        }
        let name = &ctx.endpoint.endpoint.name;
        if ctx
            .state
            .get::<String>(PRIMARY)
            .is_some_and(|primary| primary != *name)
        {
            return;
        }
        out.push((SESSION_TOKEN.to_string(), encode_token(name)));
    }
}

fn build(params: Option<&Value>, _: &mut BuildCtx<'_>) -> Result<Built, PluginError> {
    decode::<NoParams>(params)?;
    let s = Arc::new(SessionAffinityScorer);
    Ok(Built {
        scorer: Some(s.clone()),
        pre_request: Some(s.clone()),
        response_header: Some(s),
        ..Built::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::testutil::ep;
    use crate::request::{RequestHeaders, SchedulingRequest};
    use pdgate_api::{Phase, PromptInput};

    fn scores(token: Option<&str>) -> Vec<f64> {
        let eps = [ep("d1", None), ep("d2", None), ep("d3", None)];
        let c: Vec<_> = eps.iter().collect();
        let prompt = PromptInput::Tokens(vec![1, 2, 3]);
        let headers = [(SESSION_TOKEN, token.unwrap_or_default())];
        let h: &dyn RequestHeaders = if token.is_some() { &headers } else { &() };
        let req = SchedulingRequest {
            headers: h,
            ..SchedulingRequest::new("r", "m", &prompt)
        };
        let ctx = RequestCtx::new(&req, 0);
        let mut out = vec![0.0; c.len()];
        SessionAffinityScorer.score(&ctx, &c, &mut out);
        out
    }

    #[test]
    fn token_round_trips_and_matches_go_std_encoding() {
        assert_eq!(encode_token("d2"), "ZDI=");
        assert_eq!(decode_token("ZDI=").as_deref(), Some("d2"));
        assert_eq!(decode_token("ZDI"), None, "padding is required");
        assert_eq!(decode_token("!!!"), None);
        assert_eq!(decode_token(&STANDARD.encode([0xff, 0xfe])), None);
    }

    #[test]
    fn scores_one_for_the_named_candidate_only() {
        assert_eq!(scores(Some("ZDI=")), [0.0, 1.0, 0.0]);
    }

    #[test]
    fn missing_garbage_non_utf8_or_unknown_token_scores_all_zero() {
        assert_eq!(scores(None), [0.0, 0.0, 0.0]);
        assert_eq!(scores(Some("!!!")), [0.0, 0.0, 0.0]);
        assert_eq!(scores(Some("")), [0.0, 0.0, 0.0]);
        assert_eq!(scores(Some(&STANDARD.encode([0xff]))), [0.0, 0.0, 0.0]);
        assert_eq!(scores(Some(&encode_token("gone"))), [0.0, 0.0, 0.0]);
    }

    #[test]
    fn response_hook_stamps_the_served_endpoint_on_2xx_only() {
        let d2 = ep("d2", None);
        let prompt = PromptInput::Tokens(vec![]);
        let req = SchedulingRequest::new("r", "m", &prompt);
        let ctx = RequestCtx::new(&req, 0);
        let stamp = |status, state| {
            let mut out = Vec::new();
            let rctx = ResponseCtx {
                endpoint: &d2,
                phase: Phase::Decode,
                status,
                state,
            };
            SessionAffinityScorer.response_header(&rctx, &mut out);
            out
        };
        let want = vec![("x-session-token".to_string(), "ZDI=".to_string())];
        assert_eq!(stamp(200, ctx.state()), want);
        assert_eq!(stamp(204, ctx.state()), want);
        assert!(stamp(503, ctx.state()).is_empty());
        assert!(stamp(302, ctx.state()).is_empty());
        // Another endpoint was the primary pick (d2 ran the split-out prefill): no stamp.
        ctx.state().set(PRIMARY, "d1".to_string());
        assert!(stamp(200, ctx.state()).is_empty());
        ctx.state().set(PRIMARY, "d2".to_string());
        assert_eq!(stamp(200, ctx.state()), want);
    }
}
