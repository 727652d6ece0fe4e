//! `prefill-filter` — keeps endpoints that may run the Prefill phase.
//!
//! - **Type:** `prefill-filter`
//! - **Extension points:** Filter
//! - **Parameters:** none.
//! - **Inputs:** the endpoint's role (label `llm-d.ai/role`).
//! - **Outputs:** candidates whose role is `prefill`, `prefill-decode` (`both`),
//!   `encode-prefill` or `encode-prefill-decode`.
//! - **Limitations:** endpoints without a role label are dropped (llm-d: prefill must be
//!   explicit); an unknown role value counts as no role.

use crate::plugin::{Candidates, Filter};
use crate::registry::{decode, BuildCtx, Built, NoParams, PluginError, PluginType, Stage};
use crate::request::RequestCtx;
use serde_yaml_ng::Value;
use std::sync::Arc;

/// Registry entry.
pub const TYPE: PluginType = PluginType {
    name: "prefill-filter",
    stage: Stage::Consumer,
    build,
};

/// The filter.
#[derive(Debug, Default)]
pub struct PrefillFilter;

impl Filter for PrefillFilter {
    fn filter(&self, _ctx: &RequestCtx<'_>, candidates: &mut Candidates<'_>) {
        candidates.retain(|e| e.endpoint.role.is_some_and(|r| r.can_prefill()));
    }
}

fn build(params: Option<&Value>, _: &mut BuildCtx<'_>) -> Result<Built, PluginError> {
    decode::<NoParams>(params)?;
    Ok(Built {
        filter: Some(Arc::new(PrefillFilter)),
        ..Built::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::testutil::{ep, with_ctx};
    use pdgate_api::PromptInput;

    #[test]
    fn keeps_prefill_capable_roles_only() {
        let eps = [
            ep("p", Some("prefill")),
            ep("d", Some("decode")),
            ep("b", Some("both")),
            ep("n", None),
        ];
        let mut c: Candidates<'_> = eps.iter().collect();
        with_ctx(&PromptInput::Tokens(vec![]), |ctx| {
            PrefillFilter.filter(ctx, &mut c)
        });
        let names: Vec<&str> = c.iter().map(|e| e.endpoint.name.as_str()).collect();
        assert_eq!(names, ["p", "b"]);
    }
}
