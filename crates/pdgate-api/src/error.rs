//! The OpenAI error body `{"error":{"message","type","code"}}` (design.md §5.5).

use serde::{Deserialize, Serialize};

/// OpenAI-compatible error body. `code` carries the HTTP status, as vLLM does.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// The error.
    pub error: ErrorDetail,
}

/// Inner object of [`ErrorBody`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorDetail {
    /// Human-readable reason, naming the field, header or line at fault.
    pub message: String,
    /// OpenAI error type, e.g. `invalid_request_error`.
    #[serde(rename = "type")]
    pub kind: String,
    /// HTTP status code.
    pub code: u16,
}

impl ErrorBody {
    /// Builds an error body; `kind` is the OpenAI error type for `status`
    /// (see [`error_type_for_status`]).
    pub fn new(status: u16, message: impl Into<String>) -> Self {
        ErrorBody {
            error: ErrorDetail {
                message: message.into(),
                kind: error_type_for_status(status).to_string(),
                code: status,
            },
        }
    }

    /// Serialized JSON bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_else(|_| b"{\"error\":{}}".to_vec())
    }
}

/// OpenAI error type names by status family.
pub fn error_type_for_status(status: u16) -> &'static str {
    match status {
        400 | 413 | 412 | 422 => "invalid_request_error",
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        429 => "rate_limit_error",
        503 => "service_unavailable",
        504 => "timeout_error",
        _ if status >= 500 => "server_error",
        _ => "invalid_request_error",
    }
}
