//! Client requests being answered, counted from their arrival until their response body ends
//! or is dropped (a guard tied to the body, so end of stream, error and disconnect release
//! alike). Draining on SIGTERM waits for this count: it covers every mode, including a
//! coordinator whose legs go to routers and book nothing on this process's endpoints.

use axum::body::Body;
use axum::response::Response;
use bytes::Bytes;
use http_body::{Frame, SizeHint};
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

/// The count, shared by every server thread.
#[derive(Debug, Default, Clone)]
pub struct ActiveRequests(Arc<AtomicU32>);

/// One counted request; dropping it releases the count.
#[derive(Debug)]
pub struct ActiveGuard(Arc<AtomicU32>);

impl ActiveRequests {
    /// Counts a request until the guard is dropped.
    pub fn enter(&self) -> ActiveGuard {
        self.0.fetch_add(1, Ordering::Relaxed);
        ActiveGuard(self.0.clone())
    }

    /// Requests counted now.
    pub fn count(&self) -> u32 {
        self.0.load(Ordering::Relaxed)
    }
}

impl Drop for ActiveGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// `resp` with `guard` held until its body ends or is dropped.
pub fn hold_until_body_ends(resp: Response, guard: ActiveGuard) -> Response {
    resp.map(|inner| {
        Body::new(Guarded {
            inner,
            guard: Some(guard),
        })
    })
}

struct Guarded {
    inner: Body,
    guard: Option<ActiveGuard>,
}

impl http_body::Body for Guarded {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if let Poll::Ready(None) = polled {
            self.guard = None;
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    #[tokio::test]
    async fn the_count_lasts_until_the_body_ends_or_is_dropped() {
        let active = ActiveRequests::default();
        let resp = hold_until_body_ends(Response::new(Body::from("hi")), active.enter());
        assert_eq!(active.count(), 1);
        let bytes = resp.into_body().collect().await.unwrap().to_bytes();
        assert_eq!((&bytes[..], active.count()), (&b"hi"[..], 0));
        let resp = hold_until_body_ends(Response::new(Body::from("x")), active.enter());
        assert_eq!(active.count(), 1);
        drop(resp);
        assert_eq!(active.count(), 0);
    }
}
