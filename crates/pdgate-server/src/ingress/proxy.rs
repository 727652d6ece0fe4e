//! The inference handlers: ingress → scheduling (or, as a coordinator of per-role routers,
//! a plan whose legs go to them) → [`crate::respond::forward`] (design.md §2).

use crate::dispatch::ctx::RequestContext;
use crate::dispatch::engine_dispatch::EngineDispatch;
use crate::dispatch::router_dispatch::RouterDispatch;
use crate::errors::ApiError;
use crate::header_scan::HeaderNames;
use crate::ingress::client_body;
use crate::request_ids::{decision_id, request_id};
use crate::respond::forward;
use crate::state::AppState;
use axum::body::Body;
use axum::response::Response;
use http::{HeaderMap, HeaderValue, StatusCode};
use pdgate_api::{headers, ApiKind, InferenceRequest, Phase};
use pdgate_coordinator::{PipelineError, Plan, PrefillFallback};
use pdgate_core::intake::{self, Caller, Intake};
use std::sync::Arc;

/// Handles one inference request on `api`; every failure becomes an error response.
///
/// Counted in `pdgate_requests_total{api, status}` once per request; a request whose client
/// went away before the response head is counted with status `499` (nginx's "client closed
/// request").
pub async fn handle(
    state: Arc<AppState>,
    api: ApiKind,
    client_headers: HeaderMap,
    body: Body,
    peer: Option<std::net::IpAddr>,
) -> Response {
    let mut counter = RequestCounter {
        state: &state,
        api,
        status: None,
    };
    let rid = request_id(&client_headers);
    let active = state.active.enter();
    let outcome = if state.flow.is_shutting_down() && state.routers.is_some() {
        // A coordinator has no flow gate: while draining it refuses new requests here, as
        // the gate does for a router.
        Err(ApiError::dropped(
            pdgate_scheduler::flow::Outcome::RejectedOther,
            false,
        ))
    } else {
        run(&state, api, client_headers, body, &rid, peer).await
    };
    let mut resp = match outcome {
        Ok(r) => r,
        Err(e) => {
            if !matches!(
                e,
                ApiError::InvalidRequest(_) | ApiError::BodyTooLarge { .. }
            ) {
                tracing::debug!(error = %e, "request failed");
            }
            e.into_response_for(Some(api))
        }
    };
    // Every answer carries the request id, the router's own errors included.
    resp.headers_mut().entry(headers::REQUEST_ID).or_insert(rid);
    counter.status = Some(resp.status());
    crate::active::hold_until_body_ends(resp, active)
}

/// Counts the request when dropped: with its status, or 499 when the handler was cancelled.
struct RequestCounter<'a> {
    state: &'a AppState,
    api: ApiKind,
    status: Option<StatusCode>,
}

impl Drop for RequestCounter<'_> {
    fn drop(&mut self) {
        let api = self.api.label();
        let status = self.status.as_ref().map_or("499", StatusCode::as_str);
        self.state.metrics.count_request(api, status);
    }
}

/// The scheduling profile a per-role router must run, from `x-llm-d-epp-profile` (or the
/// legacy `EPP-Profile`); `None` lets the profile handler decide (design.md §5.3).
///
/// Errors: the header is not visible ASCII → 400 naming it.
fn profile_header<'h>(
    h: &'h HeaderMap,
    present: &HeaderNames<'_>,
) -> Result<Option<&'h str>, ApiError> {
    crate::header_scan::first_value(
        h,
        &[headers::EPP_PROFILE, headers::EPP_PROFILE_LEGACY],
        Some(present),
    )
}

/// True when this router can run an encode step itself: its config has an `encode` profile
/// and some schedulable endpoint has an encode role.
fn can_encode(state: &AppState, snapshot: &pdgate_scheduler::Snapshot) -> bool {
    let has_profile = state
        .scheduler
        .profile_for(pdgate_api::Phase::Encode)
        .is_some();
    let has_encoder = snapshot
        .endpoints
        .iter()
        .any(|e| e.endpoint.schedulable() && e.endpoint.role.is_some_and(|r| r.can_encode()));
    has_profile && has_encoder
}

