//! Facts about server-sent-event answers that both fronts read.

use http::HeaderMap;

/// True when `h` says the body is an SSE stream (`content-type: text/event-stream…`).
pub fn is_event_stream(h: &HeaderMap) -> bool {
    h.get(http::header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"))
}
