//! [`RouterDispatch`]: the [`Dispatcher`] of a coordinator in front of per-role routers
//! (design.md §2, "one router per role"). Each leg names its phase in `x-llm-d-epp-profile`;
//! the routers schedule, retry and map their own failures, so their statuses pass through
//! as they are; the endpoint each router names in its served-by headers goes into the
//! request's [`RequestContext`].

use crate::dispatch::ctx::RequestContext;
use crate::dispatch::leg_body::LegBody;
use crate::dispatch::leg_send;
use crate::dispatch::phase_routers::PhaseRouters;
use crate::failure::{self, LegEvent};
use crate::state::AppState;
use bytes::Bytes;
use http::HeaderValue;
use pdgate_api::{headers, InferenceRequest, Phase};
use pdgate_coordinator::{DispatchError, Dispatcher, PhaseRequest, PhaseResponse, Target};

/// Wait before resending a leg a per-role router refused with 503: per-role routers apply
/// endpoint changes independently (each polls the source), so for a moment after a change one
/// may refuse a revision the other already chose.
pub const ROUTER_RESYNC_WAIT: std::time::Duration = std::time::Duration::from_millis(150);

/// The per-role-router [`Dispatcher`] of one request.
pub struct RouterDispatch<'a> {
    state: &'a AppState,
    routers: Option<&'a PhaseRouters>,
    ctx: &'a RequestContext,
    req: &'a InferenceRequest,
}

impl<'a> RouterDispatch<'a> {
    /// A dispatcher for `req` recording into `ctx`, resolving each leg's router from the
    /// state's [`PhaseRouters`] by its phase.
    pub fn new(state: &'a AppState, ctx: &'a RequestContext, req: &'a InferenceRequest) -> Self {
        let routers = state.routers.as_ref();
        RouterDispatch {
            state,
            routers,
            ctx,
            req,
        }
    }
}

/// The router of a leg's phase; `None` for an encode leg without an encode router.
fn router_of(routers: &PhaseRouters, phase: Phase) -> Option<&Target> {
    match phase {
        Phase::Prefill => Some(&routers.prefill),
        Phase::Decode | Phase::Aggregated => Some(&routers.decode),
        Phase::Encode => routers.encode.as_ref(),
    }
}

/// The profile header value of a leg's phase.
fn profile(phase: Phase) -> &'static str {
    match phase {
        Phase::Prefill => "prefill",
        Phase::Encode => "encode",
        Phase::Decode | Phase::Aggregated => "decode",
    }
}

impl Dispatcher for RouterDispatch<'_> {
    type Body = LegBody;

    /// Sends the leg; a 503 on a prefill or decode leg (not a probe) is sent once more after
    /// [`ROUTER_RESYNC_WAIT`] (nothing has streamed yet; the leg keeps its captured revision,
    /// so a resend can never mix revisions — it only waits for the router to catch up).
    async fn dispatch(
        &self,
        mut leg: PhaseRequest,
    ) -> Result<PhaseResponse<LegBody>, DispatchError> {
        let router = self.routers.and_then(|r| router_of(r, leg.phase));
        let Some(router) = router else {
            // The plan has an encode step only with an encode router (planning defect).
            let phase = leg.phase.as_str();
            return Err(DispatchError::unscheduled(
                503,
                format!("no router is configured for the {phase} phase"),
            ));
        };
        leg.headers.insert(
            headers::EPP_PROFILE,
            HeaderValue::from_static(profile(leg.phase)),
        );
        // The routers trust this coordinator by its token, when it has one (crate::trust).
        if let Some(t) = self
            .state
            .trust
            .token()
            .and_then(|t| HeaderValue::from_str(t).ok())
        {
            leg.headers.insert(headers::COORDINATOR_TOKEN, t);
        }
        let t = leg_send::timeouts_for(self.state, self.req, leg.phase);
        let resend = matches!(leg.phase, Phase::Prefill | Phase::Decode)
            && !leg.headers.contains_key(headers::PREFER);
        let mut result = leg_send::send(self.state, &leg, router, t).await;
        let mut attempts = 1;
        if resend && result.as_ref().is_ok_and(|r| r.status == 503) {
            if let Ok(first) = result {
                let _ = leg_send::collect(&router.name, first.body).await;
            }
            tokio::time::sleep(ROUTER_RESYNC_WAIT).await;
            self.state
                .metrics
                .retries
                .with_label_values(&[leg.phase.as_str()])
                .inc();
            attempts += 1;
            result = leg_send::send(self.state, &leg, router, t).await;
        }
        if let Some(slot) = self.ctx.slot_for(leg.phase) {
            self.ctx.with(slot, |r| {
                r.phase = Some(leg.phase);
                r.attempts = attempts;
                r.status = result.as_ref().ok().map(|resp| resp.status);
                r.served = result
                    .as_ref()
                    .ok()
                    .and_then(|resp| crate::dispatch::served::named_by_router(&resp.headers, slot));
            });
        }
        // A router that cannot be reached makes its phase unavailable (the prefill policy
        // applies); a router's own answers are the request's.
        result.map_err(|e| {
            let retry = failure::rule(LegEvent::Failed(e.kind)).retry;
            e.unavailable(retry)
        })
    }

    async fn collect(&self, endpoint: &str, body: LegBody) -> Result<Bytes, DispatchError> {
        leg_send::collect(endpoint, body).await
    }
}
