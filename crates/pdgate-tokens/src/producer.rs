//! [`TokenProducer`]: one backend, the model it tokenizes for, and the fallback rule — a
//! backend that cannot tokenize a prompt leaves it to the byte estimate (the request is
//! never failed for it), and says why in the returned [`Outcome`].

use crate::input::PromptSource;
use crate::local::LocalTokenizer;
use crate::vllm::{RenderError, VllmRenderer};
use pdgate_api::InferenceRequest;
use std::sync::atomic::{AtomicU64, Ordering};

/// How prompts are tokenized.
#[derive(Debug)]
pub enum Backend {
    /// No token ids: the scheduler keeps hashing the text at its byte estimate.
    Estimate,
    /// A local `tokenizer.json` and chat template (boxed: it is large).
    Local(Box<LocalTokenizer>),
    /// An engine's render endpoints; `base` is a fixed render server (`vllm.url`), else the
    /// caller names an engine per request.
    Vllm {
        /// The render client.
        renderer: VllmRenderer,
        /// Fixed base URL (`http://host:port`), when configured.
        base: Option<String>,
    },
}

/// What happened to one prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The backend produced the token ids.
    Tokenized,
    /// The prompt already was token ids (returned as they are, no backend call).
    AlreadyTokens,
    /// The `estimate` backend: no token ids by design.
    Estimate,
    /// The request is for another model than the one configured: not tokenized.
    OtherModel,
    /// The backend failed; the prompt stays at the estimate.
    Fallback(Fallback),
}

impl Outcome {
    /// A short label for metrics: `tokenized`, `already_tokens`, `estimate`, `other_model`,
    /// `fallback`.
    pub fn label(&self) -> &'static str {
        match self {
            Outcome::Tokenized => "tokenized",
            Outcome::AlreadyTokens => "already_tokens",
            Outcome::Estimate => "estimate",
            Outcome::OtherModel => "other_model",
            Outcome::Fallback(_) => "fallback",
        }
    }
}

/// Why a backend gave no token ids.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Fallback {
    /// The render call failed.
    #[error(transparent)]
    Render(#[from] RenderError),
    /// The local tokenizer or chat template failed (message).
    #[error("local tokenizer: {0}")]
    Local(String),
}

impl Fallback {
    /// A short label for metrics: the render error's label, or `local`.
    pub fn label(&self) -> &'static str {
        match self {
            Fallback::Render(e) => e.label(),
            Fallback::Local(_) => "local",
        }
    }
}

/// The token ids of one prompt (`None` = keep the estimate) and how they were obtained.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tokenization {
    /// Token ids of the whole prompt, or `None`.
    pub ids: Option<Vec<u32>>,
    /// What happened.
    pub outcome: Outcome,
}

impl Tokenization {
    fn none(outcome: Outcome) -> Self {
        Tokenization { ids: None, outcome }
    }
}

/// Tokenizes prompts for one model (llm-d's `token-producer`). `Send + Sync`; share it.
#[derive(Debug)]
pub struct TokenProducer {
    model: String,
    backend: Backend,
    fallbacks: AtomicU64,
}

impl TokenProducer {
    /// A producer for requests whose `model` is `model`.
    pub fn new(model: impl Into<String>, backend: Backend) -> Self {
        TokenProducer {
            model: model.into(),
            backend,
            fallbacks: AtomicU64::new(0),
        }
    }

    /// The model this producer tokenizes for.
    pub fn model(&self) -> &str {
        &self.model
    }

    /// The backend's name: `estimate`, `local` or `vllm`.
    pub fn backend_name(&self) -> &'static str {
        match self.backend {
            Backend::Estimate => "estimate",
            Backend::Local(_) => "local",
            Backend::Vllm { .. } => "vllm",
        }
    }

    /// True when [`Self::tokenize`] needs an engine from the caller (the `vllm` backend
    /// without a fixed `vllm.url`).
    pub fn needs_engine(&self) -> bool {
        matches!(self.backend, Backend::Vllm { base: None, .. })
    }

    /// Prompts that fell back to the estimate so far.
    pub fn fallbacks(&self) -> u64 {
        self.fallbacks.load(Ordering::Relaxed)
    }

    /// The token ids of `req`'s prompt. `engine`: the base URL of an engine serving the
    /// model, used by the `vllm` backend when no `vllm.url` is configured. Token-id prompts
    /// come back as they are; a failure gives `ids: None` with [`Outcome::Fallback`].
    pub async fn tokenize(&self, req: &InferenceRequest, engine: Option<&str>) -> Tokenization {
        if req.model != self.model {
            return Tokenization::none(Outcome::OtherModel);
        }
        let source = PromptSource::of(req);
        if let PromptSource::Tokens(ids) = source {
            return Tokenization {
                ids: Some(ids.to_vec()),
                outcome: Outcome::AlreadyTokens,
            };
        }
        let result = match &self.backend {
            Backend::Estimate => return Tokenization::none(Outcome::Estimate),
            Backend::Local(local) => local
                .tokenize(&source)
                .map_err(|e| Fallback::Local(e.to_string())),
            Backend::Vllm { renderer, base } => match base.as_deref().or(engine) {
                Some(base) => renderer
                    .render(base, req, &self.model)
                    .await
                    .map_err(Fallback::from),
                None => Err(Fallback::Render(RenderError::NoEngine)),
            },
        };
        match result {
            Ok(ids) => Tokenization {
                ids: Some(ids),
                outcome: Outcome::Tokenized,
            },
            Err(why) => {
                self.fallbacks.fetch_add(1, Ordering::Relaxed);
                Tokenization::none(Outcome::Fallback(why))
            }
        }
    }
}
