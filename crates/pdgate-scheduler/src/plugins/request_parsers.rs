//! `openai-parser`, `anthropic-parser`, `vllmhttp-parser` — llm-d's request parsers for the
//! APIs pdgate routes, accepted so that configs that declare them (llm-d's default parser
//! list names them) load; pdgate's front end parses these requests itself, always
//! (`pdgate_api::ApiKind`).
//!
//! - **Types:** `openai-parser` (completions, chat, responses, embeddings), `anthropic-parser`
//!   (`/v1/messages`), `vllmhttp-parser` (`/inference/v1/generate`).
//! - **Extension points:** none (a parser in llm-d's `requestHandler`; pdgate has no parser
//!   extension point).
//! - **Parameters:** none.
//! - **Inputs / outputs:** none; declaring one changes nothing.
//! - **Limitations:** llm-d's openai parser also claims `/v1/conversations`, the render paths
//!   and `/v1/images/generations`, and its anthropic parser `/v1/messages/count_tokens`;
//!   pdgate answers those paths 404. Source: llm-d-router
//!   `pkg/epp/framework/plugins/requesthandling/parsers/{openai,anthropic,vllmhttp}`.

use crate::plugin_build::{decode, BuildCtx, Built, NoParams, PluginError, PluginType, Stage};
use serde_yaml_ng::Value;

/// Registry entry of `openai-parser`.
pub const TYPE: PluginType = PluginType {
    name: "openai-parser",
    stage: Stage::Consumer,
    build,
};

/// Registry entry of `anthropic-parser`.
pub const ANTHROPIC_TYPE: PluginType = PluginType {
    name: "anthropic-parser",
    stage: Stage::Consumer,
    build,
};

/// Registry entry of `vllmhttp-parser`.
pub const VLLMHTTP_TYPE: PluginType = PluginType {
    name: "vllmhttp-parser",
    stage: Stage::Consumer,
    build,
};

fn build(params: Option<&Value>, _: &mut BuildCtx<'_>) -> Result<Built, PluginError> {
    decode::<NoParams>(params)?;
    Ok(Built::default())
}

#[cfg(test)]
#[path = "request_parsers_tests.rs"]
mod tests;
