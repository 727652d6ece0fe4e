//! In-process dispatch ([`LocalDispatch`]): each leg goes to its endpoint over the pooled
//! client; the scheduler's `ResponseHeader` hooks run on each phase response head; encode
//! legs are scheduled per item; and a failing engine leg is retried on another endpoint of
//! the same phase and revision (design.md §5.5, issue 5).
//!
//! Retry rule, before the first byte reaches the client: a connect error or a 502/503/504
//! answer counts against the endpoint's circuit breaker and is retried elsewhere (failed
//! endpoints and open breakers excluded, same revision, at most
//! [`RetryPolicy::max_attempts`] tries, backoff between them); a 4xx is never retried and
//! never counts; a pinned phase is never retried elsewhere.

use crate::app::AppState;
use crate::breaker::{Admission, Outcome};
use crate::errors::ApiError;
use crate::retry::RetryPolicy;
use bytes::Bytes;
use http::{HeaderName, HeaderValue};
use hyper::body::Incoming;
use parking_lot::Mutex;
use pdgate_api::{headers, InferenceRequest, Phase, PromptInput};
use pdgate_coordinator::{DispatchError, Dispatcher, PhaseRequest, PhaseResponse, Target};
use pdgate_scheduler::{Endpoint, Pick, SchedulingRequest, SchedulingResult};
use tokio::time::Instant;

/// Target name of in-process encode legs: the dispatcher picks an encode endpoint per leg.
pub const LOCAL_ENCODE: &str = "encode";

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

/// The in-process [`Dispatcher`] of one request.
pub struct LocalDispatch<'a> {
    state: &'a AppState,
    result: Option<&'a SchedulingResult>,
    req: &'a InferenceRequest,
    /// Legs go to per-role routers (which choose and retry themselves), not engines.
    routed: bool,
    /// The request's revision decision id (local scheduling only).
    decision_id: Option<&'a HeaderValue>,
    /// Picks made here (encode items, retries), booked until the request ends.
    picks: Mutex<Vec<Pick>>,
    /// The endpoint that finally served each retried phase.
    replaced: Mutex<Vec<(Phase, Pick)>>,
}

impl<'a> LocalDispatch<'a> {
    /// A dispatcher for `req` with its local picks in `result` (`None` behind routers).
    pub fn new(
        state: &'a AppState,
        result: Option<&'a SchedulingResult>,
        req: &'a InferenceRequest,
        routed: bool,
        decision_id: Option<&'a HeaderValue>,
    ) -> Self {
        LocalDispatch {
            state,
            result,
            req,
            routed,
            decision_id,
            picks: Mutex::new(Vec::new()),
            replaced: Mutex::new(Vec::new()),
        }
    }

    /// The pick that replaced `phase`'s original one after retries, if any (its booking
    /// moves to the caller).
    pub fn take_replacement(&self, phase: Phase) -> Option<Pick> {
        let mut r = self.replaced.lock();
        let i = r.iter().rposition(|(p, _)| *p == phase)?;
        Some(r.remove(i).1)
    }

    /// The targets that finally served each retried phase.
    pub fn replaced_targets(&self) -> Vec<(Phase, Target)> {
        self.replaced
            .lock()
            .iter()
            .map(|(p, pick)| (*p, target(pick)))
            .collect()
    }

