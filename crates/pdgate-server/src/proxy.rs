//! The inference handlers: ingress → scheduling (or, as a coordinator of per-role routers,
//! a plan naming them) → [`crate::forward`] (design.md §2).

use crate::app::AppState;
use crate::client_body;
use crate::ctx::RequestContext;
use crate::engine_dispatch::{self, EngineDispatch};
use crate::errors::ApiError;
use crate::forward;
use crate::header_scan::HeaderNames;
use crate::request_ids::{decision_id, request_id};
use crate::router_dispatch::RouterDispatch;
use axum::body::Body;
use axum::response::Response;
use http::{HeaderMap, HeaderValue, StatusCode};
use pdgate_api::hints::RoutingHints;
use pdgate_api::{headers, prefer, ApiKind, InferenceRequest};
use pdgate_coordinator::{PipelineError, Plan, PrefillFallback, Target};
use pdgate_scheduler::{Rejection, RequestHeaders, SchedulingRequest};
use std::sync::Arc;
use std::time::Instant;

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

/// True when the request carries `Prefer: if-available` (a conditional-decode probe).
fn asks_probe(h: &HeaderMap, present: &HeaderNames<'_>) -> bool {
    present.has(headers::PREFER)
        && prefer::prefers(
            h.get_all(headers::PREFER)
                .iter()
                .filter_map(|v| v.to_str().ok()),
            prefer::IF_AVAILABLE,
        )
}

/// Counts (and logs, rate-limited) the coordinator-to-router headers an untrusted caller
/// sent; their values are never read ([`crate::trust`]).
fn drop_untrusted(state: &AppState, h: &HeaderMap, present: &HeaderNames<'_>) {
    let probe = asks_probe(h, present);
    let dropped = crate::trust::PROFILE_HEADERS
        .iter()
        .copied()
        .chain([headers::REVISION_DECISION_ID])
        .chain(state.forward_rules.names())
        .filter(|n| present.has(n))
        .chain(probe.then_some(headers::PREFER));
    let mut any = None;
    for name in dropped {
        state
            .metrics
            .untrusted_headers_dropped
            .with_label_values(&[name])
            .inc();
        any.get_or_insert(name);
    }
    if let Some(name) = any {
        if crate::log_limit::allow(&crate::log_limit::UNTRUSTED_HEADERS) {
            tracing::warn!(
                header = name,
                "coordinator header from an untrusted caller dropped \
                (see --trusted-coordinator-networks, --coordinator-token-file)"
            );
        }
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

/// The in-process encode target when this router can run an encode step: its config has
/// an `encode` profile and some schedulable endpoint has an encode role.
fn local_encode(state: &AppState, snapshot: &pdgate_scheduler::Snapshot) -> Option<Target> {
    let has_profile = state
        .scheduler
        .profile_for(pdgate_api::Phase::Encode)
        .is_some();
    let has_encoder = snapshot
        .endpoints
        .iter()
        .any(|e| e.endpoint.schedulable() && e.endpoint.role.is_some_and(|r| r.can_encode()));
    (has_profile && has_encoder).then(|| Target {
        name: engine_dispatch::LOCAL_ENCODE.into(),
        address: String::new(),
        revision: None,
        dp_rank: None,
    })
}

/// Routing-hint headers must be readable and unambiguous: a value that is not visible ASCII,
/// or the same header given twice with different values, is a 400 naming it (never read as
/// absent, which would route the request freely).
pub fn check_hint_headers(h: &HeaderMap, present: &HeaderNames<'_>) -> Result<(), ApiError> {
    for name in pdgate_api::hints::HINT_HEADERS {
        if !present.has(name) {
            continue;
        }
        let mut values = h.get_all(*name).iter();
        let Some(first) = values.next() else {
            continue;
        };
        let bad = |reason: &str| ApiError::InvalidHeader {
            header: name,
            reason: reason.to_string(),
        };
        if first.to_str().is_err() {
            return Err(bad("not a visible ASCII string"));
        }
        if values.any(|v| v != first) {
            return Err(bad("given more than once with different values"));
        }
    }
    Ok(())
}

/// Removes a client's router-owned body fields ([`pdgate_coordinator::owned`]) from its
/// parsed body and bytes; counts each (`pdgate_client_fields_dropped_total{field}`) and logs
/// (rate-limited).
fn drop_router_owned(state: &AppState, req: &mut InferenceRequest) {
    for field in pdgate_coordinator::owned::strip_request(req) {
        state
            .metrics
            .client_fields_dropped
            .with_label_values(&[field])
            .inc();
        if crate::log_limit::allow(&crate::log_limit::CLIENT_FIELDS) {
            tracing::warn!(field, "router-owned field removed from a client request");
        }
    }
}

/// Admission before scheduling ([`crate::flow_control`]): with the `flowControl` gate the
/// request waits for its turn; without it only a sheddable request (priority < 0) can be
/// refused, while the pool is saturated.
///
/// Errors: the flow-control outcome as [`ApiError::Dropped`] (429/503 with
/// `x-llm-d-request-dropped-reason`); a bad objective or fairness-id header → 400.
async fn admit(
    state: &AppState,
    h: &HeaderMap,
    bytes: u64,
) -> Result<Option<crate::flow_control::Admission>, ApiError> {
    if state.flow.gated() {
        let key = crate::flow_control::flow_key(h, &state.objectives, bytes)?;
        return state
            .flow
            .admit(key)
            .await
            .map(Some)
            .map_err(|o| ApiError::dropped(o, false));
    }
    state
        .flow
        .legacy_check(crate::flow_control::priority(h, &state.objectives))
        .map_err(|o| ApiError::dropped(o, true))?;
    Ok(None)
}

/// Request headers as the scheduler's plugins read them.
pub(crate) struct Headers<'a>(pub(crate) &'a HeaderMap);

impl RequestHeaders for Headers<'_> {
    fn header(&self, name: &str) -> Option<&str> {
        self.0.get(name).and_then(|v| v.to_str().ok())
    }
}

