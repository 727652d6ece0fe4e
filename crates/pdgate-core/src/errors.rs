//! The one place that maps failures to HTTP statuses and OpenAI error bodies (design.md §5.5).

use axum::response::{IntoResponse, Response};
use http::{HeaderValue, StatusCode};
use pdgate_api::{headers, ApiKind, ErrorBody, RequestError};
use pdgate_coordinator::PipelineError;
use pdgate_scheduler::{Rejected, Rejection};

/// Every way a request can fail inside the router.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// Unparsable or invalid body (400).
    #[error(transparent)]
    InvalidRequest(#[from] RequestError),
    /// A header the client set is invalid (400); names the header.
    #[error("header `{header}`: {reason}")]
    InvalidHeader {
        /// Header name.
        header: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// A query parameter is invalid (400); names the parameter.
    #[error("query parameter `{param}`: {reason}")]
    InvalidQuery {
        /// Parameter name.
        param: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// No route for the path (404).
    #[error("no route for {method} {path}")]
    NoRoute {
        /// Request method.
        method: String,
        /// Request path.
        path: String,
    },
    /// The path exists but not for this method (405).
    #[error("method {method} is not allowed for {path}")]
    MethodNotAllowed {
        /// Request method.
        method: String,
        /// Request path.
        path: String,
    },
    /// A coordinator step run before the legs (`render`) failed; `status` is the step's
    /// (400 for a limit, the render service's 4xx, 502, 504).
    #[error("{message}")]
    Step {
        /// The llm-d step type.
        step: &'static str,
        /// Client status.
        status: u16,
        /// What failed.
        message: String,
    },
    /// No endpoint serves the model (404).
    #[error("model `{0}` does not exist")]
    ModelNotFound(String),
    /// Body over the configured limit (413).
    #[error("request body exceeds the limit of {limit} bytes")]
    BodyTooLarge {
        /// Limit, bytes.
        limit: usize,
    },
    /// The body could not be read from the client (400).
    #[error("request body could not be read: {0}")]
    BodyRead(String),
    /// The body did not arrive within `--client-body-timeout-ms` (408).
    #[error("request body not received within {ms} ms")]
    BodyTimeout {
        /// The timeout, ms.
        ms: u128,
    },
    /// Taking the body would pass `--max-inflight-body-bytes` (429; retry later).
    #[error("request bodies in flight would exceed {limit} bytes; retry later")]
    BodyBudget {
        /// The budget, bytes.
        limit: usize,
    },
    /// A routing hint (pin, DP rank, session id) is malformed (400); names the header/field.
    #[error(transparent)]
    BadHint(#[from] pdgate_api::hints::HintError),
    /// The scheduler rejected the request (with the headers its hooks stamped).
    #[error(transparent)]
    Rejected(#[from] Rejected),
    /// A phase leg failed without an upstream response.
    #[error(transparent)]
    Pipeline(#[from] PipelineError),
    /// Admission refused the request (flow control or legacy sheddable admission): 429
    /// when capacity exists but is contended, 503 when there is none, with llm-d's
    /// `x-llm-d-request-dropped-reason`.
    #[error("{message} ({reason})")]
    Dropped {
        /// The flow-control outcome.
        outcome: pdgate_scheduler::flow::Outcome,
        /// What happened, for the error body.
        message: &'static str,
        /// The dropped-reason header value.
        reason: &'static str,
    },
    /// An upstream answered 5xx (502); names the endpoint and phase.
    #[error("{phase} endpoint {endpoint} answered {status}: {detail}")]
    UpstreamServerError {
        /// Phase of the leg.
        phase: &'static str,
        /// Endpoint name.
        endpoint: String,
        /// Upstream status.
        status: u16,
        /// Start of the upstream body.
        detail: String,
    },
}

impl ApiError {
    /// The error a flow-control outcome gives the client (see
    /// [`pdgate_scheduler::flow::Outcome::client_answer`]); `legacy` marks a sheddable request
    /// refused without the gate.
    pub fn dropped(outcome: pdgate_scheduler::flow::Outcome, legacy: bool) -> ApiError {
        use pdgate_scheduler::flow::Outcome as O;
        let message = match outcome {
            O::RejectedOther | O::EvictedOther => "flow control: shutting down",
            _ if legacy => "system saturated, sheddable request dropped",
            O::RejectedCapacity => "flow control: queue at capacity",
            O::EvictedTtl => "flow control: request timed out in queue",
            O::RejectedNoEndpoints | O::EvictedNoEndpoints => {
                "flow control: no endpoints available"
            }
            O::Dispatched | O::EvictedContextCancelled => "flow control: client disconnected",
            O::EvictedInFlight => "request evicted by flow control",
        };
        let reason = outcome
            .client_answer()
            .map_or("rejected-context-cancelled", |(_, r)| r);
        ApiError::Dropped {
            outcome,
            message,
            reason,
        }
    }

    /// The HTTP status for this error.
    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::InvalidRequest(_)
            | ApiError::InvalidHeader { .. }
            | ApiError::InvalidQuery { .. }
            | ApiError::BodyRead(_) => StatusCode::BAD_REQUEST,
            ApiError::ModelNotFound(_) | ApiError::NoRoute { .. } => StatusCode::NOT_FOUND,
            ApiError::MethodNotAllowed { .. } => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::BodyTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::BodyTimeout { .. } => StatusCode::REQUEST_TIMEOUT,
            ApiError::BodyBudget { .. } => StatusCode::TOO_MANY_REQUESTS,
            ApiError::Rejected(r) => match r.reason {
                Rejection::NoEndpoints
                | Rejection::NoEndpointForModel { .. }
                | Rejection::Screened { .. } => StatusCode::SERVICE_UNAVAILABLE,
                Rejection::Saturated { .. } | Rejection::NotAdmitted { .. } => {
                    StatusCode::TOO_MANY_REQUESTS
                }
                Rejection::UnknownProfile(_) => StatusCode::BAD_REQUEST,
                Rejection::DecodeDeferred { .. } => StatusCode::PRECONDITION_FAILED,
                Rejection::Pin { kind, .. } => match kind {
                    pdgate_scheduler::PinFault::Invalid => StatusCode::BAD_REQUEST,
                    pdgate_scheduler::PinFault::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
                },
            },
            ApiError::BadHint(_) => StatusCode::BAD_REQUEST,
            ApiError::Step { status, .. } => {
                StatusCode::from_u16(*status).unwrap_or(StatusCode::BAD_GATEWAY)
            }
            ApiError::Dropped { outcome, .. } => match outcome.client_answer() {
                Some((pdgate_scheduler::flow::DropClass::Contended, _)) => {
                    StatusCode::TOO_MANY_REQUESTS
                }
                _ => StatusCode::SERVICE_UNAVAILABLE,
            },
            // What a failed leg gets is the failure rule's (504 for timeouts, 503 for an open
            // circuit, the scheduler's status for no endpoint, else 502).
            ApiError::Pipeline(PipelineError::Dispatch { source, .. }) => {
                StatusCode::from_u16(crate::failure::client_status(source.kind))
                    .unwrap_or(StatusCode::BAD_GATEWAY)
            }
            ApiError::Pipeline(PipelineError::PrefillUnavailable { .. }) => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            ApiError::Pipeline(_) | ApiError::UpstreamServerError { .. } => StatusCode::BAD_GATEWAY,
        }
    }

    /// Label value for `pdgate_requests_total{status}`.
    pub fn status_label(&self) -> u16 {
        self.status().as_u16()
    }
}

impl ApiError {
    /// The answer for this error, as status, headers and error body: the one rule for both
    /// front ends (the HTTP proxy answers it; the ext_proc EPP sends it as an immediate
    /// response). The body is in `api`'s form ([`ErrorBody::to_bytes_for`]: Anthropic's on
    /// messages), OpenAI's when the API is not known.
    pub fn into_parts(self, api: Option<ApiKind>) -> (StatusCode, http::HeaderMap, Vec<u8>) {
        let status = self.status();
        let error = ErrorBody::new(status.as_u16(), self.to_string());
        let body = match api {
            Some(api) => error.to_bytes_for(api),
            None => error.to_bytes(),
        };
        let mut h = http::HeaderMap::new();
        h.insert(
            http::header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        if matches!(
            self,
            ApiError::BodyTooLarge { .. }
                | ApiError::BodyRead(_)
                | ApiError::BodyTimeout { .. }
                | ApiError::BodyBudget { .. }
        ) {
            // The rest of the body was not read: the connection cannot carry another request.
            h.insert(http::header::CONNECTION, HeaderValue::from_static("close"));
        }
        if let ApiError::BodyBudget { .. } = self {
            h.insert(http::header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        if let ApiError::Pipeline(PipelineError::PrefillUnavailable { reason }) = &self {
            h.insert(FALLBACK_REASON, reason_header(reason));
        }
        if let ApiError::Dropped { reason, .. } = &self {
            h.insert(
                headers::REQUEST_DROPPED_REASON,
                HeaderValue::from_static(reason),
            );
        }
        if let ApiError::Rejected(r) = &self {
            if let Rejection::Saturated { .. } = r.reason {
                if let Ok(v) = HeaderValue::from_str(&r.reason.to_string()) {
                    h.insert(headers::REQUEST_DROPPED_REASON, v);
                }
            }
            // Headers stamped by `RequestRejected` hooks (e.g. the revision chosen for a
            // conditional-decode miss, design.md §5.1).
            for (name, value) in &r.headers {
                if let (Ok(n), Ok(v)) = (
                    http::HeaderName::from_bytes(name.as_bytes()),
                    HeaderValue::from_str(value),
                ) {
                    h.append(n, v);
                }
            }
        }
        (status, h, body)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        self.into_response_for(None)
    }
}

impl ApiError {
    /// The response for this error, its body in `api`'s form (see [`Self::into_parts`]).
    pub fn into_response_for(self, api: Option<ApiKind>) -> Response {
        let (status, headers, body) = self.into_parts(api);
        let mut resp = (status, body).into_response();
        *resp.headers_mut() = headers;
        resp
    }
}

/// Response header naming why a split request ran aggregated (or failed): the
/// prefill-unavailable policy's reason.
pub const FALLBACK_REASON: &str = "x-pdgate-pd-fallback-reason";

/// Longest fallback reason put in a header, bytes.
pub const REASON_HEADER_MAX: usize = 200;

/// `reason` as a header value: visible ASCII only (anything else, control characters and
/// non-ASCII included, becomes `?`), at most [`REASON_HEADER_MAX`] bytes (then `…` as `...`).
pub fn reason_header(reason: &str) -> HeaderValue {
    let mut s: String = reason
        .chars()
        .map(|c| {
            if c == ' ' || c.is_ascii_graphic() {
                c
            } else {
                '?'
            }
        })
        .take(REASON_HEADER_MAX)
        .collect();
    if reason.chars().count() > REASON_HEADER_MAX {
        s.push_str("...");
    }
    HeaderValue::from_str(&s).unwrap_or(HeaderValue::from_static("prefill unavailable"))
}

#[cfg(test)]
#[path = "errors_tests.rs"]
mod tests;
