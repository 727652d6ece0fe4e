//! One request's outcome ([`RequestRecord`]) and the pure pieces that build it: the served-by
//! headers ([`ServedBy`]) and the SSE event tracker ([`StreamTracker`]).

use pdgate_api::headers;
use reqwest::header::HeaderMap;
use serde::Serialize;
use serde_json::Value;

/// Status label of a transport failure (connect, reset, mid-stream read error).
pub const STATUS_TRANSPORT: &str = "transport";
/// Status label of an SSE `data: {"error": ...}` event in a 2xx stream.
pub const STATUS_STREAM_ERROR: &str = "stream_error";

/// The served-by response headers (design.md §5.3, `pdgate_api::headers`), when present.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ServedBy {
    /// `x-pdgate-prefill-endpoint`.
    pub prefill_endpoint: Option<String>,
    /// `x-pdgate-decode-endpoint`.
    pub decode_endpoint: Option<String>,
    /// `x-pdgate-prefill-revision`.
    pub prefill_revision: Option<String>,
    /// `x-pdgate-decode-revision`.
    pub decode_revision: Option<String>,
    /// `x-pdgate-pd-mode` (`split` or `aggregated`).
    pub pd_mode: Option<String>,
}

impl ServedBy {
    /// Reads the headers; absent, empty or non-UTF-8 values are `None`.
    pub fn from_headers(h: &HeaderMap) -> Self {
        let get = |name: &str| {
            h.get(name)
                .and_then(|v| v.to_str().ok())
                .filter(|v| !v.is_empty())
                .map(str::to_string)
        };
        ServedBy {
            prefill_endpoint: get(headers::SERVED_PREFILL_ENDPOINT),
            decode_endpoint: get(headers::SERVED_DECODE_ENDPOINT),
            prefill_revision: get(headers::SERVED_PREFILL_REVISION),
            decode_revision: get(headers::SERVED_DECODE_REVISION),
            pd_mode: get(headers::SERVED_MODE),
        }
    }
}

/// The outcome of one request. Serialized in the report's `records`.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct RequestRecord {
    /// Position of the request in the workload.
    pub index: usize,
    /// HTTP status code (`"200"`, `"503"`, ...), or [`STATUS_STREAM_ERROR`] /
    /// [`STATUS_TRANSPORT`].
    pub status: String,
    /// True for a 2xx response whose stream carried no error event.
    pub ok: bool,
    /// Error body of a non-2xx (first 1,000 bytes), the stream error's message, or the
    /// transport error.
    pub error: Option<String>,
    /// Which endpoints served the request.
    #[serde(flatten)]
    pub served: ServedBy,
    /// The base URL it was sent to, when the replay had several (absent from the JSON
    /// otherwise).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// `usage.prompt_tokens`, when the stream reported usage.
    pub prompt_tokens: Option<u32>,
    /// `usage.prompt_tokens_details.cached_tokens`, when reported.
    pub cached_tokens: Option<u32>,
    /// `usage.completion_tokens`, else the number of content chunks.
    pub output_tokens: u32,
    /// Time to the first content chunk, ms.
    pub ttft_ms: Option<f64>,
    /// Time to the end of the response, ms.
    pub e2e_ms: f64,
    /// Gaps between consecutive content chunks, ms (report histograms only, not serialized).
    #[serde(skip)]
    pub itl_ms: Vec<f64>,
}

/// Follows one SSE stream of OpenAI chunks: content timing, usage, error events.
#[derive(Debug, Default)]
pub struct StreamTracker {
    first_ms: Option<f64>,
    last_ms: Option<f64>,
    itl_ms: Vec<f64>,
    chunks: u32,
    prompt_tokens: Option<u32>,
    cached_tokens: Option<u32>,
    completion_tokens: Option<u32>,
    error: Option<String>,
}

impl StreamTracker {
    /// Handles one event's `data` received `at_ms` after the request was sent. A chunk counts
    /// as content when a choice has a non-empty `text`, `delta.content` or
    /// `delta.reasoning_content`. `[DONE]` and unparsable data are ignored.
    pub fn on_event(&mut self, data: &str, at_ms: f64) {
        let Ok(v) = serde_json::from_str::<Value>(data) else {
            return;
        };
        if let Some(e) = v.get("error").filter(|e| !e.is_null()) {
            let msg = e.get("message").and_then(Value::as_str);
            self.error = Some(msg.map_or_else(|| e.to_string(), str::to_string));
            return;
        }
        if let Some(u) = v.get("usage").filter(|u| u.is_object()) {
            let n = |v: Option<&Value>| v.and_then(Value::as_u64).map(|n| n as u32);
            self.prompt_tokens = n(u.get("prompt_tokens"));
            self.completion_tokens = n(u.get("completion_tokens"));
            self.cached_tokens = n(u.pointer("/prompt_tokens_details/cached_tokens"));
        }
        let has_content = v
            .get("choices")
            .and_then(Value::as_array)
            .is_some_and(|cs| cs.iter().any(choice_has_content));
        if has_content {
            self.chunks += 1;
            match self.last_ms {
                None => self.first_ms = Some(at_ms),
                Some(last) => self.itl_ms.push(at_ms - last),
            }
            self.last_ms = Some(at_ms);
        }
    }

