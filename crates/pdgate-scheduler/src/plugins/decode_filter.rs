//! `decode-filter` — keeps endpoints that may run the Decode phase.
//!
//! - **Type:** `decode-filter`
//! - **Extension points:** Filter
//! - **Parameters:** none.
//! - **Inputs:** the endpoint's role (label `llm-d.ai/role`).
//! - **Outputs:** candidates whose role is `decode`, `prefill-decode` (`both`) or
//!   `encode-prefill-decode`, and endpoints with no role label (llm-d: unlabeled = decode).
//! - **Limitations:** an unknown role value counts as no role, so it passes.

use crate::plugin_build::{BuildCtx, Built, PluginError, PluginType, Stage};
use crate::plugins::role_filter;
use pdgate_api::{Phase, Role};
use serde_yaml_ng::Value;

/// Registry entry.
pub const TYPE: PluginType = PluginType {
    name: "decode-filter",
    stage: Stage::Consumer,
    build,
};

/// The rule: which roles this filter keeps (`None` = no role label).
pub fn keeps(role: Option<Role>) -> bool {
    crate::pins::phase_accepts(Phase::Decode, role)
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
    fn keeps_decode_capable_and_unlabeled() {
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
        assert_eq!(names, ["d", "b", "n"]);
    }
}
