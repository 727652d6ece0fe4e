//! The core under both of pdgate's front ends, `pdgate serve` (HTTP, `pdgate-server`) and
//! `pdgate epp` (Envoy ext_proc, `pdgate-epp`): what must hold alike whichever front a request
//! comes through. Neither front depends on the other; both depend on this crate, so a
//! protection added here holds on both by construction.
//!
//! - the trust boundary ([`trust`]) and router-owned fields ([`owned_filter`],
//!   [`prepare`]'s cleaning of a client's body);
//! - client limits and budgets ([`client_limits`], [`body_budget`]);
//! - errors and the one status mapping ([`errors`]), the failure rule ([`failure`]);
//! - metrics ([`metrics`], [`plugin_metrics`]), rate-limited logs ([`log_limit`]);
//! - sessions ([`session`]), breakers ([`breaker`]), departures ([`bounds`]), the KV feed
//!   ([`kv_feed`]), prompt tokens ([`prompt_tokens`]), header scanning ([`header_scan`]),
//!   request ids ([`request_ids`]);
//! - flow control ([`flow_control`] and its parts);
//! - [`prepare`]: the one function that turns a parsed request and its header view into the
//!   cleaned body, hints, session, media keys, the scheduling request, the pick and the split
//!   decision.

pub mod active;
pub mod body_budget;
pub mod bounds;
pub mod breaker;
pub mod client_limits;
pub mod defaults;
pub mod errors;
pub mod failure;
pub mod flow_control;
pub mod flow_eviction;
pub mod flow_key;
pub mod flow_metrics;
pub mod flow_programs;
pub mod front;
pub mod header_scan;
pub mod intake;
pub mod kv_feed;
pub mod log_limit;
pub mod metrics;
pub mod owned_filter;
pub mod plugin_metrics;
pub mod prompt_tokens;
pub mod request_ids;
pub mod session;
pub mod sse;
pub mod startup;
pub mod trust;

/// The error type of response bodies (hyper's and axum's boxed error).
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
