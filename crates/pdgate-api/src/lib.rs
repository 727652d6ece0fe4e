//! Wire types shared by every pdgate crate (design.md §1, §5).
//!
//! This crate does no IO. It holds the vocabulary (roles, phases), the header and label names,
//! the OpenAI request view that the router and the simulator both parse bodies into, the
//! `kv_transfer_params` object of the vLLM NIXL connector, and the OpenAI error body.

pub mod api_kind;
pub mod error;
pub mod headers;
pub mod hints;
pub mod kv;
pub mod kv_events;
pub mod labels;
pub mod log_limit;
pub mod media;
pub mod openai;
pub mod phase;
pub mod prefer;
pub mod prompts;
pub mod raw_object;
pub mod request_fields;
pub mod role;
pub mod serde_text;
pub mod spells;
pub mod sse;
pub mod usage_reader;

pub use api_kind::{ApiKind, SseForm};
pub use error::{ErrorBody, ErrorDetail};
pub use kv::KvTransferParams;
pub use openai::{InferenceRequest, PromptInput, RequestError, Usage};
pub use phase::Phase;
pub use raw_object::RawObject;
pub use role::Role;
