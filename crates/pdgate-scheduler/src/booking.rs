//! [`Booking`]: the RAII guard of one phase's pick.
//!
//! A booking holds the endpoint's in-flight count (+1 at pick time, −1 on drop), the
//! request's prompt tokens on it (a [`TokenGuard`]: still to prefill until
//! [`Booking::prefill_done`], active until drop; booked by the scheduler) and, when
//! the config has `RequestAbandoned` plugins, fires them on drop unless the phase was marked
//! [`Booking::complete`]. Tie it to the response body: end of stream completes it; client
//! disconnect, upstream error and non-2xx answers drop it uncompleted.

use crate::endpoint::{EndpointState, InFlightGuard, TokenGuard};
use crate::request_state::RequestState;
use std::fmt;
use std::sync::Arc;

/// What an abandonment hook sees.
pub struct AbandonedCtx<'a> {
    /// The endpoint the request was booked on.
    pub endpoint: &'a EndpointState,
    /// Per-request state kept from scheduling.
    pub state: &'a RequestState,
}

/// Called when a request booked on an endpoint ends without completing (client disconnect,
/// upstream error or non-2xx, dropped before its response ended), so that plugins undo their
/// own bookkeeping. Fired by the [`Booking`] guard, once per booked phase. An extension point
/// like those of [`crate::plugin`] (which re-exports it), defined here, where it fires.
pub trait RequestAbandoned: Send + Sync {
    /// Undoes what the plugin recorded for this request on `ctx.endpoint`.
    fn request_abandoned(&self, ctx: &AbandonedCtx<'_>);
}

/// The booking of one pick (see the module docs).
pub struct Booking {
    _in_flight: InFlightGuard,
    tokens: Option<TokenGuard>,
    endpoint: Arc<EndpointState>,
    state: Arc<RequestState>,
    /// Hooks to fire on an uncompleted drop; empty when completed or none configured.
    abandon: Arc<[Arc<dyn RequestAbandoned>]>,
    completed: bool,
}

impl Booking {
    /// Books one request on `endpoint` for the request whose state is `state`.
    pub(crate) fn new(
        endpoint: &Arc<EndpointState>,
        state: Arc<RequestState>,
        abandon: Arc<[Arc<dyn RequestAbandoned>]>,
    ) -> Self {
        Booking {
            _in_flight: InFlightGuard::book(&endpoint.load),
            tokens: None,
            endpoint: endpoint.clone(),
            state,
            abandon,
            completed: false,
        }
    }

    /// Books the request's tokens on the endpoint (replacing an earlier token booking):
    /// `prefill` prompt tokens still to prefill there, `active` tokens it holds there.
    pub(crate) fn book_tokens(&mut self, prefill: usize, active: usize) {
        self.tokens = None;
        let load = &self.endpoint.load;
        self.tokens = Some(TokenGuard::book(load, prefill as u64, active as u64));
    }

    /// The phase's first token came (the engine is past its prefill): releases the
    /// pending-prefill part of the token booking now. Idempotent; the rest is released on drop.
    pub fn prefill_done(&mut self) {
        if let Some(t) = &mut self.tokens {
            t.prefill_done();
        }
    }

    /// Marks the phase as completed (its 2xx response ended): dropping the booking then only
    /// releases the in-flight count.
    pub fn complete(&mut self) {
        self.completed = true;
    }

    /// True once [`Self::complete`] was called.
    pub fn is_completed(&self) -> bool {
        self.completed
    }

    /// The per-request state kept from scheduling.
    pub fn state(&self) -> &RequestState {
        &self.state
    }
}

impl fmt::Debug for Booking {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Booking")
            .field("endpoint", &self.endpoint.endpoint.name)
            .field("completed", &self.completed)
            .finish()
    }
}

impl Drop for Booking {
    fn drop(&mut self) {
        if self.completed {
            return;
        }
        let ctx = AbandonedCtx {
            endpoint: &self.endpoint,
            state: &self.state,
        };
        for hook in self.abandon.iter() {
            hook.request_abandoned(&ctx);
        }
    }
}
