//! [`EngineDispatch`]: the [`Dispatcher`] that sends each leg straight to the engine the
//! scheduler picked for its phase (the pick in the request's [`RequestContext`]). The
//! scheduler's `ResponseHeader` hooks run on the head of the endpoint that served; the
//! encode step's legs are scheduled per item; a failing leg is retried on another
//! endpoint of the same phase and revision as the failure rule says ([`failure::rule`]),
//! with the [`RetryPolicy`]'s budget and backoff, never when the phase is pinned. Every leg's
//! endpoint, booking and status go into the request's [`RequestContext`].

use crate::breaker::{Admission, Outcome};
use crate::dispatch::ctx::{RequestContext, Slot};
use crate::dispatch::leg_body::LegBody;
use crate::dispatch::leg_send;
use crate::errors::ApiError;
use crate::failure::{self, BreakerEffect, ClientSees, LegEvent};
use crate::state::AppState;
use bytes::Bytes;
use http::{HeaderName, HeaderValue};
use pdgate_api::{headers, InferenceRequest, Phase, PromptInput};
use pdgate_coordinator::{
    DispatchError, Dispatcher, FailureKind, PhaseRequest, PhaseResponse, Target,
};
use pdgate_scheduler::{Endpoint, Pick, SchedulingRequest};
use tokio::time::Instant;

/// The dispatch target of a pick: the endpoint's name, address, revision and DP rank.
pub fn target(p: &Pick) -> Target {
    let ep = &p.endpoint.endpoint;
    Target {
        name: ep.name.clone(),
        address: ep.address.clone(),
        revision: ep.revision().map(str::to_string),
        dp_rank: ep.dp_rank,
    }
}

/// The engine [`Dispatcher`] of one request.
pub struct EngineDispatch<'a> {
    state: &'a AppState,
    ctx: &'a RequestContext,
    req: &'a InferenceRequest,
    /// The request's revision decision id (shared by every pick of the request).
    decision_id: Option<&'a HeaderValue>,
}

impl<'a> EngineDispatch<'a> {
    /// A dispatcher for `req` whose picks are in `ctx`.
    pub fn new(
        state: &'a AppState,
        ctx: &'a RequestContext,
        req: &'a InferenceRequest,
        decision_id: Option<&'a HeaderValue>,
    ) -> Self {
        EngineDispatch {
            state,
            ctx,
            req,
            decision_id,
        }
    }

    fn stamp(&self, pick: &Pick, resp: &mut PhaseResponse<LegBody>) {
        for (name, value) in self.state.scheduler.response_received(pick, resp.status) {
            if let (Ok(n), Ok(v)) = (
                HeaderName::from_bytes(name.as_bytes()),
                HeaderValue::from_str(&value),
            ) {
                resp.headers.insert(n, v);
            }
        }
    }

    /// Schedules one pick through `profile` for this request, avoiding `avoid`.
    fn pick(
        &self,
        profile: &str,
        leg_headers: &http::HeaderMap,
        prompt: &PromptInput,
        avoid: &(dyn Fn(&Endpoint) -> bool + Sync),
    ) -> Result<Pick, DispatchError> {
        let snapshot = self.state.registry.snapshot();
        let rid = leg_headers
            .get(headers::REQUEST_ID)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string();
        // The scheduler sees the leg's headers plus the request's decision id (shared by
        // every pick of the request); the engine never gets the id.
        let mut view = leg_headers.clone();
        if let Some(id) = self.decision_id {
            view.insert(headers::REVISION_DECISION_ID, id.clone());
        }
        let picked = self.state.scheduler.schedule(
            &SchedulingRequest {
                profile: Some(profile),
                headers: &pdgate_core::intake::SchedulerHeaders(&view),
                avoid: Some(avoid),
                // The scheduler reads no clock: every time-dependent decision uses this.
                now_ms: pdgate_scheduler::monotonic_ms(),
                ..SchedulingRequest::new(&rid, &self.req.model, prompt)
            },
            &snapshot,
        );
        picked.map(|r| r.decode).map_err(|rejected| {
            let reason = rejected.to_string();
            let status = ApiError::Rejected(rejected).status().as_u16();
            DispatchError::unscheduled(status, reason)
        })
    }

