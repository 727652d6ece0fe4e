//! Endpoint roles, from the `llm-d.ai/role` label (design.md §1).

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// What an endpoint may run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Role {
    /// `prefill`
    Prefill,
    /// `decode`
    Decode,
    /// `prefill-decode` (alias `both`, deprecated)
    PrefillDecode,
    /// `encode`
    Encode,
    /// `encode-prefill`
    EncodePrefill,
    /// `encode-prefill-decode`
    EncodePrefillDecode,
}

/// A role label value that names no known role.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown role {0:?} (expected prefill, decode, prefill-decode, encode, encode-prefill, encode-prefill-decode or both)")]
pub struct UnknownRole(pub String);

impl Role {
    /// The canonical label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Prefill => "prefill",
            Role::Decode => "decode",
            Role::PrefillDecode => "prefill-decode",
            Role::Encode => "encode",
            Role::EncodePrefill => "encode-prefill",
            Role::EncodePrefillDecode => "encode-prefill-decode",
        }
    }
    /// May run the Prefill phase.
    pub fn can_prefill(self) -> bool {
        matches!(
            self,
            Role::Prefill | Role::PrefillDecode | Role::EncodePrefill | Role::EncodePrefillDecode
        )
    }
    /// May run the Decode phase.
    pub fn can_decode(self) -> bool {
        matches!(
            self,
            Role::Decode | Role::PrefillDecode | Role::EncodePrefillDecode
        )
    }
    /// May run the Encode phase.
    pub fn can_encode(self) -> bool {
        matches!(
            self,
            Role::Encode | Role::EncodePrefill | Role::EncodePrefillDecode
        )
    }
}

impl FromStr for Role {
    type Err = UnknownRole;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s {
            "prefill" => Role::Prefill,
            "decode" => Role::Decode,
            "prefill-decode" | "both" => Role::PrefillDecode,
            "encode" => Role::Encode,
            "encode-prefill" => Role::EncodePrefill,
            "encode-prefill-decode" => Role::EncodePrefillDecode,
            other => return Err(UnknownRole(other.to_string())),
        })
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_is_prefill_decode_and_unknown_is_an_error() {
        assert_eq!("both".parse::<Role>().unwrap(), Role::PrefillDecode);
        assert!(Role::PrefillDecode.can_prefill() && Role::PrefillDecode.can_decode());
        assert!(!Role::Prefill.can_decode());
        assert_eq!(
            "gpu".parse::<Role>().unwrap_err().to_string(),
            "unknown role \"gpu\" (expected prefill, decode, prefill-decode, encode, encode-prefill, encode-prefill-decode or both)"
        );
    }
}
