//! Running a planned request through the coordinator pipeline with a [`Dispatcher`] (engines
//! or per-role routers, the same code for both) and building the client response from the
//! request's [`RequestContext`]: served-by headers (design.md §5.3), the session binding,
//! the prefill-unavailable policy's trace, bookings tied to the response body.

use crate::dispatch::ctx::{RequestContext, Slot};
use crate::dispatch::leg_body::LegBody;
use crate::dispatch::leg_send;
use crate::dispatch::served::{self, Served};
use crate::errors::ApiError;
use crate::respond::body::{ResponseBody, StreamReport};
use crate::state::AppState;
use axum::body::Body;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::{HeaderMap, HeaderValue, StatusCode};
use pdgate_api::{headers, InferenceRequest, Phase};
use pdgate_coordinator::{
    header_rules, Dispatcher, Outcome, PhaseResponse, PipelineError, Plan, Trace,
};
pub use pdgate_core::errors::{reason_header, FALLBACK_REASON};
pub use pdgate_core::sse::is_event_stream;

/// One parsed client request, as the pipeline sends it.
#[derive(Clone, Copy)]
pub struct Ingress<'a> {
    /// The parsed body (its bytes as received, less any router-owned fields).
    pub req: &'a InferenceRequest,
    /// Headers for every leg (header rules applied).
    pub upstream_headers: &'a HeaderMap,
    /// `x-request-id`.
    pub rid: &'a HeaderValue,
    /// `x-session-id`, bound to the endpoints that finally served (after retries).
    pub session_id: Option<&'a str>,
    /// The caller is a coordinator sending a phase leg: the router-owned fields
    /// ([`pdgate_coordinator::owned`]) of its body and of the answer are its contract and
    /// stay. For a client they were removed from the body and are removed from the answer.
    pub coordinator: bool,
}

