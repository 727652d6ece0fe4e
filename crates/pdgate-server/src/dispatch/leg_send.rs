//! Sending one leg, shared by both dispatchers: its timeouts, the request to the target, and
//! the per-leg metrics and logs (`pdgate_phase_requests_total`, `pdgate_upstream_duration_seconds`,
//! `pdgate_upstream_failures_total`).

use crate::dispatch::leg_body::{LegBody, LegBodyError};
use crate::dispatch::timeouts::LegTimeouts;
use crate::failure;
use crate::state::AppState;
use bytes::Bytes;
use http::Method;
use http_body_util::BodyExt;
use pdgate_api::{InferenceRequest, Phase};
use pdgate_coordinator::{DispatchError, FailureKind, PhaseRequest, PhaseResponse, Target};
use std::time::Instant;

/// The bounds of a leg of `phase` for `req`: decode and aggregated legs of a streaming
/// request stream; prefill and encode legs (sent with `stream: false`) and every leg of a
/// non-streaming request answer whole.
pub fn timeouts_for(state: &AppState, req: &InferenceRequest, phase: Phase) -> LegTimeouts {
    let streamed = req.stream && matches!(phase, Phase::Decode | Phase::Aggregated);
    state.timeouts.for_leg(streamed)
}

/// Sends `leg` (POST, JSON) to `target` within `t`, and counts it. The response names
/// `target` as who served.
///
/// Errors: as [`crate::dispatch::upstream::Upstream::send`].
pub async fn send(
    state: &AppState,
    leg: &PhaseRequest,
    target: &Target,
    t: LegTimeouts,
) -> Result<PhaseResponse<LegBody>, DispatchError> {
    let started = Instant::now();
    let uri = format!("http://{}{}", target.address, leg.api.path());
    let mut headers = leg.headers.clone();
    headers.insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    let result = state
        .upstream
        .send(
            &target.name,
            Method::POST,
            uri,
            headers,
            leg.body.clone(),
            t,
            crate::dispatch::upstream::MAX_ANSWER_BYTES,
        )
        .await;
    let phase = leg.phase.as_str();
    match &result {
        Ok(r) => {
            state
                .metrics
                .count_phase(phase, status_label(r.status).as_ref());
            state
                .metrics
                .observe_upstream(phase, started.elapsed().as_secs_f64());
        }
        Err(e) => {
            state.metrics.count_phase(phase, "error");
            count_failure(state, leg.phase, &target.name, e.kind, &e.to_string());
        }
    }
    result
}

/// Counts (`pdgate_upstream_failures_total{phase, kind}`) and logs (rate-limited) one failed
/// try of a `phase` leg on `endpoint`: no usable response, or a 5xx answer (`kind` =
/// `Status`).
pub fn count_failure(
    state: &AppState,
    phase: Phase,
    endpoint: &str,
    kind: FailureKind,
    error: &str,
) {
    let (phase, kind) = (phase.as_str(), failure::kind_label(kind));
    state
        .metrics
        .upstream_failures
        .with_label_values(&[phase, kind])
        .inc();
    if crate::log_limit::allow(&crate::log_limit::UPSTREAM_FAILURES) {
        tracing::warn!(phase, endpoint, kind, error, "upstream leg failed");
    }
}

/// Reads a whole leg body (a prefill answer, an error body): immediate for a body read
/// whole, else within the streamed body's idle and total bounds.
///
/// Errors: `BodyTimeout` (stalled), `Deadline`, `BodyBroken`.
pub async fn collect(endpoint: &str, body: LegBody) -> Result<Bytes, DispatchError> {
    if !body.is_streamed() {
        return Ok(body.into_full().unwrap_or_default());
    }
    body.collect()
        .await
        .map(|c| c.to_bytes())
        .map_err(|e: LegBodyError| DispatchError::new(e.failure_kind(), endpoint, e.to_string()))
}

/// Metric label of an upstream status, without allocating for the common 200.
pub fn status_label(status: u16) -> std::borrow::Cow<'static, str> {
    match status {
        200 => "200".into(),
        other => other.to_string().into(),
    }
}
