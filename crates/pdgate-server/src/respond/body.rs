//! The client response body: the last leg's body passed through byte for byte, with the
//! request's bookings tied to its lifetime and stream failures turned into SSE error events.
//!
//! Dropping the body (end of stream, error, or client disconnect — hyper drops it when the
//! connection goes) drops the [`Booking`]s it holds, so in-flight counts fall in every case,
//! and drops the upstream leg, so the engine sees the abort. The bookings are marked complete
//! only when the upstream body ended cleanly, so an abandoned stream fires the scheduler's
//! `RequestAbandoned` hooks. The first body chunk from upstream (a streamed response's first
//! token) releases the bookings' pending-prefill tokens ([`Booking::prefill_done`]).
//!
//! After streaming began (design.md §5.5, failure rule rows `Stream*`), an SSE stream that
//! stalls past its idle timeout, hits its total cap or breaks ends with a
//! `data: {"error":…}` event and `data: [DONE]` (vLLM's own form of an error in a stream);
//! a non-SSE body is cut. An engine that writes an error object as a bare JSON line inside
//! its SSE stream (a line starting with `{`, not `data:`) gets the same treatment: the bytes
//! before that line pass, the line becomes a well-formed error event. Each case is counted in
//! `pdgate_stream_errors_total{kind}` and logged; stalls and breaks count against the
//! endpoint's breaker.

use crate::dispatch::leg_body::{LegBody, LegBodyError};
use crate::failure::{self, BreakerEffect, LegEvent};
use crate::owned_filter::{LineTooLong, OwnedFilter, MAX_SSE_LINE_BYTES};
use bytes::{Bytes, BytesMut};
use http_body::{Body, Frame, SizeHint};
use pdgate_api::{ErrorBody, SseForm};
use pdgate_scheduler::Booking;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

/// Error type of a non-SSE body that failed mid-way.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Where a stream failure is reported: metrics and the endpoint's breaker.
#[derive(Clone)]
pub struct StreamReport {
    /// The router's metrics.
    pub metrics: Arc<crate::metrics::Metrics>,
    /// The breakers.
    pub breakers: Arc<crate::breaker::Breakers>,
}

/// Upstream body plus the bookings it keeps alive.
pub struct ResponseBody {
    inner: LegBody,
    /// An SSE body, and its API's framing of the error event that ends a broken stream.
    sse: Option<SseForm>,
    endpoint: String,
    finished: bool,
    report: Option<StreamReport>,
    bookings: Vec<Booking>,
    /// A body chunk came from upstream: the engine is past the prefill (the bookings' pending
    /// prefill tokens were released).
    first_chunk_seen: bool,
    /// SSE: the next byte starts a line.
    line_start: bool,
    /// SSE: the bare JSON line being collected (from its `{`).
    bare_line: Option<BytesMut>,
    /// SSE: the bare line has its end (or is over the limit); only new bytes are searched,
    /// so a line sent a byte at a time costs linear time.
    bare_done: bool,
    /// Frames to send before anything else (the end of an error event).
    queued: Option<Bytes>,
    /// SSE to a client: removes the engines' router-owned fields.
    owned: Option<OwnedFilter>,
}

impl ResponseBody {
    /// Wraps `inner` from `endpoint`; `sse` (an event stream, in its API's framing) selects
    /// the mid-stream error form.
    pub fn new(
        inner: LegBody,
        sse: Option<SseForm>,
        endpoint: String,
        bookings: Vec<Booking>,
        report: Option<StreamReport>,
    ) -> Self {
        ResponseBody {
            inner,
            sse,
            endpoint,
            finished: false,
            report,
            bookings,
            first_chunk_seen: false,
            line_start: true,
            bare_line: None,
            bare_done: false,
            queued: None,
            owned: None,
        }
    }

    /// An SSE body whose `data:` lines lose the router-owned fields (`kv_transfer_params`,
    /// …) before they reach the client; no effect on a non-SSE body.
    pub fn without_owned_fields(mut self) -> Self {
        if self.sse.is_some() {
            self.owned = Some(OwnedFilter::default());
        }
        self
    }

