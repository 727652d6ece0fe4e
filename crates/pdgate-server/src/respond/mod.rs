//! Respond: the answer to the client — the pipeline's outcome as a response, relayed bodies.

pub(crate) mod body;
pub(crate) mod forward;
