//! In-flight eviction, served (`flowControl.enableEviction: true`; the rule is
//! [`pdgate_scheduler::flow::eviction`]): every request flow control dispatches gets an
//! [`InFlight`] ticket that lives as long as its answer (moved into the response body), and
//! the dispatcher may evict a sheddable one to unblock a higher band.
//!
//! An evicted request ends at once, whatever it was doing: before its answer began the
//! client gets **429** `x-llm-d-request-dropped-reason: evicted` (llm-d's ImmediateResponse);
//! once streaming, an SSE error event and `[DONE]` (a non-SSE body is cut). Either way the
//! upstream leg is dropped, so hyper closes its connection and the engine aborts the
//! request and frees its KV blocks; the ticket's drop confirms the revocation.

use crate::flow_metrics::FlowMetrics;
use futures_util::task::AtomicWaker;
use http_body::{Body, Frame, SizeHint};
use parking_lot::Mutex;
use pdgate_scheduler::flow::eviction::{Eviction, RevocationOutcome};
use std::collections::HashMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::time::Instant;

/// The eviction signal of one request: set once, wakes whoever waits on it.
#[derive(Default)]
pub struct Signal {
    evicted: AtomicBool,
    waker: AtomicWaker,
}

impl Signal {
    fn evict(&self) {
        self.evicted.store(true, Ordering::Release);
        self.waker.wake();
    }

    /// True once the request was evicted.
    pub fn is_evicted(&self) -> bool {
        self.evicted.load(Ordering::Acquire)
    }

    /// Ready once evicted (registers `cx`'s waker first, so no signal is missed).
    fn poll_evicted(&self, cx: &mut Context<'_>) -> Poll<()> {
        self.waker.register(cx.waker());
        match self.is_evicted() {
            true => Poll::Ready(()),
            false => Poll::Pending,
        }
    }
}

struct State {
    rule: Eviction,
    signals: HashMap<u64, (Arc<Signal>, Instant)>,
    next_id: u64,
}

/// The tracked requests and the revocations (one per flow controller).
pub struct Evictions {
    state: Mutex<State>,
    metrics: FlowMetrics,
}

impl Evictions {
    /// Empty, counting in `metrics`.
    pub fn new(metrics: FlowMetrics) -> Arc<Evictions> {
        Arc::new(Evictions {
            state: Mutex::new(State {
                rule: Eviction::default(),
                signals: HashMap::new(),
                next_id: 1,
            }),
            metrics,
        })
    }

    /// The clock of the gauges' scrape times ([`pdgate_scheduler::monotonic_ms`]).
    fn now_ms(&self) -> u64 {
        pdgate_scheduler::monotonic_ms()
    }

    /// Tracks a request of `priority` just dispatched.
    pub fn track(self: &Arc<Self>, priority: i32) -> InFlight {
        let signal = Arc::new(Signal::default());
        let mut s = self.state.lock();
        let id = s.next_id;
        s.next_id += 1;
        s.rule.track(id, priority);
        s.signals.insert(id, (signal.clone(), Instant::now()));
        InFlight {
            owner: self.clone(),
            id,
            signal,
        }
    }

    fn untrack(&self, id: u64) {
        let now = self.now_ms();
        let mut s = self.state.lock();
        let evicted_at = s.signals.remove(&id).map(|(_, at)| at);
        if s.rule.untrack(id, now).is_some() {
            let m = &self.metrics;
            m.revocations
                .with_label_values(&[RevocationOutcome::Confirmed.as_str()])
                .inc();
            if let Some(at) = evicted_at {
                m.confirmation.observe(at.elapsed().as_secs_f64());
            }
            m.pending_reclaim.set(s.rule.pending_reclaim());
        }
    }

    /// Retires timed-out revocations and expired debits (gauges current up to `gauges_ms`)
    /// and refreshes the gauge; the dispatcher calls it while idle too.
    pub fn sweep(&self, gauges_ms: u64) {
        let mut s = self.state.lock();
        self.sweep_locked(&mut s, gauges_ms);
    }

    fn sweep_locked(&self, s: &mut State, gauges_ms: u64) {
        let (_, timed_out) = s.rule.gate_open(self.now_ms(), gauges_ms);
        if timed_out > 0 {
            self.metrics
                .revocations
                .with_label_values(&[RevocationOutcome::TimedOut.as_str()])
                .inc_by(timed_out as u64);
            tracing::warn!(timed_out, "evicted requests did not end in time");
        }
        self.metrics.pending_reclaim.set(s.rule.pending_reclaim());
    }

