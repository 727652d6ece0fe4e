//! Config: `serve`'s flags, the resilience flags, llm-d's coordinator file.

pub(crate) mod args;
pub mod coordinator_config;
pub(crate) mod resilience_args;