    /// `pass` through the owned-field filter; at the end of the upstream body, with what
    /// the filter still held.
    ///
    /// Errors: the error event (then `[DONE]`) when the engine sent a line over
    /// [`MAX_SSE_LINE_BYTES`] without its end (counted as `oversized_line`).
    fn filtered(&mut self, pass: Bytes) -> Result<Bytes, Bytes> {
        let Some(f) = &mut self.owned else {
            return Ok(pass);
        };
        let out = match f.push(pass) {
            Ok(out) => out,
            Err(LineTooLong) => return Err(self.oversized_line()),
        };
        if !self.inner.is_end_stream() {
            return Ok(out);
        }
        let rest = f.finish();
        if rest.is_empty() {
            return Ok(out);
        }
        let mut both = BytesMut::from(&out[..]);
        both.extend_from_slice(&rest);
        Ok(both.freeze())
    }

    /// The error event for an SSE line over [`MAX_SSE_LINE_BYTES`].
    fn oversized_line(&mut self) -> Bytes {
        let msg = format!(
            "upstream {} sent an SSE line over {MAX_SSE_LINE_BYTES} bytes",
            self.endpoint
        );
        self.fail(
            LegEvent::StreamBroken,
            "oversized_line",
            error_object(502, msg),
        )
    }

    /// The upstream body ended cleanly: the request completed on its endpoints.
    fn complete(&mut self) {
        self.finished = true;
        for b in &mut self.bookings {
            b.complete();
        }
    }

    /// Counts and logs a stream failure of `kind`, records it on the breaker per the rule,
    /// and returns the SSE error event (then `[DONE]`) carrying `message`.
    fn fail(&mut self, event: LegEvent, kind: &'static str, error: serde_json::Value) -> Bytes {
        self.finished = true;
        if let Some(r) = &self.report {
            r.metrics.stream_errors.with_label_values(&[kind]).inc();
            if failure::rule(event).breaker == BreakerEffect::Failure {
                r.breakers.record(
                    &self.endpoint,
                    crate::breaker::Outcome::Failure,
                    tokio::time::Instant::now(),
                );
            }
        }
        if crate::log_limit::allow(&crate::log_limit::STREAM_ERRORS) {
            tracing::warn!(endpoint = %self.endpoint, kind, "stream ended by an error event");
        }
        let form = self.sse.unwrap_or(SseForm::DataDone);
        Bytes::from(pdgate_api::error::sse_error_event(form, &error))
    }

    /// Scans SSE bytes for a line that starts with `{`; returns the bytes to pass on now.
    /// From such a line on, bytes are held in `bare_line` until its end.
    fn scan(&mut self, data: Bytes) -> Bytes {
        if let Some(line) = &mut self.bare_line {
            line.extend_from_slice(&data);
            self.bare_done = data.contains(&b'\n') || line.len() > MAX_SSE_LINE_BYTES;
            return Bytes::new();
        }
        let mut start = self.line_start;
        for (i, &b) in data.iter().enumerate() {
            if start && b == b'{' {
                self.bare_done = data[i..].contains(&b'\n') || data.len() - i > MAX_SSE_LINE_BYTES;
                self.bare_line = Some(BytesMut::from(&data[i..]));
                return data.slice(..i);
            }
            start = b == b'\n';
        }
        self.line_start = start;
        data
    }

    /// The error event for a collected bare JSON line: the engine's error object
    /// (`{"error":{…}}` or vLLM's `{"object":"error","message",…}`), else a 502 naming the
    /// endpoint.
    fn bare_line_event(&mut self) -> Bytes {
        let line = self.bare_line.take().unwrap_or_default();
        self.bare_done = false;
        let end = line.iter().position(|&b| b == b'\n').unwrap_or(line.len());
        let parsed: Option<serde_json::Value> = serde_json::from_slice(&line[..end]).ok();
        let error = match parsed {
            Some(mut v) if v.get("error").is_some_and(|e| e.is_object()) => v["error"].take(),
            Some(v) if v.get("object").and_then(|o| o.as_str()) == Some("error") => {
                let mut e = serde_json::Map::new();
                for k in ["message", "type", "param", "code"] {
                    e.insert(
                        k.into(),
                        v.get(k).cloned().unwrap_or(serde_json::Value::Null),
                    );
                }
                serde_json::Value::Object(e)
            }
            _ => {
                let text = String::from_utf8_lossy(&line[..end.min(200)]).into_owned();
                error_object(
                    502,
                    format!(
                        "upstream {} sent a line that is not an SSE event: {text}",
                        self.endpoint
                    ),
                )
            }
        };
        self.fail(LegEvent::StreamErrorLine, "engine_error", error)
    }
}

