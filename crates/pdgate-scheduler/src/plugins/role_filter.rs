//! The shared mechanism of the role filters (`prefill-filter`, `decode-filter`,
//! `encode-filter`): keep the candidates whose role (label `llm-d.ai/role`) passes the
//! plugin's predicate. Each filter's own module documents its rule.

use crate::plugin::{Candidates, Filter};
use crate::plugin_build::{decode, Built, NoParams, PluginError};
use crate::request::RequestCtx;
use pdgate_api::Role;
use serde_yaml_ng::Value;
use std::sync::Arc;

/// Keeps candidates whose role passes `keep` (`None` = no role label).
#[derive(Debug, Clone, Copy)]
pub struct RoleFilter {
    keep: fn(Option<Role>) -> bool,
}

impl RoleFilter {
    /// A filter keeping the endpoints whose role passes `keep`.
    pub fn new(keep: fn(Option<Role>) -> bool) -> Self {
        RoleFilter { keep }
    }
}

impl Filter for RoleFilter {
    fn filter(&self, _ctx: &RequestCtx<'_>, candidates: &mut Candidates<'_>) {
        candidates.retain(|e| (self.keep)(e.endpoint.role));
    }
}

/// Builds a role filter that takes no parameters.
///
/// Errors: any parameter (the role filters have none).
pub fn build(params: Option<&Value>, keep: fn(Option<Role>) -> bool) -> Result<Built, PluginError> {
    decode::<NoParams>(params)?;
    Ok(Built {
        filter: Some(Arc::new(RoleFilter::new(keep))),
        ..Built::default()
    })
}
