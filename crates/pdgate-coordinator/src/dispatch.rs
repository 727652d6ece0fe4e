//! The per-phase dispatch interface: one phase leg out, one response back.

use bytes::Bytes;
use http::HeaderMap;
use pdgate_api::{ApiKind, Phase};
use std::future::Future;

/// Where a phase leg goes: the endpoint the scheduler picked.
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

/// One phase leg.
#[derive(Debug, Clone)]
pub struct PhaseRequest {
    /// The phase this leg runs.
    pub phase: Phase,
    /// The endpoint picked for it.
    pub target: Target,
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
    /// HTTP status.
    pub status: u16,
    /// Response headers as received.
    pub headers: HeaderMap,
    /// The body (streamed or collected, depending on `B`).
    pub body: B,
}

/// A leg that got no HTTP response.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DispatchError {
    /// Could not connect or the connection failed before a response head.
    #[error("upstream {endpoint} unreachable: {reason}")]
    Connect {
        /// Endpoint name.
        endpoint: String,
        /// Transport error text.
        reason: String,
    },
    /// No response head within the upstream timeout.
    #[error("upstream {endpoint} timed out after {timeout_ms} ms")]
    Timeout {
        /// Endpoint name.
        endpoint: String,
        /// The timeout, ms.
        timeout_ms: u64,
    },
    /// A dispatcher that schedules its legs itself (in-process encode picks) found no
    /// endpoint; `status` is the scheduler's (e.g. 503, 429) and `reason` its message.
    #[error("{reason}")]
    Unscheduled {
        /// The HTTP status the rejection maps to.
        status: u16,
        /// The scheduler's reason.
        reason: String,
    },
    /// The body failed while being read.
    #[error("upstream {endpoint} body failed: {reason}")]
    Body {
        /// Endpoint name.
        endpoint: String,
        /// Transport error text.
        reason: String,
    },
}

/// Sends phase legs. Implemented by the server for in-process dispatch to endpoints; a
/// per-role-router dispatcher (over HTTP with `x-llm-d-epp-profile`) implements the same.
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
