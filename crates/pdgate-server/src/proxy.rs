//! The inference handlers: ingress → scheduling → pipeline → response (design.md §2).

use crate::app::AppState;
use crate::body::GuardedBody;
use crate::errors::ApiError;
use axum::body::Body;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::{HeaderMap, HeaderValue, StatusCode};
use pdgate_api::{headers, ApiKind, InferenceRequest, Phase};
use pdgate_coordinator::{header_rules, Outcome, PhaseResponse, Plan, Target};
use pdgate_scheduler::{Pick, Rejection, SchedulingRequest, SchedulingResult};
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
) -> Response {
    let mut counter = RequestCounter {
        state: &state,
        api,
        status: None,
    };
    let rid = request_id(&client_headers);
    let mut resp = match run(&state, api, client_headers, body, &rid).await {
        Ok(r) => r,
        Err(e) => {
            if !matches!(
                e,
                ApiError::InvalidRequest(_) | ApiError::BodyTooLarge { .. }
            ) {
                tracing::debug!(error = %e, "request failed");
            }
            e.into_response()
        }
    };
    // Every answer carries the request id, the router's own errors included.
    resp.headers_mut().entry(headers::REQUEST_ID).or_insert(rid);
    counter.status = Some(resp.status());
    resp
}

/// Counts the request when dropped: with its status, or 499 when the handler was cancelled.
struct RequestCounter<'a> {
    state: &'a AppState,
    api: ApiKind,
    status: Option<StatusCode>,
}

impl Drop for RequestCounter<'_> {
    fn drop(&mut self) {
        let api = match self.api {
            ApiKind::Completions => "completions",
            ApiKind::ChatCompletions => "chat_completions",
        };
        let status = self.status.as_ref().map_or("499", StatusCode::as_str);
        self.state.metrics.count_request(api, status);
    }
}

async fn read_body(body: Body, limit: usize, headers: &HeaderMap) -> Result<Bytes, ApiError> {
    let declared = headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|n| n > limit) {
        return Err(ApiError::BodyTooLarge { limit });
    }
    axum::body::to_bytes(body, limit).await.map_err(|e| {
        let mut src: Option<&(dyn std::error::Error + 'static)> = Some(&e);
        while let Some(s) = src {
            if s.is::<http_body_util::LengthLimitError>() {
                return ApiError::BodyTooLarge { limit };
            }
            src = s.source();
        }
        ApiError::BodyRead(e.to_string())
    })
}

fn target(p: &Pick) -> Target {
    let ep = &p.endpoint.endpoint;
    Target {
        name: ep.name.clone(),
        address: ep.address.clone(),
        revision: ep.revision().map(str::to_string),
    }
}

/// The scheduling profile a per-role router must run, from `x-llm-d-epp-profile` (or the
/// legacy `EPP-Profile`); `None` lets the profile handler decide (design.md §5.3).
///
/// Errors: the header is not visible ASCII → 400 naming it.
fn profile_header(h: &HeaderMap) -> Result<Option<&str>, ApiError> {
    for name in [headers::EPP_PROFILE, headers::EPP_PROFILE_LEGACY] {
        if let Some(v) = h.get(name) {
            let v = v.to_str().map_err(|_| ApiError::InvalidHeader {
                header: headers::EPP_PROFILE,
                reason: "not a visible ASCII string".into(),
            })?;
            let v = v.trim();
            if !v.is_empty() {
                return Ok(Some(v));
            }
        }
    }
    Ok(None)
}

fn request_id(client: &HeaderMap) -> HeaderValue {
    client
        .get(headers::REQUEST_ID)
        .filter(|v| !v.is_empty() && v.len() <= 256)
        .cloned()
        .unwrap_or_else(|| {
            HeaderValue::from_str(&uuid::Uuid::new_v4().to_string())
                .unwrap_or(HeaderValue::from_static("pdgate"))
        })
}

