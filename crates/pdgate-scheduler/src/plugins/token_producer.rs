//! `token-producer` — tokenizes the prompt before scheduling, so that prefix block hashes are
//! computed over the engine's own token ids (the ids its KV events carry).
//!
//! - **Type:** `token-producer` (llm-d; its older name `tokenizer` is accepted too)
//! - **Extension points:** none inside the scheduler: it is a data producer the front ends
//!   run before [`crate::Scheduler::schedule`] (IO stays out of the scheduler). The scheduler
//!   only checks and exposes the parameters ([`crate::Scheduler::token_producer`]); the server
//!   builds the tokenizer from them and puts the ids in `SchedulingRequest.prompt`.
//! - **Parameters** (llm-d names; exactly one backend, none = `vllm`):
//!   - `modelName` (required): the model whose prompts are tokenized (sent as `model` to the
//!     render endpoint); requests for other models keep the text estimate.
//!   - `vllm`: `{url, timeout, mmTimeout}` — the engine's `/v1/completions/render` and
//!     `/v1/chat/completions/render`. `url` (older llm-d: `http`) is a render server's base URL (llm-d default
//!     `http://localhost:8000`); pdgate's default, when `url` is absent, is an engine of the
//!     fleet serving the model. `timeout` (Go duration, default `5s`) bounds each call;
//!     `mmTimeout` (default `30s`) is accepted (pdgate sends no multimodal render).
//!   - `local` (pdgate): `{tokenizer, chatTemplate?}` — a model directory or its
//!     `tokenizer.json`, and optionally a `.jinja` chat template file (default: the
//!     directory's `chat_template.jinja`, else `tokenizer_config.json`'s `chat_template`).
//!   - `estimate` (pdgate): `{}` — no token ids (the text estimate of the prefix producers).
//!   - `udsTokenizerConfig` (llm-d's legacy gRPC sidecar): refused with an error.
//! - **Inputs:** the request's prompt or chat messages and its rendering fields.
//! - **Outputs:** the prompt as token ids for every plugin that reads it (prefix producers,
//!   deciders). A backend failure keeps the text estimate for that request; it is logged and
//!   counted (`pdgate_tokenizations_total{backend, outcome}`,
//!   `pdgate_tokenization_fallbacks_total{backend, reason}`), never an error to the client.
//! - **Limitations:** text-only (multimodal parts are not rendered); on `vllm serve` the
//!   render endpoints answer only with `--enable-scale-out` (vLLM 0.32; else 403 → estimate).
//!   Source: llm-d `pkg/epp/framework/plugins/requestcontrol/dataproducer/tokenizer`.

use crate::plugin_build::{decode, effective, BuildCtx, Built, PluginError, PluginType, Stage};
pub use crate::token_params::{
    BackendParams, EstimateParams, LocalParams, TokenProducerParams, VllmParams,
};
use serde_yaml_ng::Value;
use std::sync::Arc;

/// Registry entry.
pub const TYPE: PluginType = PluginType {
    name: "token-producer",
    stage: Stage::Producer,
    build,
};

/// Registry entry of llm-d's deprecated name for the same plugin.
pub const LEGACY_TYPE: PluginType = PluginType {
    name: "tokenizer",
    stage: Stage::Producer,
    build,
};