/// The inner `error` object of `ErrorBody::new(status, message)`.
fn error_object(status: u16, message: String) -> serde_json::Value {
    serde_json::to_value(ErrorBody::new(status, message).error).unwrap_or_default()
}

impl Body for ResponseBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if let Some(q) = self.queued.take() {
            return Poll::Ready(Some(Ok(Frame::data(q))));
        }
        if self.finished {
            return Poll::Ready(None);
        }
        loop {
            let polled = Pin::new(&mut self.inner).poll_frame(cx);
            return match polled {
                Poll::Ready(Some(Err(e))) => {
                    let (event, kind) = match &e {
                        LegBodyError::Idle(_) => (LegEvent::StreamIdle, "idle"),
                        LegBodyError::Deadline => (LegEvent::StreamDeadline, "deadline"),
                        LegBodyError::Broken(_) => (LegEvent::StreamBroken, "broken"),
                    };
                    if self.sse.is_some() && self.bare_line.is_none() {
                        let msg = format!("upstream {} failed mid-stream: {e}", self.endpoint);
                        // The code the failure rule gives this failure before streaming
                        // (a timeout 504, a break 502), carried in the event.
                        let status = crate::failure::client_status(e.failure_kind());
                        let ev = self.fail(event, kind, error_object(status, msg));
                        Poll::Ready(Some(Ok(Frame::data(ev))))
                    } else if self.sse.is_some() {
                        let ev = self.bare_line_event();
                        Poll::Ready(Some(Ok(Frame::data(ev))))
                    } else {
                        self.fail(event, kind, serde_json::Value::Null);
                        Poll::Ready(Some(Err(Box::new(e))))
                    }
                }
                Poll::Ready(None) => {
                    if self.bare_line.is_some() {
                        let ev = self.bare_line_event();
                        return Poll::Ready(Some(Ok(Frame::data(ev))));
                    }
                    let rest = self.owned.as_mut().map(OwnedFilter::finish);
                    self.complete();
                    if let Some(rest) = rest.filter(|r| !r.is_empty()) {
                        return Poll::Ready(Some(Ok(Frame::data(rest))));
                    }
                    Poll::Ready(None)
                }
                Poll::Ready(Some(Ok(frame))) => {
                    if !self.first_chunk_seen {
                        self.first_chunk_seen = true;
                        self.bookings.iter_mut().for_each(Booking::prefill_done);
                    }
                    let frame = match frame.into_data() {
                        Ok(data) if self.sse.is_some() => {
                            let pass = self.scan(data);
                            let pass = match self.filtered(pass) {
                                Ok(pass) => pass,
                                Err(ev) => return Poll::Ready(Some(Ok(Frame::data(ev)))),
                            };
                            // A bare line ends at its line end, or is cut at the limit.
                            if self.bare_line.is_some() && self.bare_done {
                                let ev = self.bare_line_event();
                                if pass.is_empty() {
                                    return Poll::Ready(Some(Ok(Frame::data(ev))));
                                }
                                self.queued = Some(ev);
                            }
                            if pass.is_empty() {
                                continue;
                            }
                            Frame::data(pass)
                        }
                        Ok(data) => Frame::data(data),
                        Err(other) => other,
                    };
                    // hyper may stop polling once the body reports its end (Content-Length).
                    if self.inner.is_end_stream() && self.bare_line.is_none() {
                        self.complete();
                    }
                    Poll::Ready(Some(Ok(frame)))
                }
                Poll::Pending => Poll::Pending,
            };
        }
    }

    fn is_end_stream(&self) -> bool {
        self.queued.is_none()
            && (self.finished || self.inner.is_end_stream() && self.bare_line.is_none())
    }

    fn size_hint(&self) -> SizeHint {
        if self.sse.is_some() {
            SizeHint::default()
        } else {
            self.inner.size_hint()
        }
    }
}
