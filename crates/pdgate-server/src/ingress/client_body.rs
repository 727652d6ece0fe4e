//! A client's request body, taken in: read under the size limit, the body timeout and the
//! in-flight budget ([`crate::body_budget`]), then parsed ([`InferenceRequest::from_bytes`],
//! off the server thread when large).

use crate::body_budget::BodyLease;
use crate::errors::ApiError;
use crate::state::AppState;
use axum::body::Body;
use bytes::Bytes;
use http::HeaderMap;
use pdgate_api::{ApiKind, InferenceRequest};

/// Reads a client body of at most `state.max_body_bytes` into one buffer, within
/// `--client-body-timeout-ms`, under a [`BodyLease`] of the in-flight budget that the caller
/// holds until the request is answered. A declared `Content-Length` is leased and sizes the
/// buffer at once (no doubling, no second copy: peak memory is the body), and a body that
/// arrives in one frame is kept as that frame (no copy at all).
///
/// Errors: [`ApiError::BodyTooLarge`] (declared or counted), [`ApiError::BodyBudget`],
/// [`ApiError::BodyTimeout`], [`ApiError::BodyRead`]; refusals and timeouts are counted and
/// logged (rate-limited).
pub(crate) async fn read(
    state: &AppState,
    body: Body,
    headers: &HeaderMap,
) -> Result<(Bytes, BodyLease), ApiError> {
    let mut lease = state.body_budget.lease();
    let timeout = state.client_limits.body_timeout;
    let read = tokio::time::timeout(
        timeout,
        read_frames(body, state.max_body_bytes, headers, &mut lease),
    );
    let result = match read.await {
        Ok(r) => r,
        Err(_) => {
            state
                .metrics
                .client_timeouts
                .with_label_values(&["body"])
                .inc();
            Err(ApiError::BodyTimeout {
                ms: timeout.as_millis(),
            })
        }
    };
    if let Err(e @ (ApiError::BodyBudget { .. } | ApiError::BodyTimeout { .. })) = &result {
        if let ApiError::BodyBudget { .. } = e {
            state.metrics.body_budget_refusals.inc();
        }
        if crate::log_limit::allow(&crate::log_limit::BODIES_REFUSED) {
            tracing::warn!(error = %e, held = state.body_budget.used(), "request body refused");
        }
    }
    result.map(|b| (b, lease))
}

async fn read_frames(
    mut body: Body,
    limit: usize,
    headers: &HeaderMap,
    lease: &mut BodyLease,
) -> Result<Bytes, ApiError> {
    use http_body_util::BodyExt;
    let declared = headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|n| n > limit) {
        return Err(ApiError::BodyTooLarge { limit });
    }
    let over = |e: crate::body_budget::OverBudget| ApiError::BodyBudget { limit: e.limit };
    if let Some(n) = declared {
        lease.cover(n).map_err(over)?;
    }
    let mut first: Option<Bytes> = None;
    let mut buf = bytes::BytesMut::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| ApiError::BodyRead(e.to_string()))?;
        let Ok(data) = frame.into_data() else {
            continue; // trailers carry nothing a request needs
        };
        let have = first.as_ref().map_or(0, Bytes::len) + buf.len();
        if have + data.len() > limit {
            return Err(ApiError::BodyTooLarge { limit });
        }
        lease.cover(have + data.len()).map_err(over)?;
        match first.take() {
            None if buf.is_empty() => first = Some(data),
            None => buf.extend_from_slice(&data),
            Some(f) => {
                buf.reserve(declared.unwrap_or(0).max(f.len() + data.len()));
                buf.extend_from_slice(&f);
                buf.extend_from_slice(&data);
            }
        }
    }
    Ok(first.unwrap_or_else(|| buf.freeze()))
}

/// Bodies from this size on are parsed on tokio's blocking pool, bytes: a 60 MB body takes
/// about 0.4 s of CPU, which must not stall the other requests of its server thread.
pub const PARSE_OFF_THREAD_BYTES: usize = 1 << 20;

/// [`InferenceRequest::from_bytes`], off the server thread for large bodies.
pub(crate) async fn parse(api: ApiKind, raw: Bytes) -> Result<InferenceRequest, ApiError> {
    if raw.len() < PARSE_OFF_THREAD_BYTES {
        return Ok(InferenceRequest::from_bytes(api, raw)?);
    }
    match tokio::task::spawn_blocking(move || InferenceRequest::from_bytes(api, raw)).await {
        Ok(parsed) => Ok(parsed?),
        // The parse does not panic (fuzzed); a cancelled runtime is shutting down anyway.
        Err(e) => Err(ApiError::BodyRead(format!(
            "body parse did not finish: {e}"
        ))),
    }
}