/// The router's role for one request, decided once at ingress.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// This router schedules and runs every phase of a client's request.
    Whole,
    /// A per-role router: a trusted coordinator sent one phase leg (`x-llm-d-epp-profile`);
    /// its body fields and forwarded headers are the contract between hops.
    PhaseRouter,
    /// A coordinator of per-role routers (`--prefill-router`/`--decode-router`): they
    /// schedule; the plan names them.
    Coordinator,
}

/// A client request after ingress: parsed, its caller and role decided.
struct Ingressed<'h> {
    req: InferenceRequest,
    headers: &'h HeaderMap,
    present: HeaderNames<'h>,
    caller: Caller<'h>,
    role: Role,
    body_bytes: u64,
    upstream_headers: HeaderMap,
}

async fn run(
    state: &AppState,
    api: ApiKind,
    client_headers: HeaderMap,
    body: Body,
    rid: &HeaderValue,
    peer: Option<std::net::IpAddr>,
) -> Result<Response, ApiError> {
    // The lease holds the body's bytes in the budget until the answer is produced.
    let (raw, _lease) = client_body::read(state, body, &client_headers).await?;
    let body_bytes = raw.len() as u64;
    let req = client_body::parse(api, raw).await?;
    let ingressed = ingress(state, req, &client_headers, body_bytes, rid, peer)?;
    match ingressed.role {
        Role::Coordinator => plan_coordinator(state, ingressed, rid).await,
        Role::Whole | Role::PhaseRouter => plan_router(state, ingressed, rid).await,
    }
}

/// Ingress: the trust boundary (coordinator headers from an untrusted caller counted and
/// never read), the caller, the role, the headers every leg carries.
///
/// Errors: an unreadable profile header from a trusted caller (400 naming it).
fn ingress<'h>(
    state: &AppState,
    req: InferenceRequest,
    client_headers: &'h HeaderMap,
    body_bytes: u64,
    rid: &HeaderValue,
    peer: Option<std::net::IpAddr>,
) -> Result<Ingressed<'h>, ApiError> {
    let present = HeaderNames::of(client_headers);
    // Coordinator-to-router headers count only from a trusted caller (crate::trust); from
    // anyone else they are dropped (and counted) before anything reads them.
    let trusted = state.trust.trusts(peer, client_headers);
    if !trusted {
        intake::count_untrusted(
            &state.metrics,
            &state.forward_rules,
            client_headers,
            &present,
        );
    }
    let profile = match trusted {
        true => profile_header(client_headers, &present)?,
        false => None,
    };
    let role = match (&state.routers, profile) {
        (Some(_), _) => Role::Coordinator,
        (None, Some(_)) => Role::PhaseRouter,
        (None, None) => Role::Whole,
    };
    // A per-role router's caller with a profile header is a coordinator sending a phase leg;
    // anyone else is a client, whose router-owned body fields go (issue 10: a client must not
    // steer an engine's KV transfer).
    let caller = Caller {
        trusted,
        profile,
        coordinator: role == Role::PhaseRouter,
        client: peer,
    };
    let upstream_headers = state
        .forward_rules
        .upstream_request_headers(client_headers, rid);
    Ok(Ingressed {
        req,
        headers: client_headers,
        present,
        caller,
        role,
        body_bytes,
        upstream_headers,
    })
}

/// llm-d's coordinator steps before any leg (render, media): on a client's request only.
async fn pre_steps(
    state: &AppState,
    req: &mut InferenceRequest,
    rid: &HeaderValue,
) -> Result<(), ApiError> {
    state.pre_steps.run(state, req, rid).await
}