    async fn dispatch_encode(
        &self,
        mut leg: PhaseRequest,
    ) -> Result<PhaseResponse<LegBody>, DispatchError> {
        let breakers = &self.state.breakers;
        let now = Instant::now();
        let avoid = |e: &Endpoint| breakers.is_open(&e.name, now);
        let Some(profile) = self.state.scheduler.profile_for(Phase::Encode) else {
            return Err(DispatchError::unscheduled(
                503,
                "the config has no profile for the encode phase",
            ));
        };
        let profile = profile.to_string();
        let mut pick = self.pick(
            &profile,
            &leg.headers,
            &PromptInput::Text(String::new()),
            &avoid,
        )?;
        pick.phase = Phase::Encode;
        let to = target(&pick);
        engine_headers(&mut leg, &to);
        let t = self.state.timeouts.for_leg(false);
        let sent = leg_send::send(self.state, &leg, &to, t).await;
        let mut resp = sent?;
        self.stamp(&pick, &mut resp);
        if (200..300).contains(&resp.status) {
            pick.guard.complete();
        }
        self.ctx.keep_encode(pick);
        Ok(resp)
    }

    /// Sends an engine leg of a scheduled phase, retrying elsewhere per the failure rule.
    async fn dispatch_with_retries(
        &self,
        mut leg: PhaseRequest,
        slot: Slot,
    ) -> Result<PhaseResponse<LegBody>, DispatchError> {
        let Some(mut pick) = self.ctx.with(slot, |r| r.pick.take()) else {
            // The plan and the picks come from one scheduling result: a leg without a pick
            // is a planning defect, answered as "no endpoint" rather than sent anywhere.
            let phase = leg.phase.as_str();
            return Err(DispatchError::unscheduled(
                503,
                format!("no endpoint was picked for the {phase} phase"),
            ));
        };
        let mut to = target(&pick);
        engine_headers(&mut leg, &to);
        let policy = self.state.retry;
        let breakers = &self.state.breakers;
        let revision = to.revision.clone();
        let mut failed: Vec<String> = Vec::new();
        let mut attempt = 1;
        let t = self.timeouts(leg.phase);
        loop {
            let name = &to.name;
            let admission = breakers.admit(name, Instant::now());
            let result = match admission {
                // Opened since scheduling: do not send; try elsewhere.
                Admission::Open if !pick.pinned => Err(DispatchError::new(
                    FailureKind::BreakerOpen,
                    name,
                    "circuit breaker open",
                )),
                _ => leg_send::send(self.state, &leg, &to, t).await,
            };
            let event = match &result {
                Ok(r) => LegEvent::Answered(r.status),
                Err(e) => LegEvent::Failed(e.kind),
            };
            let verdict = failure::rule(event);
            let outcome = match verdict.breaker {
                BreakerEffect::Success => Some(Outcome::Success),
                BreakerEffect::Failure => Some(Outcome::Failure),
                BreakerEffect::Neutral => None,
            };
            if let Some(o) = outcome {
                breakers.record(&to.name, o, Instant::now());
            }
            if let LegEvent::Answered(status @ 500..) = event {
                leg_send::count_failure(
                    self.state,
                    leg.phase,
                    &to.name,
                    FailureKind::Status(status),
                    &format!("answered {status}"),
                );
            }
            drop(admission);
            if verdict.retry && policy.may_retry(attempt, pick.pinned, false) {
                failed.push(to.name.clone());
                let now = Instant::now();
                let avoid = |e: &Endpoint| {
                    failed.contains(&e.name)
                        || breakers.is_open(&e.name, now)
                        || e.revision() != revision.as_deref()
                };
                let profile = pick.profile.clone();
                if let Ok(mut next) = self.pick(&profile, &leg.headers, &self.req.prompt, &avoid) {
                    next.phase = pick.phase;
                    tokio::time::sleep(policy.backoff(attempt)).await;
                    self.state
                        .metrics
                        .retries
                        .with_label_values(&[leg.phase.as_str()])
                        .inc();
                    if crate::log_limit::allow(&crate::log_limit::RETRIES) {
                        tracing::info!(
                            phase = leg.phase.as_str(),
                            from = %to.name,
                            to = %next.endpoint.endpoint.name,
                            attempt,
                            "retrying the leg on another endpoint"
                        );
                    }
                    to = target(&next);
                    engine_headers(&mut leg, &to);
                    // The failed endpoint's booking ends here (uncompleted); the next one's
                    // starts.
                    pick = next;
                    attempt += 1;
                    continue;
                }
            }
            return self
                .finish(slot, leg.phase, to, pick, attempt, result, verdict)
                .await;
        }
    }

