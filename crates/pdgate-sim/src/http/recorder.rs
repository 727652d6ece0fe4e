//! The response recorder (`--record-responses N`, pdgate-sim extension): the exact bytes of
//! the last `N` response bodies sent on the engine API paths (`POST` on a path of
//! [`ApiKind::ALL`], streamed or not, errors included), keyed by the request's
//! `x-request-id` (requests without one are not recorded), for byte-for-byte tests of what a
//! client received through the router.
//!
//! - `GET /debug/responses/{request_id}`: the recorded body, with the original
//!   `content-type`, `x-sim-recorded-status` (the status it was sent with) and
//!   `x-sim-recorded-truncated: true` when the body passed [`MAX_RECORDED_BYTES`] (only its
//!   first bytes are kept). 404 when unknown, or while the body is still being sent (a
//!   stream is recorded when it ends, cut or not).
//! - Memory is bounded: at most `N` bodies of at most [`MAX_RECORDED_BYTES`] each, the least
//!   recently recorded dropped first. Off (`N` = 0, the default) the middleware is not even
//!   installed.

use super::{error, Worker};
use axum::body::{Body, BodyDataStream};
use axum::extract::{Path, Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures_util::Stream;
use http::{header, HeaderValue, Method};
use pdgate_api::headers::REQUEST_ID;
use pdgate_api::ApiKind;
use std::num::NonZeroUsize;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

/// Most bytes kept of one body (1 MiB).
pub const MAX_RECORDED_BYTES: usize = 1 << 20;
/// Header of a recorded body: the status it was sent with.
pub const RECORDED_STATUS_HEADER: &str = "x-sim-recorded-status";
/// Header of a recorded body cut at [`MAX_RECORDED_BYTES`]: `true`.
pub const RECORDED_TRUNCATED_HEADER: &str = "x-sim-recorded-truncated";

/// One recorded body.
#[derive(Debug, Clone)]
struct Recorded {
    status: u16,
    content_type: Option<HeaderValue>,
    body: Bytes,
    truncated: bool,
}

/// The last `N` recorded bodies by request id.
pub struct Recorder {
    entries: parking_lot::Mutex<lru::LruCache<String, Recorded>>,
}

impl Recorder {
    /// A recorder of the last `n` bodies; `None` when `n` is 0 (off).
    pub fn new(n: usize) -> Option<Self> {
        NonZeroUsize::new(n).map(|n| Recorder {
            entries: parking_lot::Mutex::new(lru::LruCache::new(n)),
        })
    }

    fn put(&self, id: String, r: Recorded) {
        self.entries.lock().put(id, r);
    }

    fn get(&self, id: &str) -> Option<Recorded> {
        self.entries.lock().peek(id).cloned()
    }
}

/// The bytes of a body being recorded (kept up to [`MAX_RECORDED_BYTES`]).
struct Capture {
    w: Arc<Worker>,
    id: Option<String>,
    status: u16,
    content_type: Option<HeaderValue>,
    buf: Vec<u8>,
    truncated: bool,
}

impl Capture {
    fn push(&mut self, chunk: &[u8]) {
        let room = MAX_RECORDED_BYTES.saturating_sub(self.buf.len());
        self.truncated |= chunk.len() > room;
        self.buf.extend_from_slice(&chunk[..chunk.len().min(room)]);
    }

    /// Stores the body, once.
    fn commit(&mut self) {
        let (Some(id), Some(rec)) = (self.id.take(), self.w.recorder.as_ref()) else {
            return;
        };
        rec.put(
            id,
            Recorded {
                status: self.status,
                content_type: self.content_type.take(),
                body: Bytes::from(std::mem::take(&mut self.buf)),
                truncated: self.truncated,
            },
        );
    }
}

/// A streamed body passed through, recorded when it ends or is dropped.
struct Tee {
    inner: BodyDataStream,
    capture: Capture,
}

impl Stream for Tee {
    type Item = Result<Bytes, axum::Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let polled = Pin::new(&mut self.inner).poll_next(cx);
        match &polled {
            Poll::Ready(Some(Ok(b))) => self.capture.push(b),
            Poll::Ready(_) => self.capture.commit(),
            Poll::Pending => {}
        }
        polled
    }
}

impl Drop for Tee {
    fn drop(&mut self) {
        self.capture.commit();
    }
}

/// Middleware (installed only when recording): records the body of an engine API answer.
pub(super) async fn record(State(w): State<Arc<Worker>>, req: Request, next: Next) -> Response {
    let id = req
        .headers()
        .get(REQUEST_ID)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let api = req.method() == Method::POST && ApiKind::from_path(req.uri().path()).is_some();
    let resp = next.run(req).await;
    let Some(id) = id.filter(|_| api) else {
        return resp;
    };
    let (parts, body) = resp.into_parts();
    let content_type = parts.headers.get(header::CONTENT_TYPE).cloned();
    let streamed = content_type
        .as_ref()
        .is_some_and(|c| c.as_bytes().starts_with(b"text/event-stream"));
    let mut capture = Capture {
        w,
        id: Some(id),
        status: parts.status.as_u16(),
        content_type,
        buf: Vec::new(),
        truncated: false,
    };
    if streamed {
        let tee = Tee {
            inner: body.into_data_stream(),
            capture,
        };
        return Response::from_parts(parts, Body::from_stream(tee));
    }
    // A whole body is already in memory: kept as is, so its framing (content-length) too.
    match axum::body::to_bytes(body, usize::MAX).await {
        Ok(bytes) => {
            capture.push(&bytes);
            capture.commit();
            Response::from_parts(parts, Body::from(bytes))
        }
        Err(e) => error(500, format!("the response body failed: {e}")),
    }
}

/// `GET /debug/responses/{request_id}`: a recorded body (see the module docs).
pub(super) async fn recorded(State(w): State<Arc<Worker>>, Path(id): Path<String>) -> Response {
    let Some(r) = w.recorder.as_ref().and_then(|rec| rec.get(&id)) else {
        return error(404, format!("no recorded response for request id `{id}`"));
    };
    let mut resp = r.body.into_response();
    let h = resp.headers_mut();
    match r.content_type {
        Some(c) => h.insert(header::CONTENT_TYPE, c),
        None => h.remove(header::CONTENT_TYPE),
    };
    h.insert(RECORDED_STATUS_HEADER, HeaderValue::from(r.status));
    if r.truncated {
        h.insert(RECORDED_TRUNCATED_HEADER, HeaderValue::from_static("true"));
    }
    resp
}
