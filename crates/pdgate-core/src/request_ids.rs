//! Request identifiers: the request's id (`x-request-id`, the client's when it is a short
//! token, else a fresh UUID) and the revision decision id a coordinator sends on its legs.

use http::{HeaderMap, HeaderValue};
use pdgate_api::headers;

/// A fresh `x-llm-d-revision-decision-id` (UUID v4).
pub fn decision_id() -> HeaderValue {
    fresh_uuid()
}

/// A fresh UUID v4, hyphenated, as a header value.
fn fresh_uuid() -> HeaderValue {
    let mut id = [0u8; uuid::fmt::Hyphenated::LENGTH];
    let id = uuid::Uuid::new_v4().hyphenated().encode_lower(&mut id);
    HeaderValue::from_str(id).unwrap_or(HeaderValue::from_static("pdgate"))
}

/// Longest client `x-request-id` kept, bytes.
pub const MAX_REQUEST_ID_BYTES: usize = 128;

/// The request's id: the client's `x-request-id` when it is one short token — 1 to
/// [`MAX_REQUEST_ID_BYTES`] visible ASCII characters (`!`..`~`), as it is echoed in a header,
/// sent to every engine and becomes the completion id — else a fresh UUID v4. A replaced
/// client value is logged (rate-limited; its length, not its bytes).
pub fn request_id(client: &HeaderMap) -> HeaderValue {
    let given = client.get(headers::REQUEST_ID);
    if let Some(v) = given.filter(|v| is_token(v.as_bytes())) {
        return v.clone();
    }
    if let Some(v) = given {
        if crate::log_limit::allow(&crate::log_limit::REQUEST_IDS) {
            tracing::info!(
                bytes = v.len(),
                "client x-request-id is not a short visible-ASCII token; replaced"
            );
        }
    }
    fresh_uuid()
}

/// 1..=[`MAX_REQUEST_ID_BYTES`] bytes, each visible ASCII.
fn is_token(v: &[u8]) -> bool {
    (1..=MAX_REQUEST_ID_BYTES).contains(&v.len()) && v.iter().all(|b| b.is_ascii_graphic())
}