    /// True once an error event was seen.
    pub fn failed(&self) -> bool {
        self.error.is_some()
    }

    /// The record of a stream with HTTP status `status` (2xx) that ended `e2e_ms` after
    /// sending: `ok` unless an error event arrived (then status [`STATUS_STREAM_ERROR`]).
    pub fn finish(self, index: usize, status: u16, served: ServedBy, e2e_ms: f64) -> RequestRecord {
        let ok = self.error.is_none();
        RequestRecord {
            index,
            status: if ok {
                status.to_string()
            } else {
                STATUS_STREAM_ERROR.into()
            },
            ok,
            error: self.error,
            served,
            url: None,
            prompt_tokens: self.prompt_tokens,
            cached_tokens: self.cached_tokens.or(self.prompt_tokens.map(|_| 0)),
            output_tokens: self.completion_tokens.unwrap_or(self.chunks),
            ttft_ms: self.first_ms,
            e2e_ms,
            itl_ms: self.itl_ms,
        }
    }
}

fn choice_has_content(c: &Value) -> bool {
    let non_empty = |v: Option<&Value>| v.and_then(Value::as_str).is_some_and(|s| !s.is_empty());
    non_empty(c.get("text"))
        || non_empty(c.pointer("/delta/content"))
        || non_empty(c.pointer("/delta/reasoning_content"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

    #[test]
    fn tracks_content_usage_and_itl() {
        let mut t = StreamTracker::default();
        t.on_event(r#"{"choices":[{"text":""}]}"#, 1.0);
        t.on_event(r#"{"choices":[{"text":"a"}]}"#, 10.0);
        t.on_event(r#"{"choices":[{"delta":{"content":"b"}}]}"#, 12.5);
        t.on_event(r#"{"choices":[{"text":"c"}]}"#, 20.0);
        t.on_event(
            r#"{"choices":[],"usage":{"prompt_tokens":100,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":64}}}"#,
            21.0,
        );
        t.on_event("[DONE]", 21.0);
        let r = t.finish(4, 200, ServedBy::default(), 22.0);
        assert_eq!(
            r,
            RequestRecord {
                index: 4,
                status: "200".into(),
                ok: true,
                error: None,
                served: ServedBy::default(),
                url: None,
                prompt_tokens: Some(100),
                cached_tokens: Some(64),
                output_tokens: 3,
                ttft_ms: Some(10.0),
                e2e_ms: 22.0,
                itl_ms: vec![2.5, 7.5],
            }
        );
    }

    #[test]
    fn error_event_and_chunk_count_fallback() {
        let mut t = StreamTracker::default();
        t.on_event(r#"{"choices":[{"text":"a"}]}"#, 5.0);
        t.on_event(
            r#"{"error":{"message":"decode failed","type":"x","code":502}}"#,
            6.0,
        );
        assert!(t.failed());
        let r = t.finish(0, 200, ServedBy::default(), 7.0);
        assert_eq!(
            (r.status.as_str(), r.ok, r.error.as_deref()),
            ("stream_error", false, Some("decode failed"))
        );
        assert_eq!(
            (r.output_tokens, r.prompt_tokens, r.cached_tokens),
            (1, None, None)
        );
    }

    #[test]
    fn served_by_reads_headers() {
        let mut h = HeaderMap::new();
        h.insert(
            headers::SERVED_PREFILL_ENDPOINT,
            HeaderValue::from_static("p0"),
        );
        h.insert(
            headers::SERVED_DECODE_ENDPOINT,
            HeaderValue::from_static("d1"),
        );
        h.insert(
            headers::SERVED_DECODE_REVISION,
            HeaderValue::from_static("v2"),
        );
        h.insert(headers::SERVED_MODE, HeaderValue::from_static(""));
        assert_eq!(
            ServedBy::from_headers(&h),
            ServedBy {
                prefill_endpoint: Some("p0".into()),
                decode_endpoint: Some("d1".into()),
                prefill_revision: None,
                decode_revision: Some("v2".into()),
                pd_mode: None,
            }
        );
    }
}
