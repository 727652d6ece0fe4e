//! [`Booking`]: the RAII guard of one phase's pick.
//!
//! A booking holds the endpoint's in-flight count (+1 at pick time, −1 on drop) and, when
//! the config has `RequestAbandoned` plugins, fires them on drop unless the phase was marked
//! [`Booking::complete`]. Tie it to the response body: end of stream completes it; client
//! disconnect, upstream error and non-2xx answers drop it uncompleted.

use crate::endpoint::{EndpointState, InFlightGuard};
use crate::plugin::{AbandonedCtx, RequestAbandoned};
use crate::request::RequestState;
use std::fmt;
use std::sync::Arc;

/// The booking of one pick (see the module docs).
pub struct Booking {
    _in_flight: InFlightGuard,
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
            endpoint: endpoint.clone(),
            state,
            abandon,
            completed: false,
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