/// Runs `plan` through `dispatcher` and answers the client. `ctx` holds the local picks
/// (none behind per-role routers) and receives what every leg served; the main phase's
/// booking ends with the response body. `fallback` is a reason known before any leg ran (the
/// scheduler found no prefill endpoint): the request is already planned aggregated. Every
/// answer, errors included, names the endpoints known to have served each phase and carries
/// the request id.
pub async fn forward<D: Dispatcher<Body = LegBody>>(
    state: &AppState,
    ingress: &Ingress<'_>,
    plan: &Plan,
    dispatcher: &D,
    ctx: &RequestContext,
    fallback: Option<String>,
) -> Response {
    let Ingress {
        req,
        upstream_headers,
        rid,
        session_id,
        coordinator,
    } = *ingress;
    let mut trace = Trace {
        fallback,
        ..Trace::default()
    };
    let outcome = pdgate_coordinator::run(
        dispatcher,
        plan,
        req,
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
    report_fallback(state, &trace, &outcome);
    // The prefill leg is over either way: release its booking now, not at end of stream.
    ctx.finish_prefill();
    let served = Served::of(ctx, &trace);
    let ok = matches!(&outcome, Ok(Outcome::Final(r)) if (200..300).contains(&r.status));
    if ok {
        if trace.prefill_ran || served::main_phase(ctx, &trace) == Some(Phase::Aggregated) {
            state.metrics.count_pd_decision(trace.prefill_ran);
        }
        if let Some(id) = session_id {
            bind_session(state, ctx, id, trace.prefill_ran);
        }
    }
    let mut resp = match respond(state, ctx, outcome, !coordinator, req.kind.sse_form()).await {
        Ok(r) => r,
        Err(e) => {
            tracing::debug!(error = %e, "request failed");
            e.into_response_for(Some(req.kind))
        }
    };
    served.stamp(resp.headers_mut());
    if let Some(reason) = &trace.fallback {
        resp.headers_mut()
            .insert(FALLBACK_REASON, reason_header(reason));
    }
    resp.headers_mut().insert(headers::REQUEST_ID, rid.clone());
    resp
}

/// Counts and logs the prefill-unavailable policy when it applied.
fn report_fallback<B>(
    state: &AppState,
    trace: &Trace,
    outcome: &Result<Outcome<B>, PipelineError>,
) {
    match (&trace.fallback, outcome) {
        (Some(reason), _) => report_prefill_unavailable(state, "aggregated", reason),
        (None, Err(PipelineError::PrefillUnavailable { reason })) => {
            report_prefill_unavailable(state, "fail", reason)
        }
        _ => {}
    }
}

/// Counts (`pdgate_prefill_fallbacks_total{policy}`) and logs (rate-limited) one request
/// whose prefill phase was unavailable, under `policy` (`aggregated` or `fail`).
pub fn report_prefill_unavailable(state: &AppState, policy: &'static str, reason: &str) {
    state
        .metrics
        .prefill_fallbacks
        .with_label_values(&[policy])
        .inc();
    if crate::log_limit::allow(&crate::log_limit::PREFILL_FALLBACKS) {
        tracing::warn!(policy, reason, "prefill unavailable");
    }
}

/// Binds `id` to the endpoints that served (a retry may have moved a phase).
fn bind_session(state: &AppState, ctx: &RequestContext, id: &str, split: bool) {
    let main = ctx.served_name(Slot::Main);
    let (prefill, decode) = match ctx.phase(Slot::Main) {
        Some(Phase::Prefill) => (main, None),
        _ => (
            split.then(|| ctx.served_name(Slot::Prefill)).flatten(),
            main,
        ),
    };
    state
        .sessions
        .bind_names(id, prefill, decode, tokio::time::Instant::now());
}

/// The client response of the final phase. `strip_owned`: the engines' router-owned fields
/// leave every body the client gets (whole JSON answers, SSE `data:` lines, error bodies).
/// `form`: the API's stream framing, for the error event that ends a broken stream.
async fn respond(
    state: &AppState,
    ctx: &RequestContext,
    outcome: Result<Outcome<LegBody>, PipelineError>,
    strip_owned: bool,
    form: pdgate_api::SseForm,
) -> Result<Response, ApiError> {
    let clean = |b: Bytes| match strip_owned {
        true => pdgate_coordinator::owned::strip_json(&b).map_or(b, Bytes::from),
        false => b,
    };
    let mut resp = match outcome? {
        Outcome::Rejected { mut response, .. } => {
            response.body = clean(response.body);
            return Ok(passthrough(response));
        }
        Outcome::Final(r) => r,
    };
    if !(200..300).contains(&resp.status) {
        // An engine's 4xx, or a router's own answer: status and body as they are.
        let body = leg_send::collect(&resp.served, resp.body)
            .await
            .map_err(|source| PipelineError::Dispatch {
                phase: Phase::Decode,
                source,
            })?;
        return Ok(passthrough(PhaseResponse {
            served: resp.served,
            status: resp.status,
            headers: resp.headers,
            body: clean(body),
        }));
    }
    let endpoint = ctx.served_name(Slot::Main).unwrap_or_default();
    if strip_owned && !resp.body.is_streamed() {
        resp.body = LegBody::full(clean(resp.body.into_full().unwrap_or_default()));
    }
    let out_headers = header_rules::client_response_headers(&resp.headers);
    let sse = is_event_stream(&resp.headers).then_some(form);
    let bookings = ctx.take_main_pick().map(|p| p.guard).into_iter().collect();
    let report = StreamReport {
        metrics: state.metrics.clone(),
        breakers: state.breakers.clone(),
    };
    let mut body = ResponseBody::new(resp.body, sse, endpoint, bookings, Some(report));
    if strip_owned {
        body = body.without_owned_fields();
    }
    let mut response = Response::new(Body::new(body));
    *response.status_mut() = StatusCode::from_u16(resp.status).unwrap_or(StatusCode::BAD_GATEWAY);
    *response.headers_mut() = out_headers;
    Ok(response)
}

/// An upstream's non-2xx answer passed to the client as is (an engine's 4xx — the client's
/// mistake — or a per-role router's own mapped status, e.g. a 503 with its reason).
fn passthrough(r: PhaseResponse<Bytes>) -> Response {
    let mut headers = header_rules::client_response_headers(&r.headers);
    headers.insert(
        http::header::CONTENT_LENGTH,
        HeaderValue::from(r.body.len()),
    );
    let status = StatusCode::from_u16(r.status).unwrap_or(StatusCode::BAD_GATEWAY);
    (status, headers, r.body).into_response()
}
