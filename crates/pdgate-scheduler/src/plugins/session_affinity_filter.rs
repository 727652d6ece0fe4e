//! `session-affinity-filter` — the hard form of `session-affinity-scorer`: keeps only the
//! endpoint the session token names, when it is a candidate.
//!
//! - **Type:** `session-affinity-filter`
//! - **Extension points:** Filter
//! - **Parameters:** none.
//! - **Inputs:** the request header `x-session-token` (standard, padded base64 of an endpoint
//!   name, as stamped by `session-affinity-scorer` on responses).
//! - **Outputs:** when the token names one of the candidates, only that endpoint stays;
//!   otherwise (no token, undecodable token, endpoint gone or filtered out earlier) every
//!   candidate stays, so the session moves to whichever endpoint the scorers prefer and the
//!   next response carries a token naming it.
//! - **Limitations:** stateless and unsigned, like the scorer; put it after the role filter
//!   so a token naming an endpoint of another role is ignored rather than obeyed.
//!   Source: pdgate (issue 5); token format of llm-d `session-affinity-scorer`.

use crate::plugin::{Candidates, Filter};
use crate::plugin_build::{decode, BuildCtx, Built, NoParams, PluginError, PluginType, Stage};
use crate::plugins::session_affinity_scorer::decode_token;
use crate::request::RequestCtx;
use pdgate_api::headers::SESSION_TOKEN;
use serde_yaml_ng::Value;
use std::sync::Arc;

/// Registry entry.
pub const TYPE: PluginType = PluginType {
    name: "session-affinity-filter",
    stage: Stage::Consumer,
    build,
};

/// The filter.
#[derive(Debug, Default)]
pub struct SessionAffinityFilter;

impl Filter for SessionAffinityFilter {
    fn filter(&self, ctx: &RequestCtx<'_>, candidates: &mut Candidates<'_>) {
        let Some(target) = ctx.req.headers.header(SESSION_TOKEN).and_then(decode_token) else {
            return;
        };
        if candidates.iter().any(|c| c.endpoint.name == target) {
            candidates.retain(|c| c.endpoint.name == target);
        }
    }
}

fn build(params: Option<&Value>, _: &mut BuildCtx<'_>) -> Result<Built, PluginError> {
    decode::<NoParams>(params)?;
    Ok(Built {
        filter: Some(Arc::new(SessionAffinityFilter)),
        ..Built::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::session_affinity_scorer::encode_token;
    use crate::plugins::testutil::ep;
    use crate::request::{RequestHeaders, SchedulingRequest};
    use pdgate_api::PromptInput;

    fn kept(token: Option<&str>) -> Vec<String> {
        let eps = [ep("d1", None), ep("d2", None), ep("d3", None)];
        let prompt = PromptInput::Tokens(vec![1]);
        let headers = [(SESSION_TOKEN, token.unwrap_or_default())];
        let h: &dyn RequestHeaders = if token.is_some() { &headers } else { &() };
        let req = SchedulingRequest {
            headers: h,
            ..SchedulingRequest::new("r", "m", &prompt)
        };
        let ctx = RequestCtx::new(&req, 0);
        let mut c: Candidates<'_> = eps.iter().collect();
        SessionAffinityFilter.filter(&ctx, &mut c);
        c.iter().map(|e| e.endpoint.name.clone()).collect()
    }

    #[test]
    fn keeps_the_named_candidate_or_everyone() {
        assert_eq!(kept(Some(&encode_token("d2"))), ["d2"]);
        assert_eq!(kept(Some(&encode_token("gone"))), ["d1", "d2", "d3"]);
        assert_eq!(kept(Some("!!!")), ["d1", "d2", "d3"]);
        assert_eq!(kept(None), ["d1", "d2", "d3"]);
    }
}