    /// One reclamation decision (called by the dispatcher when its highest queued band, of
    /// `demand_priority`, is blocked at `saturation` over `ceiling`, with the detector's
    /// gauges current up to `gauges_ms`): evicts the chosen requests and counts them.
    pub fn reclaim(&self, saturation: f64, ceiling: f64, demand_priority: i32, gauges_ms: u64) {
        let now = self.now_ms();
        let mut s = self.state.lock();
        self.sweep_locked(&mut s, gauges_ms);
        let Some(d) = s
            .rule
            .decide(now, gauges_ms, saturation, ceiling, demand_priority)
        else {
            return;
        };
        for id in &d.victims {
            if let Some((signal, at)) = s.signals.get_mut(id) {
                *at = Instant::now();
                signal.evict();
            }
        }
        let m = &self.metrics;
        m.revocations_issued
            .with_label_values(&[&demand_priority.to_string()])
            .inc_by(d.victims.len() as u64);
        m.reclaim_target.set(d.reclaim_target);
        m.pending_reclaim.set(s.rule.pending_reclaim());
        tracing::info!(
            evicted = d.victims.len(),
            demand_priority,
            saturation,
            ceiling,
            "flow control evicted in-flight sheddable requests"
        );
    }

    /// Tracked requests now (tests).
    pub fn in_flight(&self) -> usize {
        self.state.lock().rule.in_flight()
    }
}

/// One dispatched request's place in eviction; dropping it (the answer ended, failed or its
/// client left) ends the tracking and confirms an eviction.
pub struct InFlight {
    owner: Arc<Evictions>,
    id: u64,
    signal: Arc<Signal>,
}

impl InFlight {
    /// The request's signal.
    pub fn signal(&self) -> Arc<Signal> {
        self.signal.clone()
    }

    /// Resolves when the request is evicted.
    pub fn evicted(&self) -> impl std::future::Future<Output = ()> + '_ {
        std::future::poll_fn(|cx| self.signal.poll_evicted(cx))
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.owner.untrack(self.id);
    }
}

/// A response body that ends when its request is evicted: an SSE body with an error event
/// (`code` 429, the 429 body's message) and `[DONE]`, another with an error. Holds the
/// [`InFlight`] ticket, so the tracking lasts exactly as long as the answer.
pub struct EvictableBody<B> {
    inner: Option<B>,
    ticket: InFlight,
    sse: Option<pdgate_api::SseForm>,
}

impl<B> EvictableBody<B> {
    /// `inner`, cut short on eviction; `sse` (an event stream, in its API's framing) selects
    /// the error-event form.
    pub fn new(inner: B, ticket: InFlight, sse: Option<pdgate_api::SseForm>) -> Self {
        EvictableBody {
            inner: Some(inner),
            ticket,
            sse,
        }
    }
}

/// The SSE error event an evicted stream ends with: the same error object a client gets
/// as a 429 body when evicted before its answer began.
fn evicted_event(form: pdgate_api::SseForm) -> bytes::Bytes {
    let e =
        crate::errors::ApiError::dropped(pdgate_scheduler::flow::Outcome::EvictedInFlight, false);
    let body = pdgate_api::ErrorBody::new(e.status().as_u16(), e.to_string());
    let error = serde_json::to_value(&body.error).unwrap_or_default();
    bytes::Bytes::from(pdgate_api::error::sse_error_event(form, &error))
}

impl<B> Body for EvictableBody<B>
where
    B: Body<Data = bytes::Bytes> + Unpin,
    B::Error: Into<crate::BoxError>,
{
    type Data = bytes::Bytes;
    type Error = crate::BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<bytes::Bytes>, Self::Error>>> {
        let this = &mut *self;
        let Some(inner) = this.inner.as_mut() else {
            return Poll::Ready(None);
        };
        if this.ticket.signal.poll_evicted(cx).is_ready() {
            // Dropping the upstream body closes the engine's connection: it aborts.
            this.inner = None;
            return Poll::Ready(Some(match this.sse {
                Some(form) => Ok(Frame::data(evicted_event(form))),
                None => Err("request evicted by flow control".into()),
            }));
        }
        match Pin::new(inner).poll_frame(cx) {
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(e.into()))),
            Poll::Ready(Some(Ok(f))) => Poll::Ready(Some(Ok(f))),
            Poll::Ready(None) => {
                this.inner = None;
                Poll::Ready(None)
            }
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.as_ref().is_none_or(|b| b.is_end_stream())
    }

    fn size_hint(&self) -> SizeHint {
        // An eviction may replace the rest with an event of another length.
        match &self.inner {
            Some(b) if self.sse.is_none() => b.size_hint(),
            _ => SizeHint::default(),
        }
    }
}
