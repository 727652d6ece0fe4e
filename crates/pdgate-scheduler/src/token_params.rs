//! What the `token-producer` plugin ([`crate::plugins::token_producer`], whose docs give the
//! rules) tells the front ends: which model's prompts to tokenize and with which backend. The
//! scheduler only checks and exposes them ([`crate::Scheduler::token_producer`]); tokenizing
//! is IO and stays in the front ends.

use crate::flow::duration::GoDuration;
use serde::{Deserialize, Serialize};
use serde_yaml_ng::Value;
use std::time::Duration;

/// Parameters (llm-d names).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TokenProducerParams {
    /// The model whose prompts are tokenized.
    pub model_name: String,
    /// The `vllm` backend.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vllm: Option<VllmParams>,
    /// The `local` backend.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local: Option<LocalParams>,
    /// The `estimate` backend.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub estimate: Option<EstimateParams>,
    /// llm-d's legacy UDS backend: refused by the plugin's build.
    #[serde(default, skip_serializing)]
    pub(crate) uds_tokenizer_config: Option<Value>,
}

/// `vllm`: the engine's render endpoints.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct VllmParams {
    /// Base URL of a render server (`http://host:port`); `None` = an engine of the fleet.
    /// llm-d's current name is `url` (`tokenizer/vllm_http.go`); its earlier `http` is
    /// accepted too.
    #[serde(alias = "http", skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Per-call timeout (default 5 s).
    pub timeout: GoDuration,
    /// Multimodal per-call timeout (default 30 s; accepted, unused).
    pub mm_timeout: GoDuration,
}

impl Default for VllmParams {
    fn default() -> Self {
        VllmParams {
            url: None,
            timeout: GoDuration(Duration::from_secs(5)),
            mm_timeout: GoDuration(Duration::from_secs(30)),
        }
    }
}

/// `local`: a tokenizer on disk.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct LocalParams {
    /// A model directory, or its `tokenizer.json`.
    pub tokenizer: String,
    /// A chat template file (`.jinja`), overriding the model directory's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chat_template: Option<String>,
}

/// `estimate`: no parameters.
#[derive(Debug, Clone, PartialEq, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct EstimateParams {}

/// The backend chosen by the parameters.
#[derive(Debug, Clone, PartialEq)]
pub enum BackendParams<'a> {
    /// `vllm` (also when no backend is named).
    Vllm(&'a VllmParams),
    /// `local`.
    Local(&'a LocalParams),
    /// `estimate`.
    Estimate,
}

impl TokenProducerParams {
    /// The configured backend (checked at build: exactly one, or none = `vllm` defaults).
    pub fn backend(&self) -> BackendParams<'_> {
        static DEFAULT_VLLM: std::sync::OnceLock<VllmParams> = std::sync::OnceLock::new();
        match (&self.vllm, &self.local, &self.estimate) {
            (_, Some(l), _) => BackendParams::Local(l),
            (_, _, Some(_)) => BackendParams::Estimate,
            (Some(v), _, _) => BackendParams::Vllm(v),
            (None, None, None) => {
                BackendParams::Vllm(DEFAULT_VLLM.get_or_init(VllmParams::default))
            }
        }
    }
}
