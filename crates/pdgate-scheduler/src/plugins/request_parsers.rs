//! `openai-parser` — llm-d's request parser for the OpenAI API, accepted so that configs that
//! declare it (llm-d's default parser list names it) load; pdgate's front end parses OpenAI
//! requests itself, always.
//!
//! - **Type:** `openai-parser`
//! - **Extension points:** none (a parser in llm-d's `requestHandler`; pdgate has no parser
//!   extension point).
//! - **Parameters:** none.
//! - **Inputs / outputs:** none; declaring it changes nothing.
//! - **Limitations:** llm-d's parser also claims `/v1/embeddings`, `/v1/responses`,
//!   `/v1/conversations`, the render paths and `/v1/images/generations`; pdgate routes
//!   `/v1/completions` and `/v1/chat/completions` (the other paths answer 404). Source:
//!   llm-d-router `pkg/epp/framework/plugins/requesthandling/parsers/openai`.

use crate::registry::{decode, BuildCtx, Built, NoParams, PluginError, PluginType, Stage};
use serde_yaml_ng::Value;

/// Registry entry.
pub const TYPE: PluginType = PluginType {
    name: "openai-parser",
    stage: Stage::Consumer,
    build,
};

fn build(params: Option<&Value>, _: &mut BuildCtx<'_>) -> Result<Built, PluginError> {
    decode::<NoParams>(params)?;
    Ok(Built::default())
}

#[cfg(test)]
mod tests {
    use crate::Scheduler;

    #[test]
    fn a_config_declaring_it_loads_and_a_parameter_is_refused() {
        let yaml = |params: &str| {
            format!(
                "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: openai-parser{params}\n- type: queue-scorer\nschedulingProfiles:\n- name: default\n  plugins:\n  - pluginRef: queue-scorer\n"
            )
        };
        assert!(Scheduler::from_yaml(&yaml(""), "epp.yaml").is_ok());
        let e = Scheduler::from_yaml(&yaml("\n  parameters:\n    strict: true"), "epp.yaml")
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("unknown field `strict`"), "{e}");
    }
}
