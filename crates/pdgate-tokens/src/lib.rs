//! Prompt tokenization for the router (llm-d's `token-producer`): the router computes prefix
//! block hashes from the same token ids the engines publish in their KV events.
//!
//! Backends ([`Backend`]): `estimate` (no ids; text stays at its byte estimate), `local`
//! ([`LocalTokenizer`]: `tokenizer.json` + chat template, sync and CPU-only), `vllm`
//! ([`VllmRenderer`]: the engine's `/v1/completions/render` and `/v1/chat/completions/render`,
//! async). [`TokenProducer::tokenize`] never fails a request: a backend failure is an
//! [`Outcome::Fallback`] with the reason, and the prompt keeps the estimate.

pub mod input;
pub mod local;
pub mod producer;
pub mod template;
pub mod vllm;

pub use input::{ChatSource, PromptSource};
pub use local::{LoadError, LocalError, LocalTokenizer};
pub use producer::{Backend, Fallback, Outcome, TokenProducer, Tokenization};
pub use template::{ChatTemplate, TemplateError};
pub use vllm::{RenderError, VllmRenderer};
