//! Running a planned request through the coordinator pipeline and building the client
//! response: upstream statuses mapped (design.md §5.5), served-by headers stamped (§5.3),
//! bookings tied to the response body.

use crate::app::AppState;
use crate::body::GuardedBody;
use crate::errors::ApiError;
use crate::local_dispatch::LocalDispatch;
use crate::served::Served;
use axum::body::Body;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::{HeaderMap, HeaderValue, StatusCode};
use hyper::body::Incoming;
use pdgate_api::{headers, InferenceRequest, Phase};
use pdgate_coordinator::{
    header_rules, Dispatcher, Outcome, PhaseResponse, PipelineError, Plan, Trace,
};
use pdgate_scheduler::{Pick, SchedulingResult};
use std::time::Instant;

/// One parsed client request, as the pipeline sends it.
#[derive(Clone, Copy)]
pub struct Ingress<'a> {
    /// The parsed body.
    pub req: &'a InferenceRequest,
    /// The body as received.
    pub raw: &'a Bytes,
    /// Headers for every leg (header rules applied).
    pub upstream_headers: &'a HeaderMap,
    /// `x-request-id`.
    pub rid: &'a HeaderValue,
    /// `x-session-id`, bound to the endpoints that finally served (after retries).
    pub session_id: Option<&'a str>,
}

/// Runs `plan` and answers the client. `result` holds the local picks (`None` when the plan
/// names per-role routers); their bookings end with the response body. Every answer, errors
/// included, names the endpoints known to have served each phase and carries `rid`.
pub async fn forward(
    state: &AppState,
    ingress: &Ingress<'_>,
    plan: &Plan,
    result: Option<SchedulingResult>,
    decision_id: Option<&HeaderValue>,
) -> Response {
    let Ingress {
        req,
        raw,
        upstream_headers,
        rid,
        session_id,
    } = *ingress;
    let mut trace = Trace::default();
    let leg_started = Instant::now();
    let dispatcher = LocalDispatch::new(state, result.as_ref(), req, plan.routed, decision_id);
    let outcome = pdgate_coordinator::run(
        &dispatcher,
        plan,
        req,
        raw,
        upstream_headers,
        &state.forward_rules,
        &mut trace,
    )
    .await;
    if let Some(p) = trace.probe {
        state
            .metrics
            .conditional_decode
            .with_label_values(&[p.as_str()])
            .inc();
    }
    // Retried phases ran on other endpoints than planned: report and book those.
    let mut plan_served = plan.clone();
    for (phase, t) in dispatcher.replaced_targets() {
        match phase {
            Phase::Prefill => plan_served.prefill = Some(t),
            _ => plan_served.decode = t,
        }
    }
    let served = Served::of(&plan_served, result.as_ref(), &trace);
    let served_ok = matches!(&outcome, Ok(Outcome::Final(r)) if (200..300).contains(&r.status));
    if let (Some(id), Some(r), true) = (session_id, &result, served_ok) {
        // Bind the session to the endpoints that served (a retry may have moved a phase).
        let prefill = trace
            .prefill_headers
            .as_ref()
            .and(plan_served.prefill.as_ref())
            .map(|t| t.name.clone());
        let decode = (r.decode.phase != Phase::Prefill).then(|| plan_served.decode.name.clone());
        state
            .sessions
            .bind_names(id, prefill, decode, tokio::time::Instant::now());
    }
    let prefill_ran = trace.prefill_headers.is_some();
    // The phase the last leg ran, for metrics: a header-selected profile's own phase in a
    // per-role router; behind routers, decode only after a prefill leg.
    let last_phase = match &result {
        _ if prefill_ran => Phase::Decode,
        Some(r) if plan.prefill.is_none() => r.decode.phase,
        _ => Phase::Aggregated,
    };
    if plan.routed && outcome.is_ok() {
        state.metrics.count_pd_decision(prefill_ran);
    }
    // The prefill leg is over either way: release its booking now, not at end of stream.
    let prefill_done = trace.prefill_headers.is_some();
    let prefill_replacement = dispatcher.take_replacement(Phase::Prefill);
    let decode_replacement = dispatcher
        .take_replacement(Phase::Decode)
        .or_else(|| dispatcher.take_replacement(Phase::Aggregated));
    drop(dispatcher);
    // The prefill booking that served completes; one that failed over does not.
    let prefill_retried = prefill_replacement.is_some();
    if let Some(mut p) = prefill_replacement.filter(|_| prefill_done) {
        p.guard.complete();
    }
    let decode_pick = result.map(|mut r| {
        if let Some(p) = r
            .prefill
            .as_mut()
            .filter(|_| prefill_done && !prefill_retried)
        {
            p.guard.complete();
        }
        decode_replacement.unwrap_or(r.decode)
    });
    let mut resp = respond(
        state,
        &plan_served,
        outcome,
        decode_pick,
        leg_started,
        last_phase,
    )
    .await
    .unwrap_or_else(|e| {
        tracing::debug!(error = %e, "request failed");
        e.into_response()
    });
    served.stamp(resp.headers_mut());
    resp.headers_mut().insert(headers::REQUEST_ID, rid.clone());
    resp
}

