//! Phases: one hop of a request (design.md §1).

use serde::{Deserialize, Serialize};
use std::fmt;

/// One hop of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Phase {
    /// Multimodal encoder pass.
    Encode,
    /// Prompt processing on a prefill endpoint; produces `kv_transfer_params`.
    Prefill,
    /// Token generation on a decode endpoint, consuming the prefill's KV blocks.
    Decode,
    /// Prefill and decode on one endpoint.
    Aggregated,
}

impl Phase {
    /// Lower-case name used in metrics labels and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Encode => "encode",
            Phase::Prefill => "prefill",
            Phase::Decode => "decode",
            Phase::Aggregated => "aggregated",
        }
    }
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
