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

/// Longest error message sent, bytes (before the truncation mark).
pub const MAX_ERROR_MESSAGE_BYTES: usize = 1024;

impl ErrorBody {
    /// Builds an error body; `kind` is the OpenAI error type for `status`
    /// (see [`error_type_for_status`]).
    ///
    /// `message` is cut to [`MAX_ERROR_MESSAGE_BYTES`] (on a character boundary, marked
    /// `… (truncated)`): messages echo client strings (a model name, a pin, a header value),
    /// and a 1 MB model name must not come back as a 1 MB error.
    pub fn new(status: u16, message: impl Into<String>) -> Self {
        let mut message = message.into();
        if message.len() > MAX_ERROR_MESSAGE_BYTES {
            let mut end = MAX_ERROR_MESSAGE_BYTES;
            while !message.is_char_boundary(end) {
                end -= 1;
            }
            message.truncate(end);
            message.push_str("… (truncated)");
        }
        ErrorBody {
            error: ErrorDetail {
                message,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_messages_are_cut_on_a_character_boundary() {
        let short = ErrorBody::new(404, "The model `m` does not exist.");
        assert_eq!(short.error.message, "The model `m` does not exist.");
        // 2-byte characters: the cut falls inside one at an odd limit, so it moves back.
        let long = ErrorBody::new(404, format!("x{}", "é".repeat(2_000)));
        let m = &long.error.message;
        assert!(m.ends_with("… (truncated)"), "{m}");
        let kept = m.trim_end_matches("… (truncated)");
        assert_eq!(kept.len(), MAX_ERROR_MESSAGE_BYTES - 1);
        assert!(kept.starts_with("xé"));
    }
}
