//! The OpenAI error body `{"error":{"message","type","code"}}` (design.md §5.5), and the same
//! error in the forms of the other APIs (Anthropic messages, Responses streams).

use crate::api_kind::{ApiKind, SseForm};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

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

    /// The body of this error as `api` answers it: on messages, Anthropic's
    /// `{"type":"error","error":{"type","message"}}` (vLLM 0.32
    /// `entrypoints/anthropic/api_router.py` answers its errors in this form) with
    /// [`anthropic_error_type`]; OpenAI's [`Self::to_bytes`] otherwise.
    pub fn to_bytes_for(&self, api: ApiKind) -> Vec<u8> {
        match api {
            ApiKind::Messages => anthropic_error(self.error.code, &self.error.message)
                .to_string()
                .into_bytes(),
            _ => self.to_bytes(),
        }
    }
}

/// Anthropic's error type names by status (Anthropic API "Errors").
pub fn anthropic_error_type(status: u16) -> &'static str {
    match status {
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        503 | 529 => "overloaded_error",
        _ if status >= 500 => "api_error",
        _ => "invalid_request_error",
    }
}

fn anthropic_error(status: u16, message: &str) -> Value {
    json!({"type": "error", "error": {"type": anthropic_error_type(status), "message": message}})
}

/// The SSE event that ends a broken stream of `form`, carrying `error` (an OpenAI inner error
/// object: `message`, `type`, `code`):
/// - [`SseForm::DataDone`]: `data: {"error":{…}}` then `data: [DONE]` (vLLM's form);
/// - [`SseForm::Anthropic`]: `event: error` with `{"type":"error","error":{"type","message"}}`
///   and no `message_stop` (vLLM 0.32 `anthropic/serving.py`);
/// - [`SseForm::Responses`]: `event: error` with OpenAI's `ResponseErrorEvent`
///   `{"type":"error","code","message","param":null}` (the router cannot know the stream's
///   next `sequence_number`, so it is left out).
pub fn sse_error_event(form: SseForm, error: &Value) -> Vec<u8> {
    let message = error
        .get("message")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let status = error
        .get("code")
        .and_then(Value::as_u64)
        .and_then(|c| u16::try_from(c).ok());
    let mut out = Vec::with_capacity(128 + message.len());
    match form {
        SseForm::DataDone => {
            out.extend_from_slice(b"data: ");
            out.extend_from_slice(json!({ "error": error }).to_string().as_bytes());
            out.extend_from_slice(b"\n\ndata: [DONE]\n\n");
        }
        SseForm::Anthropic => {
            out.extend_from_slice(b"event: error\ndata: ");
            out.extend_from_slice(
                anthropic_error(status.unwrap_or(500), message)
                    .to_string()
                    .as_bytes(),
            );
            out.extend_from_slice(b"\n\n");
        }
        SseForm::Responses => {
            let code = error.get("type").cloned().unwrap_or(Value::Null);
            let event = json!({"type": "error", "code": code, "message": message, "param": null});
            out.extend_from_slice(b"event: error\ndata: ");
            out.extend_from_slice(event.to_string().as_bytes());
            out.extend_from_slice(b"\n\n");
        }
    }
    out
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
    fn each_api_gets_its_own_error_form() {
        let e = ErrorBody::new(503, "no endpoint");
        assert_eq!(
            String::from_utf8(e.to_bytes_for(ApiKind::Messages)).unwrap(),
            r#"{"error":{"message":"no endpoint","type":"overloaded_error"},"type":"error"}"#
        );
        assert_eq!(e.to_bytes_for(ApiKind::Responses), e.to_bytes());
        let inner = serde_json::to_value(&e.error).unwrap();
        assert_eq!(
            String::from_utf8(sse_error_event(SseForm::DataDone, &inner)).unwrap(),
            "data: {\"error\":{\"code\":503,\"message\":\"no endpoint\",\"type\":\"service_unavailable\"}}\n\ndata: [DONE]\n\n"
        );
        assert_eq!(
            String::from_utf8(sse_error_event(SseForm::Anthropic, &inner)).unwrap(),
            "event: error\ndata: {\"error\":{\"message\":\"no endpoint\",\"type\":\"overloaded_error\"},\"type\":\"error\"}\n\n"
        );
        assert_eq!(
            String::from_utf8(sse_error_event(SseForm::Responses, &inner)).unwrap(),
            "event: error\ndata: {\"code\":\"service_unavailable\",\"message\":\"no endpoint\",\"param\":null,\"type\":\"error\"}\n\n"
        );
    }

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
