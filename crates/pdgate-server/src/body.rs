//! The client response body: the last leg's upstream body passed through byte for byte, with
//! the request's bookings tied to its lifetime.
//!
//! Dropping the body (end of stream, error, or client disconnect — hyper drops it when the
//! connection goes) drops the [`Booking`]s it holds, so in-flight counts fall in every
//! case; the bookings are marked complete only when the upstream body ended cleanly, so an
//! abandoned stream fires the scheduler's `RequestAbandoned` hooks. A transport failure after streaming began ends an SSE stream with a
//! `data: {"error":…}` event (design.md §5.5) and is counted; a non-SSE body is aborted.

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use pdgate_api::ErrorBody;
use pdgate_scheduler::Booking;
use std::pin::Pin;
use std::task::{Context, Poll};

/// Error type of a non-SSE body that failed mid-way.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Upstream body plus the bookings it keeps alive.
pub struct GuardedBody {
    inner: Incoming,
    sse: bool,
    endpoint: String,
    finished: bool,
    on_stream_error: Option<prometheus::IntCounter>,
    bookings: Vec<Booking>,
}

impl GuardedBody {
    /// Wraps `inner` from `endpoint`; `sse` selects the mid-stream error form.
    pub fn new(
        inner: Incoming,
        sse: bool,
        endpoint: String,
        bookings: Vec<Booking>,
        on_stream_error: Option<prometheus::IntCounter>,
    ) -> Self {
        GuardedBody {
            inner,
            sse,
            endpoint,
            finished: false,
            on_stream_error,
            bookings,
        }
    }

    /// The upstream body ended cleanly: the request completed on its endpoints.
    fn complete(&mut self) {
        self.finished = true;
        for b in &mut self.bookings {
            b.complete();
        }
    }
}

impl Body for GuardedBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if self.finished {
            return Poll::Ready(None);
        }
        match Pin::new(&mut self.inner).poll_frame(cx) {
            Poll::Ready(Some(Err(e))) => {
                self.finished = true;
                if let Some(c) = &self.on_stream_error {
                    c.inc();
                }
                if self.sse {
                    let msg = format!("upstream {} failed mid-stream: {e}", self.endpoint);
                    let mut event = b"data: ".to_vec();
                    event.extend_from_slice(&ErrorBody::new(502, msg).to_bytes());
                    event.extend_from_slice(b"\n\n");
                    Poll::Ready(Some(Ok(Frame::data(Bytes::from(event)))))
                } else {
                    Poll::Ready(Some(Err(Box::new(e))))
                }
            }
            Poll::Ready(None) => {
                self.complete();
                Poll::Ready(None)
            }
            Poll::Ready(Some(Ok(frame))) => {
                // hyper may stop polling once the body reports its end (Content-Length).
                if self.inner.is_end_stream() {
                    self.complete();
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.finished || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        if self.sse {
            SizeHint::default()
        } else {
            self.inner.size_hint()
        }
    }
}
