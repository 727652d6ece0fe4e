//! [`LegBody`]: the body of one upstream leg — streamed with its idle and total bounds armed,
//! or already read whole (non-streamed legs, read within their deadline before the client
//! sees anything, so a failure there can still be a status).

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::time::{Instant, Sleep};

/// Why a streamed leg body ended early.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LegBodyError {
    /// Nothing arrived for longer than the idle timeout (`--stream-idle-timeout-secs`).
    #[error("sent nothing for {0} ms")]
    Idle(u64),
    /// The leg's total cap passed (`--stream-total-timeout-secs`).
    #[error("did not finish within the stream's total cap")]
    Deadline,
    /// The connection failed mid-body.
    #[error("{0}")]
    Broken(String),
}

impl LegBodyError {
    /// The failure kind this is in the failure rule (`failure::rule`): a stall is
    /// `BodyTimeout`, the total cap `Deadline` (both timeouts, 504), a break `BodyBroken` (502).
    pub fn failure_kind(&self) -> pdgate_coordinator::FailureKind {
        use pdgate_coordinator::FailureKind as K;
        match self {
            LegBodyError::Idle(_) => K::BodyTimeout,
            LegBodyError::Deadline => K::Deadline,
            LegBodyError::Broken(_) => K::BodyBroken,
        }
    }
}

/// `now + d`, saturating far in the future instead of overflowing.
pub fn later(d: Duration) -> Instant {
    after(Instant::now(), d)
}

/// `from + d`, saturating one year after `from` instead of overflowing.
pub fn after(from: Instant, d: Duration) -> Instant {
    from.checked_add(d)
        .unwrap_or_else(|| from + Duration::from_secs(crate::dispatch::timeouts::MAX_TIMEOUT_SECS))
}

/// The body of one leg (see the module docs).
pub struct LegBody {
    inner: Inner,
}

enum Inner {
    Streamed {
        body: Incoming,
        idle: Duration,
        idle_timer: Pin<Box<Sleep>>,
        deadline: Option<Pin<Box<Sleep>>>,
    },
    Full(Option<Bytes>),
}

impl LegBody {
    /// A streamed body: a gap of more than `idle` between frames, or reaching `deadline`,
    /// ends it with an error.
    pub fn streamed(body: Incoming, idle: Duration, deadline: Option<Instant>) -> Self {
        LegBody {
            inner: Inner::Streamed {
                body,
                idle,
                idle_timer: Box::pin(tokio::time::sleep_until(later(idle))),
                deadline: deadline.map(|d| Box::pin(tokio::time::sleep_until(d))),
            },
        }
    }

    /// A body already read whole.
    pub fn full(bytes: Bytes) -> Self {
        LegBody {
            inner: Inner::Full(Some(bytes)),
        }
    }

    /// The whole body when it was read whole (`None` for a streamed one).
    pub fn into_full(self) -> Option<Bytes> {
        match self.inner {
            Inner::Full(b) => Some(b.unwrap_or_default()),
            Inner::Streamed { .. } => None,
        }
    }

    /// True for a streamed body.
    pub fn is_streamed(&self) -> bool {
        matches!(self.inner, Inner::Streamed { .. })
    }
}

impl Body for LegBody {
    type Data = Bytes;
    type Error = LegBodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, LegBodyError>>> {
        match &mut self.get_mut().inner {
            Inner::Full(b) => Poll::Ready(b.take().map(|b| Ok(Frame::data(b)))),
            Inner::Streamed {
                body,
                idle,
                idle_timer,
                deadline,
            } => match Pin::new(body).poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => {
                    idle_timer.as_mut().reset(later(*idle));
                    Poll::Ready(Some(Ok(frame)))
                }
                Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(LegBodyError::Broken(
                    pdgate_fleet::scrape::client::error_chain(&e),
                )))),
                Poll::Ready(None) => Poll::Ready(None),
                Poll::Pending => {
                    if deadline
                        .as_mut()
                        .is_some_and(|d| d.as_mut().poll(cx).is_ready())
                    {
                        return Poll::Ready(Some(Err(LegBodyError::Deadline)));
                    }
                    if idle_timer.as_mut().poll(cx).is_ready() {
                        let ms = u64::try_from(idle.as_millis()).unwrap_or(u64::MAX);
                        return Poll::Ready(Some(Err(LegBodyError::Idle(ms))));
                    }
                    Poll::Pending
                }
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.inner {
            Inner::Full(b) => b.is_none(),
            Inner::Streamed { body, .. } => body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.inner {
            Inner::Full(Some(b)) => SizeHint::with_exact(b.len() as u64),
            Inner::Full(None) => SizeHint::with_exact(0),
            Inner::Streamed { body, .. } => body.size_hint(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_far_deadline_saturates_instead_of_overflowing() {
        // Regression: `now + u64::MAX s` panicked in the stream path.
        let far = later(Duration::from_secs(u64::MAX));
        assert!(far > Instant::now() + Duration::from_secs(364 * 24 * 3600));
        assert!(later(Duration::from_secs(1)) <= Instant::now() + Duration::from_secs(1));
    }
}