    /// Records the leg's last try (`served`: the endpoint tried last, running `phase`) in the
    /// context and turns an engine 5xx into an error.
    #[allow(clippy::too_many_arguments)]
    async fn finish(
        &self,
        slot: Slot,
        phase: Phase,
        served: Target,
        pick: Pick,
        attempts: u32,
        result: Result<PhaseResponse<LegBody>, DispatchError>,
        verdict: failure::Verdict,
    ) -> Result<PhaseResponse<LegBody>, DispatchError> {
        let status = result.as_ref().ok().map(|r| r.status);
        let result = match result {
            Ok(resp) if matches!(verdict.client, ClientSees::Status(_)) => {
                // An engine 5xx: the client gets 502 naming the endpoint (design.md §5.5).
                let status = resp.status;
                let body = leg_send::collect(&served.name, resp.body)
                    .await
                    .unwrap_or_default();
                let detail = String::from_utf8_lossy(&body[..body.len().min(300)]).into_owned();
                Err(DispatchError::new(
                    FailureKind::Status(status),
                    &served.name,
                    format!("answered {status}: {detail}"),
                ))
            }
            Ok(mut resp) => {
                self.stamp(&pick, &mut resp);
                Ok(resp)
            }
            Err(e) => Err(e),
        };
        let unavailable = verdict.retry && !pick.pinned;
        self.ctx.with(slot, |r| {
            r.phase = Some(phase);
            r.served = Some(served);
            r.status = status;
            r.attempts = attempts;
            r.pick = Some(pick);
        });
        result.map_err(|e| e.unavailable(unavailable))
    }

    fn timeouts(&self, phase: Phase) -> crate::dispatch::timeouts::LegTimeouts {
        leg_send::timeouts_for(self.state, self.req, phase)
    }
}

impl Dispatcher for EngineDispatch<'_> {
    type Body = LegBody;

    async fn dispatch(&self, leg: PhaseRequest) -> Result<PhaseResponse<LegBody>, DispatchError> {
        match self.ctx.slot_for(leg.phase) {
            // The encode step's legs: one pick per item.
            None => self.dispatch_encode(leg).await,
            Some(Slot::Prefill) => {
                let answer = self.dispatch_with_retries(leg, Slot::Prefill).await;
                // The prefill engine's work ends with its answer (a non-streamed prefill
                // answers when it is done): release its booking now, not when the decode
                // ends, or load scorers and saturation detectors see a busy prefill pod.
                self.ctx.finish_prefill();
                answer
            }
            Some(slot) => self.dispatch_with_retries(leg, slot).await,
        }
    }

    async fn collect(&self, endpoint: &str, body: LegBody) -> Result<Bytes, DispatchError> {
        leg_send::collect(endpoint, body).await
    }
}

/// Headers of an engine leg: the client's routing hints are the router's, not the engine's
/// (removed), and the engine's data-parallel rank header (vLLM `X-data-parallel-rank`) is
/// the rank of `to` (the leg's endpoint), or absent when it has none.
fn engine_headers(leg: &mut PhaseRequest, to: &Target) {
    // The hint headers, but `x-session-id`, which engines may use.
    crate::header_scan::remove_where(&mut leg.headers, |n| {
        n != headers::SESSION_ID && pdgate_api::hints::HINT_HEADERS.contains(&n)
    });
    // (`x-data-parallel-rank` is one of them: set again from the target.)
    if let Some(r) = to.dp_rank {
        leg.headers
            .insert(headers::DATA_PARALLEL_RANK, HeaderValue::from(r));
    }
}