fn build(params: Option<&Value>, ctx: &mut BuildCtx<'_>) -> Result<Built, PluginError> {
    let p: TokenProducerParams = decode(params)?;
    if ctx.built.iter().any(|(_, _, b)| b.token_producer.is_some()) {
        return Err(PluginError {
            path: None,
            key: None,
            message: "only one token-producer may be configured".into(),
            missing: None,
        });
    }
    if p.model_name.trim().is_empty() {
        return Err(PluginError::invalid("modelName", "must not be empty"));
    }
    if p.uds_tokenizer_config.is_some() {
        return Err(PluginError::invalid(
            "udsTokenizerConfig",
            "the UDS tokenizer sidecar is not supported; use `vllm` (render endpoints) or `local`",
        ));
    }
    let named = [p.vllm.is_some(), p.local.is_some(), p.estimate.is_some()];
    if named.iter().filter(|n| **n).count() > 1 {
        return Err(PluginError::invalid(
            "vllm",
            "only one of `vllm`, `local` or `estimate` may be set",
        ));
    }
    if let Some(url) = p.vllm.as_ref().and_then(|v| v.url.as_deref()) {
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(PluginError::invalid(
                "vllm.url",
                format!("`{url}` is not an http:// or https:// URL"),
            ));
        }
    }
    if p.vllm.as_ref().is_some_and(|v| v.timeout.0.is_zero()) {
        return Err(PluginError::invalid(
            "vllm.timeout",
            "must be greater than 0",
        ));
    }
    if p.local
        .as_ref()
        .is_some_and(|l| l.tokenizer.trim().is_empty())
    {
        return Err(PluginError::invalid("local.tokenizer", "must not be empty"));
    }
    Ok(Built {
        params: effective(&p),
        token_producer: Some(Arc::new(p)),
        ..Built::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(yaml: &str) -> Result<TokenProducerParams, PluginError> {
        let v: Value = serde_yaml_ng::from_str(yaml).unwrap();
        let built = build(
            Some(&v),
            &mut BuildCtx {
                built: &[],
                profiles: &[],
                next_slot: 0,
            },
        )?;
        Ok((*built.token_producer.unwrap()).clone())
    }

    #[test]
    fn llm_d_sample_parameters_load_with_defaults() {
        let p = load("modelName: tiny\nvllm:\n  http: http://localhost:8000\n").unwrap();
        assert_eq!(
            p.backend(),
            BackendParams::Vllm(&VllmParams {
                url: Some("http://localhost:8000".into()),
                ..VllmParams::default()
            })
        );
        assert_eq!(
            serde_yaml_ng::to_string(&effective(&p)).unwrap(),
            "modelName: tiny\nvllm:\n  url: http://localhost:8000\n  timeout: 5s\n  mmTimeout: 30s\n"
        );
        let p = load("modelName: tiny").unwrap();
        assert_eq!(p.backend(), BackendParams::Vllm(&VllmParams::default()));
    }

    #[test]
    fn local_and_estimate_backends() {
        let p = load("modelName: m\nlocal:\n  tokenizer: /models/m\n  chatTemplate: /t.jinja\n")
            .unwrap();
        assert_eq!(
            p.backend(),
            BackendParams::Local(&LocalParams {
                tokenizer: "/models/m".into(),
                chat_template: Some("/t.jinja".into())
            })
        );
        assert_eq!(
            load("modelName: m\nestimate: {}\n").unwrap().backend(),
            BackendParams::Estimate
        );
    }

    #[test]
    fn bad_parameters_name_the_field() {
        let err = |yaml: &str| load(yaml).unwrap_err();
        assert_eq!(err("vllm: {}").path, None);
        assert!(
            err("vllm: {}").message.contains("modelName"),
            "{:?}",
            err("vllm: {}")
        );
        assert_eq!(
            err("modelName: m\nvllm: {}\nestimate: {}").path.as_deref(),
            Some("vllm")
        );
        assert_eq!(
            err("modelName: m\nvllm:\n  url: localhost:8000")
                .path
                .as_deref(),
            Some("vllm.url")
        );
        assert_eq!(
            err("modelName: m\nvllm:\n  timeout: 0s").path.as_deref(),
            Some("vllm.timeout")
        );
        assert!(err("modelName: m\nvllm:\n  uri: http://x")
            .message
            .contains("unknown field `uri`"));
        assert_eq!(
            err("modelName: m\nudsTokenizerConfig:\n  socketFile: /tmp/s")
                .path
                .as_deref(),
            Some("udsTokenizerConfig")
        );
        assert_eq!(err("modelName: ''").path.as_deref(), Some("modelName"));
    }
}