async fn respond(
    state: &AppState,
    plan: &Plan,
    outcome: Result<Outcome<Incoming>, PipelineError>,
    decode_pick: Option<Pick>,
    leg_started: Instant,
    decode_phase: Phase,
) -> Result<Response, ApiError> {
    let split = decode_phase == Phase::Decode && plan.prefill.is_some();
    let outcome = outcome.inspect_err(|e| {
        let phase = match e {
            PipelineError::Dispatch { phase, .. } => phase.as_str(),
            PipelineError::BadEncodeResponse { .. } => "encode",
            PipelineError::BadPrefillResponse { .. } => "prefill",
        };
        state.metrics.count_phase(phase, "error");
    })?;
    let resp = match outcome {
        Outcome::Rejected {
            phase,
            target,
            response,
        } => {
            state
                .metrics
                .count_phase(phase.as_str(), &status_label(response.status));
            return passthrough_error(phase.as_str(), target, response, plan.routed);
        }
        Outcome::Final(r) => r,
    };
    if split {
        state.metrics.count_phase("prefill", "200");
    }
    state
        .metrics
        .count_phase(decode_phase.as_str(), &status_label(resp.status));
    state
        .metrics
        .observe_upstream(decode_phase.as_str(), leg_started.elapsed().as_secs_f64());

    if resp.status >= 500 || (plan.routed && resp.status >= 400) {
        let body = state
            .upstream
            .collect(&plan.decode.name, resp.body)
            .await
            .unwrap_or_default();
        return passthrough_error(
            decode_phase.as_str(),
            plan.decode.name.clone(),
            PhaseResponse {
                status: resp.status,
                headers: resp.headers,
                body,
            },
            plan.routed,
        );
    }

    let out_headers = header_rules::client_response_headers(&resp.headers);
    let sse = resp
        .headers
        .get(http::header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"));
    let bookings = decode_pick.map(|p| p.guard).into_iter().collect();
    let body = GuardedBody::new(
        resp.body,
        sse,
        plan.decode.name.clone(),
        bookings,
        Some(state.metrics.stream_errors.clone()),
    );
    let mut response = Response::new(Body::new(body));
    *response.status_mut() = StatusCode::from_u16(resp.status).unwrap_or(StatusCode::BAD_GATEWAY);
    *response.headers_mut() = out_headers;
    Ok(response)
}

/// Metric label of an upstream status, without allocating for the common 200.
fn status_label(status: u16) -> std::borrow::Cow<'static, str> {
    match status {
        200 => "200".into(),
        other => other.to_string().into(),
    }
}

/// An upstream's non-2xx answer. From an engine, 4xx passes through as is (status and body)
/// and 5xx becomes 502 naming the endpoint (design.md §5.5). From a per-role router
/// (`routed`), every status passes through: the router already mapped it (e.g. a 503 with
/// its reason).
fn passthrough_error(
    phase: &'static str,
    endpoint: String,
    r: PhaseResponse<Bytes>,
    routed: bool,
) -> Result<Response, ApiError> {
    if !routed && (r.status >= 500 || r.status < 400) {
        let detail = String::from_utf8_lossy(&r.body[..r.body.len().min(300)]).into_owned();
        return Err(ApiError::UpstreamServerError {
            phase,
            endpoint,
            status: r.status,
            detail,
        });
    }
    let mut headers = header_rules::client_response_headers(&r.headers);
    headers.insert(
        http::header::CONTENT_LENGTH,
        HeaderValue::from(r.body.len()),
    );
    let status = StatusCode::from_u16(r.status).unwrap_or(StatusCode::BAD_GATEWAY);
    Ok((status, headers, r.body).into_response())
}
