//! `header-profile-handler` — runs the one profile named by the request's profile header.
//!
//! - **Type:** `header-profile-handler`
//! - **Extension points:** ProfileHandler
//! - **Parameters:** `headerName` (default `EPP-Profile`; pdgate reads the profile from
//!   `x-llm-d-epp-profile` or its legacy spelling `EPP-Profile`, so only those two names,
//!   case-insensitive, are accepted); `defaultProfile` (default `decode`): the profile run when
//!   the header is missing or blank.
//! - **Inputs:** `SchedulingRequest::profile` (the header value, set by the server); the
//!   configured profile names.
//! - **Outputs:** one pick from exactly one profile, with phase `Prefill`/`Decode`/`Encode`
//!   for profiles of those names, else `Aggregated`. With a single configured profile that
//!   profile always runs, whatever the header says (llm-d). Otherwise: header naming a
//!   profile → that profile; header missing or blank → `defaultProfile`; header naming an
//!   unknown profile → [`Rejection::UnknownProfile`] (400; llm-d answers 429 there).
//! - **Limitations:** with more than one profile, `defaultProfile` must name one of them — a
//!   load-time error here, where llm-d fails each header-less request instead.

use crate::error::Rejection;
use crate::plugin::phase_of_profile;
use crate::plugin::{ProfileHandler, ProfileRunner};
use crate::plugin_build::{decode, effective, BuildCtx, Built, PluginError, PluginType, Stage};
use crate::request::{RequestCtx, SchedulingResult};
use serde::{Deserialize, Serialize};
use serde_yaml_ng::Value;
use std::sync::Arc;

/// Registry entry.
pub const TYPE: PluginType = PluginType {
    name: "header-profile-handler",
    stage: Stage::Handler,
    build,
};

/// Header names pdgate's server reads the profile from (case-insensitive).
pub const SUPPORTED_HEADERS: [&str; 2] = ["x-llm-d-epp-profile", "epp-profile"];

/// Parameters.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct Params {
    /// Request header naming the profile (default `EPP-Profile`).
    pub header_name: String,
    /// Profile run when the header is missing or blank (default `decode`).
    pub default_profile: String,
}

impl Default for Params {
    fn default() -> Self {
        Params {
            header_name: "EPP-Profile".into(),
            default_profile: "decode".into(),
        }
    }
}

/// The handler.
#[derive(Debug)]
pub struct HeaderProfileHandler {
    /// The only profile, when exactly one is configured.
    only: Option<String>,
    default_profile: String,
}

impl ProfileHandler for HeaderProfileHandler {
    fn handle(
        &self,
        ctx: &RequestCtx<'_>,
        runner: &dyn ProfileRunner,
    ) -> Result<SchedulingResult, Rejection> {
        let name = match (&self.only, ctx.req.profile.map(str::trim)) {
            (Some(only), _) => only.as_str(),
            (None, Some(h)) if !h.is_empty() => h,
            (None, _) => self.default_profile.as_str(),
        };
        let mut pick = runner.run(ctx, name, phase_of_profile(name))?;
        pick.phase = phase_of_profile(name);
        Ok(SchedulingResult {
            prefill: None,
            decode: pick,
            prefill_unavailable: None,
        })
    }

    fn selects_by_header(&self) -> bool {
        true
    }
}

fn build(params: Option<&Value>, ctx: &mut BuildCtx<'_>) -> Result<Built, PluginError> {
    let p: Params = decode(params)?;
    let header = p.header_name.to_ascii_lowercase();
    if !SUPPORTED_HEADERS.contains(&header.as_str()) {
        return Err(PluginError::invalid(
            "headerName",
            format!(
                "`{}` is not supported: pdgate reads the profile from `x-llm-d-epp-profile` \
                 (or legacy `EPP-Profile`)",
                p.header_name
            ),
        ));
    }
    let only = match ctx.profiles {
        [one] => Some(one.clone()),
        many if many.contains(&p.default_profile) => None,
        _ => {
            return Err(PluginError::invalid(
                "defaultProfile",
                format!("scheduling profile `{}` is not defined", p.default_profile),
            ))
        }
    };
    Ok(Built {
        handler: Some(Arc::new(HeaderProfileHandler {
            only,
            default_profile: p.default_profile.clone(),
        })),
        params: effective(&p),
        ..Built::default()
    })
}