/// The coordinator of per-role routers: the client's request cleaned and pre-stepped, then a
/// plan of the phases, each sent to its phase's router (they schedule).
async fn plan_coordinator(
    state: &AppState,
    mut i: Ingressed<'_>,
    rid: &HeaderValue,
) -> Result<Response, ApiError> {
    let Some(routers) = &state.routers else {
        unreachable!("Role::Coordinator is decided from state.routers")
    };
    intake::clean(&state.metrics, &mut i.req, i.caller);
    pre_steps(state, &mut i.req, rid).await?;
    // One decision id per request, on every leg to a router: fan-out legs (parallel
    // encodes) then share one revision draw (design.md §5.1). A client's value was
    // stripped as router-owned.
    i.upstream_headers
        .insert(headers::REVISION_DECISION_ID, decision_id());
    let plan = Plan {
        split: true,
        one_leg: Phase::Aggregated,
        encode: routers.encode.is_some(),
        conditional: routers.conditional_decode,
        prefill_fallback: state.prefill_fallback,
        kv_connector: state.kv_connector,
        encode_settings: state.encode,
        tokens_in: state.pre_steps.tokens_in_prefill,
    };
    let ctx = RequestContext::new(None, true);
    let dispatcher = RouterDispatch::new(state, &ctx, &i.req);
    let ingress = forward::Ingress {
        req: &i.req,
        upstream_headers: &i.upstream_headers,
        rid,
        session_id: None,
        coordinator: false,
    };
    Ok(forward::forward(state, &ingress, &plan, &dispatcher, &ctx, None).await)
}

/// A scheduling router (the whole request, or one phase leg for a coordinator): the one
/// intake of both fronts ([`intake::route`]) picks, then a plan of the phases to run (the
/// dispatcher sends each to its pick in the request context).
async fn plan_router(
    state: &AppState,
    mut i: Ingressed<'_>,
    rid: &HeaderValue,
) -> Result<Response, ApiError> {
    let now = tokio::time::Instant::now();
    let avoid_open = |e: &pdgate_scheduler::Endpoint| state.breakers.is_open(&e.name, now);
    let routed = intake::route(
        state.intake_handles(),
        &mut i.req,
        &Intake {
            headers: i.headers,
            present: &i.present,
            rid: rid.to_str().unwrap_or_default(),
            caller: i.caller,
            body_bytes: i.body_bytes,
            avoid: Some(&avoid_open),
        },
        async |req: &mut InferenceRequest| pre_steps(state, req, rid).await,
    )
    .await?;
    let req = &i.req;
    let upstream_headers = &i.upstream_headers;
    let profile = i.caller.profile;
    let caller = i.caller;
    // The decider wanted a split that no prefill endpoint can serve: the policy decides.
    let fallback = routed.prefill_unavailable.clone();
    if let (Some(reason), PrefillFallback::Fail) = (&fallback, state.prefill_fallback) {
        forward::report_prefill_unavailable(state, "fail", reason);
        return Err(ApiError::Pipeline(PipelineError::PrefillUnavailable {
            reason: reason.clone(),
        }));
    }
    let result = routed.result;
    let plan = Plan {
        split: routed.split,
        // A per-role router's one leg is the phase its pick runs (a coordinator's leg).
        one_leg: result.decode.phase,
        // A per-role router (profile header) forwards the body it got; only a router that
        // runs the whole request runs its encode step, unless the encode decider said no.
        encode: profile.is_none()
            && can_encode(state, &routed.snapshot)
            && pdgate_scheduler::plugins::disagg_profile_handler::encode_decision(
                result.decode.guard.state(),
            ) != Some(false),
        conditional: false,
        prefill_fallback: state.prefill_fallback,
        kv_connector: state.kv_connector,
        encode_settings: state.encode,
        tokens_in: state.pre_steps.tokens_in_prefill,
    };
    let ctx = RequestContext::new(Some(result), routed.split);
    let dispatcher = EngineDispatch::new(state, &ctx, req, routed.decision.as_ref());
    let ingress = forward::Ingress {
        req,
        upstream_headers,
        rid,
        session_id: routed.session_id.as_deref(),
        coordinator: caller.coordinator,
    };
    let answer = forward::forward(state, &ingress, &plan, &dispatcher, &ctx, fallback);
    let program = routed.program;
    let Some(ticket) = routed.eviction else {
        return Ok(crate::flow_programs::metered(answer.await, program));
    };
    // Evicted before the answer began: 429 `evicted`; the legs are dropped with the future.
    let response = tokio::select! {
        biased;
        r = answer => r,
        _ = ticket.evicted() => {
            return Err(ApiError::dropped(pdgate_scheduler::flow::Outcome::EvictedInFlight, false));
        }
    };
    let sse =
        crate::respond::forward::is_event_stream(response.headers()).then_some(req.kind.sse_form());
    let response =
        response.map(|b| Body::new(crate::flow_eviction::EvictableBody::new(b, ticket, sse)));
    Ok(crate::flow_programs::metered(response, program))
}