async fn run(
    state: &AppState,
    api: ApiKind,
    client_headers: HeaderMap,
    body: Body,
    rid: &HeaderValue,
) -> Result<Response, ApiError> {
    let raw = read_body(body, state.max_body_bytes, &client_headers).await?;
    let req = InferenceRequest::parse(api, &raw)?;
    if !state.model_may_exist(&req.model) {
        return Err(ApiError::ModelNotFound(req.model));
    }
    let rid = rid.clone();
    let profile = profile_header(&client_headers)?;
    let snapshot = state.registry.snapshot();
    let started = Instant::now();
    let result = state
        .scheduler
        .schedule(
            &SchedulingRequest {
                request_id: rid.to_str().unwrap_or_default(),
                model: &req.model,
                prompt: &req.prompt,
                profile,
            },
            &snapshot,
        )
        .map_err(|e| match e {
            Rejection::UnknownProfile(_) => ApiError::InvalidHeader {
                header: headers::EPP_PROFILE,
                reason: e.to_string(),
            },
            other => ApiError::Rejected(other),
        })?;
    state
        .metrics
        .scheduling
        .observe(started.elapsed().as_secs_f64());

    let split = result.prefill.is_some() && req.n == 1;
    let plan = Plan {
        prefill: result.prefill.as_ref().filter(|_| split).map(target),
        decode: target(&result.decode),
    };
    state.metrics.count_pd_decision(split);
    let upstream_headers = header_rules::upstream_request_headers(&client_headers, &rid);
    // From here on every answer names the endpoints of the plan, errors included.
    let mut resp = match forward(state, &req, &raw, &upstream_headers, &plan, result).await {
        Ok(r) => r,
        Err(e) => {
            tracing::debug!(error = %e, "request failed");
            e.into_response()
        }
    };
    stamp_served_by(resp.headers_mut(), &plan, &rid);
    Ok(resp)
}

/// Runs the pipeline for a scheduled request and builds the client response.
async fn forward(
    state: &AppState,
    req: &InferenceRequest,
    raw: &Bytes,
    upstream_headers: &HeaderMap,
    plan: &Plan,
    result: SchedulingResult,
) -> Result<Response, ApiError> {
    let split = plan.prefill.is_some();
    let leg_started = Instant::now();
    let outcome = pdgate_coordinator::run(&state.upstream, plan, req, raw, upstream_headers).await;
    // The prefill leg is over either way: release its booking now, not at end of stream.
    drop(result.prefill);
    let decode_phase = if split {
        Phase::Decode
    } else {
        Phase::Aggregated
    };
    let outcome = outcome.inspect_err(|e| {
        let phase = match e {
            pdgate_coordinator::PipelineError::Dispatch { phase, .. } => phase.as_str(),
            _ => "prefill",
        };
        state.metrics.count_phase(phase, "error");
    })?;
    let resp = match outcome {
        Outcome::PrefillRejected(r) => {
            state
                .metrics
                .count_phase("prefill", &status_label(r.status));
            let prefill = plan
                .prefill
                .as_ref()
                .map(|t| t.name.clone())
                .unwrap_or_default();
            return passthrough_error("prefill", prefill, r);
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

    if resp.status >= 500 {
        let body =
            pdgate_coordinator::Dispatcher::collect(&state.upstream, &plan.decode.name, resp.body)
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
        );
    }

    let out_headers = header_rules::client_response_headers(&resp.headers);
    let sse = resp
        .headers
        .get(http::header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"));
    let guards = vec![result.decode.guard];
    let body = GuardedBody::new(
        resp.body,
        sse,
        plan.decode.name.clone(),
        guards,
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

/// Served-by headers (design.md §5.3): which endpoint ran each phase. In aggregated mode
/// both name the decode endpoint, which ran prefill itself.
fn stamp_served_by(h: &mut HeaderMap, plan: &Plan, rid: &HeaderValue) {
    let prefill = plan.prefill.as_ref().unwrap_or(&plan.decode);
    let put = |h: &mut HeaderMap, k: &'static str, v: &str| {
        if let Ok(v) = HeaderValue::from_str(v) {
            h.insert(k, v);
        }
    };
    put(h, headers::SERVED_PREFILL_ENDPOINT, &prefill.name);
    put(h, headers::SERVED_DECODE_ENDPOINT, &plan.decode.name);
    if let Some(r) = &prefill.revision {
        put(h, headers::SERVED_PREFILL_REVISION, r);
    }
    if let Some(r) = &plan.decode.revision {
        put(h, headers::SERVED_DECODE_REVISION, r);
    }
    let mode = if plan.prefill.is_some() {
        "split"
    } else {
        "aggregated"
    };
    h.insert(headers::SERVED_MODE, HeaderValue::from_static(mode));
    h.insert(headers::REQUEST_ID, rid.clone());
}

/// An upstream's non-2xx answer: 4xx passes through as is (status and body), 5xx becomes 502
/// naming the endpoint (design.md §5.5).
fn passthrough_error(
    phase: &'static str,
    endpoint: String,
    r: PhaseResponse<Bytes>,
) -> Result<Response, ApiError> {
    if r.status >= 500 || r.status < 400 {
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