async fn run(
    state: &AppState,
    api: ApiKind,
    client_headers: HeaderMap,
    body: Body,
    rid: &HeaderValue,
    peer: Option<std::net::IpAddr>,
) -> Result<Response, ApiError> {
    let mut own_view: HeaderMap;
    // The lease holds the body's bytes in the budget until the answer is produced.
    let (raw, _lease) = client_body::read(state, body, &client_headers).await?;
    let body_bytes = raw.len() as u64;
    let mut req = client_body::parse(api, raw).await?;
    let present = HeaderNames::of(&client_headers);
    // Coordinator-to-router headers count only from a trusted caller (crate::trust); from
    // anyone else they are dropped (and counted) before anything reads them.
    let trusted = state.trust.trusts(peer, &client_headers);
    if !trusted {
        drop_untrusted(state, &client_headers, &present);
    }
    let profile = match trusted {
        true => profile_header(&client_headers, &present)?,
        false => None,
    };
    // A per-role router's caller with a profile header is a coordinator sending a phase leg;
    // anyone else is a client, whose router-owned body fields go (issue 10: a client must not
    // steer an engine's KV transfer).
    let coordinator = state.routers.is_none() && profile.is_some();
    if !coordinator {
        drop_router_owned(state, &mut req);
        // llm-d's coordinator steps before any leg (render): on a client's request only.
        state.pre_steps.run(state, &mut req, rid).await?;
    }
    // This router schedules (per-role routers tokenize for themselves): the scheduler sees
    // the engine's token ids when a token-producer is configured.
    if state.routers.is_none() {
        let snapshot = state.registry.snapshot();
        let tokens = state.tokens.as_deref();
        crate::prompt_tokens::tokenize_prompt(tokens, &mut req, &snapshot, &state.metrics).await;
    }
    let mut upstream_headers = state
        .forward_rules
        .upstream_request_headers(&client_headers, rid);
    let mut session_id: Option<String> = None;
    let ingress = |upstream_headers, session_id| forward::Ingress {
        req: &req,
        upstream_headers,
        rid,
        session_id,
        coordinator,
    };

    if let Some(routers) = &state.routers {
        // One decision id per request, on every leg to a router: fan-out legs (parallel
        // encodes) then share one revision draw (design.md §5.1). A client's value was
        // stripped as router-owned.
        upstream_headers.insert(headers::REVISION_DECISION_ID, decision_id());
        // Coordinator of per-role routers: they schedule; the plan names them.
        let plan = Plan {
            prefill: Some(routers.prefill.clone()),
            decode: routers.decode.clone(),
            encode: routers.encode.clone(),
            conditional: routers.conditional_decode,
            prefill_fallback: state.prefill_fallback,
            kv_connector: state.kv_connector,
            encode_settings: state.encode,
            tokens_in: state.pre_steps.tokens_in_prefill,
        };
        let ctx = RequestContext::new(None, true);
        let dispatcher = RouterDispatch::new(state, &ctx, &req);
        return Ok(forward::forward(
            state,
            &ingress(&upstream_headers, session_id.as_deref()),
            &plan,
            &dispatcher,
            &ctx,
            None,
        )
        .await);
    }
    if !state.model_may_exist(&req.model) {
        return Err(ApiError::ModelNotFound(req.model));
    }
    // The request's multimodal items, hashed once: the scheduler's plugins read them (the
    // encode decider, the encoder-cache scorer).
    let media = pdgate_api::media::media_keys(&req.body);
    // Called by a client, this router is its coordinator: the client's own copies of
    // forwarded headers (e.g. `x-llm-d-disagg-revision`) are discarded before the screeners
    // see them (design.md §5.3). Called by a coordinator, the forwarded headers are the
    // contract between hops (the same rule as for the router-owned body fields above).
    let scheduler_headers = if coordinator {
        Headers(&client_headers)
    } else {
        let strip: Vec<&str> = state
            .forward_rules
            .names()
            .chain(headers::INTERNAL.iter().copied())
            .chain(crate::trust::PROFILE_HEADERS.iter().copied())
            .filter(|n| present.has(n))
            .collect();
        // A decision id only matters when encode picks will follow the main pick.
        let has_media = !media.is_empty();
        if strip.is_empty() && !has_media {
            // The common case: nothing to hide, nothing to add — no copy of the headers.
            Headers(&client_headers)
        } else {
            own_view = client_headers.clone();
            for name in strip {
                own_view.remove(name);
            }
            if has_media {
                // This request's own decision id, shared with its encode picks (never sent
                // upstream).
                own_view.insert(headers::REVISION_DECISION_ID, decision_id());
            }
            Headers(&own_view)
        }
    };
    let conditional = trusted && asks_probe(&client_headers, &present);
    check_hint_headers(&client_headers, &present)?;
    let hints = RoutingHints::parse(
        |n| {
            present
                .has(n)
                .then(|| client_headers.get(n)?.to_str().ok())
                .flatten()
        },
        &req.body,
    )?;
    let decision = scheduler_headers
        .0
        .get(headers::REVISION_DECISION_ID)
        .cloned();
    session_id = hints.session_id.as_ref().map(|h| h.value.clone());
    let session = session_id
        .as_deref()
        .and_then(|id| state.sessions.lookup(id, tokio::time::Instant::now()));
    // Admission (flow control, or legacy sheddable admission) before the pick; the guard
    // counts the request as pending load until it has booked its endpoint.
    let mut admission = admit(state, &client_headers, body_bytes).await?;
    // With `enableEviction`: the ticket that lets flow control evict this request.
    let ticket = admission.as_mut().and_then(|a| a.take_ticket());
    // With a program-aware band: the ticket that reports the answer's cost.
    let program = admission.as_mut().and_then(|a| a.take_program());
    // The priority the admitters read (sheddable < 0).
    let priority = crate::flow_control::priority(&client_headers, &state.objectives);
    let snapshot = state.registry.snapshot();
    let now = tokio::time::Instant::now();
    let avoid_open = |e: &pdgate_scheduler::Endpoint| state.breakers.is_open(&e.name, now);
    let started = Instant::now();
    let mut result = state
        .scheduler
        .schedule(
            &SchedulingRequest {
                profile,
                conditional,
                headers: &scheduler_headers,
                hints: (!hints.is_empty()).then_some(&hints),
                session: session.as_ref(),
                avoid: Some(&avoid_open),
                media: &media,
                priority: Some(priority),
                ..SchedulingRequest::new(rid.to_str().unwrap_or_default(), &req.model, &req.prompt)
            },
            &snapshot,
        )
        .inspect_err(|e| {
            if let Rejection::Pin { reason, .. } = e.reason {
                state
                    .metrics
                    .pin_rejections
                    .with_label_values(&[reason])
                    .inc();
            }
        })
        .map_err(|e| match e.reason {
            Rejection::UnknownProfile(_) => ApiError::InvalidHeader {
                header: headers::EPP_PROFILE,
                reason: e.reason.to_string(),
            },
            _ => ApiError::Rejected(e),
        })?;
    drop(admission);
    state
        .metrics
        .scheduling
        .observe(started.elapsed().as_secs_f64());
    let split = result.prefill.is_some() && req.can_split();
    if result.prefill.is_some() && !split {
        // Picked for a split the request cannot take (`n` > 1, an API without KV handoff, a
        // stored response): the decode pick runs it whole, and says so.
        result.decode.phase = pdgate_api::Phase::Aggregated;
    }
    // The decider wanted a split that no prefill endpoint can serve: the policy decides.
    let fallback = result.prefill_unavailable.clone();
    if let (Some(reason), PrefillFallback::Fail) = (&fallback, state.prefill_fallback) {
        forward::report_prefill_unavailable(state, "fail", reason);
        return Err(ApiError::Pipeline(PipelineError::PrefillUnavailable {
            reason: reason.clone(),
        }));
    }
    let plan = Plan {
        prefill: result
            .prefill
            .as_ref()
            .filter(|_| split)
            .map(engine_dispatch::target),
        decode: engine_dispatch::target(&result.decode),
        // A per-role router (profile header) forwards the body it got; only a router that
        // runs the whole request runs its encode step, unless the encode decider said no.
        encode: match profile {
            Some(_) => None,
            None => local_encode(state, &snapshot).filter(|_| {
                pdgate_scheduler::plugins::disagg_profile_handler::encode_decision(
                    result.decode.guard.state(),
                ) != Some(false)
            }),
        },
        conditional: false,
        prefill_fallback: state.prefill_fallback,
        kv_connector: state.kv_connector,
        encode_settings: state.encode,
        tokens_in: state.pre_steps.tokens_in_prefill,
    };
    let ctx = RequestContext::new(Some(result), split);
    let dispatcher = EngineDispatch::new(state, &ctx, &req, decision.as_ref());
    let ingress = ingress(&upstream_headers, session_id.as_deref());
    let answer = forward::forward(state, &ingress, &plan, &dispatcher, &ctx, fallback);
    let Some(ticket) = ticket else {
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
    let sse = crate::forward::is_event_stream(response.headers()).then_some(req.kind.sse_form());
    let response =
        response.map(|b| Body::new(crate::flow_eviction::EvictableBody::new(b, ticket, sse)));
    Ok(crate::flow_programs::metered(response, program))
}
