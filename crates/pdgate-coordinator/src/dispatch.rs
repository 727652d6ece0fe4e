//! The per-phase dispatch interface: one phase leg out, one response back.

use bytes::Bytes;
use http::HeaderMap;
use pdgate_api::{ApiKind, Phase};
use std::future::Future;

/// An endpoint a leg can go to: the one the scheduler picked (or a per-role router). The
/// pipeline never names one; the dispatcher resolves each leg's endpoint from its phase.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// Endpoint name (reported in served-by headers).
    pub name: String,
    /// `host:port`.
    pub address: String,
    /// Revision label of the endpoint, if any.
    pub revision: Option<String>,
    /// Data-parallel rank of the endpoint (sent to the engine as `X-data-parallel-rank`).
    pub dp_rank: Option<u32>,
}

/// One phase leg. It names its phase, not an endpoint: the dispatcher resolves the endpoint
/// (the pick it holds for the phase, or one it schedules) and the response names it.
#[derive(Debug, Clone)]
pub struct PhaseRequest {
    /// The phase this leg runs.
    pub phase: Phase,
    /// API (and so path) of the leg; same as the client's.
    pub api: ApiKind,
    /// Headers to send (already filtered by [`crate::header_rules`]).
    pub headers: HeaderMap,
    /// JSON body.
    pub body: Bytes,
}

/// The response head of a phase leg, with its body not yet read.
#[derive(Debug)]
pub struct PhaseResponse<B> {
    /// Name of the endpoint (or per-role router) that answered, for errors and logs.
    pub served: String,
    /// HTTP status.
    pub status: u16,
    /// Response headers as received.
    pub headers: HeaderMap,
    /// The body (streamed or collected, depending on `B`).
    pub body: B,
}

/// Why a leg produced no usable response. Which of these are retried, count against the
/// endpoint's breaker, and what the client gets is the server's failure rule
/// (`pdgate_server::failure`), not the coordinator's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureKind {
    /// The TCP connection could not be made (refused, unreachable, name not resolved).
    ConnectRefused,
    /// The TCP connection was not made within the connect timeout.
    ConnectTimeout,
    /// The connection failed after the request was sent, before a response head.
    Reset,
    /// A streamed leg got no response head within its head timeout.
    HeadTimeout,
    /// A non-streamed leg did not finish (head and body) within its total deadline.
    Deadline,
    /// A non-streamed leg sent its head, then its body stalled past the body timeout.
    BodyTimeout,
    /// The body failed after the head, before any byte of it reached the client.
    BodyBroken,
    /// The endpoint answered this 5xx status (after retries, when retried).
    Status(u16),
    /// The endpoint's circuit breaker is open (nothing was sent).
    BreakerOpen,
    /// A dispatcher that schedules its legs itself (retries, in-process encode picks) found
    /// no endpoint; the status is the scheduler's (503, 429, …).
    Unscheduled(u16),
}

/// A leg that produced no usable response: what failed, where, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", self.message())]
pub struct DispatchError {
    /// What failed.
    pub kind: FailureKind,
    /// Name of the endpoint (or router) tried last; empty for [`FailureKind::Unscheduled`].
    pub endpoint: String,
    /// Human-readable detail (transport error text, timeout in ms, start of an error body).
    pub detail: String,
    /// The phase could not be served by any endpoint (the failure rule retries this kind
    /// and retries were exhausted or impossible): the pipeline applies its
    /// prefill-unavailable policy to such a prefill failure.
    pub unavailable: bool,
}

impl DispatchError {
    /// A failure of `kind` on `endpoint` with `detail`; `unavailable` as the failure rule
    /// says for `kind` (set by the dispatcher).
    pub fn new(kind: FailureKind, endpoint: &str, detail: impl Into<String>) -> Self {
        DispatchError {
            kind,
            endpoint: endpoint.to_string(),
            detail: detail.into(),
            unavailable: false,
        }
    }

    /// The scheduler found no endpoint (`status` is its rejection's status).
    pub fn unscheduled(status: u16, reason: impl Into<String>) -> Self {
        DispatchError::new(FailureKind::Unscheduled(status), "", reason)
    }

    /// The same error marked as "no endpoint of the phase could serve".
    pub fn unavailable(mut self, unavailable: bool) -> Self {
        self.unavailable = unavailable;
        self
    }

    /// The error text: `upstream <endpoint> <what happened>: <detail>` (for a status:
    /// `upstream <endpoint> answered <status>: <body>`).
    pub fn message(&self) -> String {
        let what = match self.kind {
            FailureKind::Unscheduled(_) => return self.detail.clone(),
            FailureKind::Status(_) => return format!("upstream {} {}", self.endpoint, self.detail),
            FailureKind::ConnectRefused | FailureKind::Reset => "unreachable",
            FailureKind::ConnectTimeout => "connect timed out",
            FailureKind::HeadTimeout => "sent no response head in time",
            FailureKind::Deadline => "did not finish within the leg deadline",
            FailureKind::BodyTimeout => "stalled while sending its body",
            FailureKind::BodyBroken => "body failed",
            FailureKind::BreakerOpen => "skipped",
        };
        format!("upstream {} {what}: {}", self.endpoint, self.detail)
    }
}

/// Sends phase legs. The server has two implementations: dispatch to engines (the endpoint
/// the scheduler picked, retried elsewhere per the failure rule) and dispatch to per-role
/// routers (over HTTP with `x-llm-d-epp-profile` naming the leg's phase). The pipeline does
/// not know which one it talks to. A dispatcher records which endpoint served each leg
/// itself; the pipeline only orders the legs and builds their bodies and headers.
pub trait Dispatcher: Send + Sync {
    /// Streaming body type of a response.
    type Body: Send;

    /// Sends one leg and returns the response head. Errors only when no response came.
    fn dispatch(
        &self,
        req: PhaseRequest,
    ) -> impl Future<Output = Result<PhaseResponse<Self::Body>, DispatchError>> + Send;

    /// Reads a whole body (prefill responses, rejected legs). `endpoint` names the source in
    /// errors.
    fn collect(
        &self,
        endpoint: &str,
        body: Self::Body,
    ) -> impl Future<Output = Result<Bytes, DispatchError>> + Send;
}
