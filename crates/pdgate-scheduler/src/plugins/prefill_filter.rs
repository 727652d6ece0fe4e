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

use crate::plugin_build::{BuildCtx, Built, PluginError, PluginType, Stage};
use crate::plugins::role_filter;
use pdgate_api::{Phase, Role};
use serde_yaml_ng::Value;

/// Registry entry.
pub const TYPE: PluginType = PluginType {
    name: "prefill-filter",
    stage: Stage::Consumer,
    build,
};

/// The rule: which roles this filter keeps (`None` = no role label).
pub fn keeps(role: Option<Role>) -> bool {
    crate::pins::phase_accepts(Phase::Prefill, role)
}

fn build(params: Option<&Value>, _: &mut BuildCtx<'_>) -> Result<Built, PluginError> {
    role_filter::build(params, keeps)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugin::{Candidates, Filter};
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
            role_filter::RoleFilter::new(keeps).filter(ctx, &mut c)
        });
        let names: Vec<&str> = c.iter().map(|e| e.endpoint.name.as_str()).collect();
        assert_eq!(names, ["p", "b"]);
    }
}