    fn stamp(&self, pick: &Pick, resp: &mut PhaseResponse<Incoming>) {
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
                headers: &crate::proxy::Headers(&view),
                avoid: Some(avoid),
                ..SchedulingRequest::new(&rid, &self.req.model, prompt)
            },
            &snapshot,
        );
        picked.map(|r| r.decode).map_err(|rejected| {
            let reason = rejected.to_string();
            let status = ApiError::Rejected(rejected).status().as_u16();
            DispatchError::Unscheduled { status, reason }
        })
    }

    async fn dispatch_encode(
        &self,
        mut leg: PhaseRequest,
    ) -> Result<PhaseResponse<Incoming>, DispatchError> {
        let breakers = &self.state.breakers;
        let now = Instant::now();
        let avoid = |e: &Endpoint| breakers.is_open(&e.name, now);
        let mut pick = self.pick(
            LOCAL_ENCODE,
            &leg.headers,
            &PromptInput::Text(String::new()),
            &avoid,
        )?;
        pick.phase = Phase::Encode;
        leg.target = target(&pick);
        set_dp_rank(&mut leg);
        let mut resp = self.state.upstream.dispatch(leg).await?;
        self.stamp(&pick, &mut resp);
        if (200..300).contains(&resp.status) {
            pick.guard.complete();
        }
        self.picks.lock().push(pick);
        Ok(resp)
    }

    /// Sends an engine leg of a scheduled phase, retrying elsewhere per the module rule.
    async fn dispatch_with_retries(
        &self,
        mut leg: PhaseRequest,
        original: &Pick,
    ) -> Result<PhaseResponse<Incoming>, DispatchError> {
        let policy = RetryPolicy::default();
        let breakers = &self.state.breakers;
        let revision = leg.target.revision.clone();
        let profile = original.profile.clone();
        let mut failed: Vec<String> = Vec::new();
        let mut current: Option<Pick> = None;
        let mut attempt = 1;
        loop {
            let name = leg.target.name.clone();
            let admission = breakers.admit(&name, Instant::now());
            let result = match admission {
                // Opened since scheduling: do not send; try elsewhere like a failure.
                Admission::Open if !original.pinned => None,
                _ => Some(self.state.upstream.dispatch(leg.clone()).await),
            };
            let status = match &result {
                Some(Ok(r)) => Some(r.status),
                _ => None,
            };
            let failure = match &result {
                None => true,
                Some(Err(DispatchError::Connect { .. })) => true,
                Some(Err(_)) => false,
                Some(Ok(r)) => matches!(r.status, 502..=504),
            };
            if result.is_some() {
                if failure || matches!(&result, Some(Err(_))) {
                    breakers.record(&name, Outcome::Failure, Instant::now());
                } else if status.is_some_and(|s| (200..400).contains(&s)) {
                    breakers.record(&name, Outcome::Success, Instant::now());
                }
            }
            drop(admission);
            let pick_now = current.as_ref().unwrap_or(original);
            if failure && policy.may_retry(attempt, pick_now.pinned, false) {
                failed.push(name);
                let now = Instant::now();
                let avoid = |e: &Endpoint| {
                    failed.contains(&e.name)
                        || breakers.is_open(&e.name, now)
                        || e.revision().map(str::to_string) != revision
                };
                if let Ok(mut next) = self.pick(&profile, &leg.headers, &self.req.prompt, &avoid) {
                    next.phase = original.phase;
                    tokio::time::sleep(policy.backoff(attempt)).await;
                    self.state
                        .metrics
                        .retries
                        .with_label_values(&[original.phase.as_str()])
                        .inc();
                    leg.target = target(&next);
                    set_dp_rank(&mut leg);
                    if let Some(prev) = current.replace(next) {
                        self.picks.lock().push(prev);
                    }
                    attempt += 1;
                    continue;
                }
            }
            let result = match result {
                Some(r) => r,
                None => Err(DispatchError::Connect {
                    endpoint: leg.target.name.clone(),
                    reason: "circuit breaker open".into(),
                }),
            };
            let mut resp = match result {
                Ok(r) => r,
                Err(e) => {
                    // Report the endpoint that failed last, not the first one.
                    if let Some(c) = current {
                        self.replaced.lock().push((original.phase, c));
                    }
                    return Err(e);
                }
            };
            self.stamp(current.as_ref().unwrap_or(original), &mut resp);
            if let Some(c) = current {
                self.replaced.lock().push((original.phase, c));
            }
            return Ok(resp);
        }
    }
}

/// Wait before resending a leg a per-role router refused with 503: per-role routers apply
/// endpoint changes independently (each polls the source), so for a moment after a change one
/// may refuse a revision the other already chose.
pub const ROUTER_RESYNC_WAIT: std::time::Duration = std::time::Duration::from_millis(150);

impl LocalDispatch<'_> {
    /// Sends a leg to a per-role router; a 503 on a prefill or decode leg is sent once more
    /// after [`ROUTER_RESYNC_WAIT`] (nothing has streamed yet; the leg keeps its captured
    /// revision, so a retry can never mix revisions — it only waits for the router to catch
    /// up).
    async fn dispatch_to_router(
        &self,
        leg: PhaseRequest,
    ) -> Result<PhaseResponse<Incoming>, DispatchError> {
        let resend = matches!(leg.phase, Phase::Prefill | Phase::Decode)
            && !leg.headers.contains_key(headers::PREFER);
        if !resend {
            return self.state.upstream.dispatch(leg).await;
        }
        let first = self.state.upstream.dispatch(leg.clone()).await?;
        if first.status != 503 {
            return Ok(first);
        }
        let _ = self
            .state
            .upstream
            .collect(&leg.target.name, first.body)
            .await;
        tokio::time::sleep(ROUTER_RESYNC_WAIT).await;
        self.state
            .metrics
            .retries
            .with_label_values(&[leg.phase.as_str()])
            .inc();
        self.state.upstream.dispatch(leg).await
    }
}

impl Dispatcher for LocalDispatch<'_> {
    type Body = Incoming;

    async fn dispatch(
        &self,
        mut leg: PhaseRequest,
    ) -> Result<PhaseResponse<Incoming>, DispatchError> {
        let phase = leg.phase;
        if phase == Phase::Encode && leg.target.name == LOCAL_ENCODE {
            return self.dispatch_encode(leg).await;
        }
        if self.routed {
            return self.dispatch_to_router(leg).await;
        }
        set_dp_rank(&mut leg);
        let original = self.result.and_then(|r| match phase {
            Phase::Prefill => r.prefill.as_ref(),
            _ => Some(&r.decode),
        });
        match original {
            Some(pick) => self.dispatch_with_retries(leg, pick).await,
            None => self.state.upstream.dispatch(leg).await,
        }
    }

    async fn collect(&self, endpoint: &str, body: Incoming) -> Result<Bytes, DispatchError> {
        self.state.upstream.collect(endpoint, body).await
    }
}

/// Headers of an engine leg: the client's routing hints are the router's, not the engine's
/// (removed), and the engine's data-parallel rank header (vLLM `X-data-parallel-rank`) is
/// the leg endpoint's rank, or absent when it has none.
fn set_dp_rank(leg: &mut PhaseRequest) {
    for name in pdgate_api::hints::HINT_HEADERS {
        if *name != headers::SESSION_ID {
            leg.headers.remove(*name);
        }
    }
    match leg.target.dp_rank {
        Some(r) => {
            leg.headers
                .insert(headers::DATA_PARALLEL_RANK, HeaderValue::from(r));
        }
        None => {
            leg.headers.remove(headers::DATA_PARALLEL_RANK);
        }
    }
}
