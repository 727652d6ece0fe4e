//! The request path's log sites (rate-limited by [`pdgate_fleet::log_limit`]: at most one
//! line per [`INTERVAL_MS`] per site).

pub use pdgate_fleet::log_limit::{allow, Site, INTERVAL_MS};
use std::sync::atomic::AtomicU64;

/// Upstream leg failures.
pub static UPSTREAM_FAILURES: Site = AtomicU64::new(0);
/// Retries on another endpoint.
pub static RETRIES: Site = AtomicU64::new(0);
/// Prefill-unavailable fallbacks and refusals.
pub static PREFILL_FALLBACKS: Site = AtomicU64::new(0);
/// Streams ended by an error event.
pub static STREAM_ERRORS: Site = AtomicU64::new(0);
/// Client request ids replaced.
pub static REQUEST_IDS: Site = AtomicU64::new(0);
/// Router-owned fields removed from client bodies.
pub static CLIENT_FIELDS: Site = AtomicU64::new(0);

/// Failed accepts (descriptors exhausted, …).
pub static ACCEPT_ERRORS: Site = AtomicU64::new(0);
/// Client connections refused over the limit.
pub static CONNECTIONS_REFUSED: Site = AtomicU64::new(0);
/// Requests flow control dropped (capacity, TTL, no endpoints, shutdown).
pub static FLOW_CONTROL: Site = AtomicU64::new(0);
/// Request bodies refused by the in-flight budget, or not sent in time.
pub static BODIES_REFUSED: Site = AtomicU64::new(0);

/// Coordinator headers from untrusted callers.
pub static UNTRUSTED_HEADERS: Site = AtomicU64::new(0);

/// Prompts the token-producer left at the byte estimate.
pub static TOKENIZATION_FALLBACKS: Site = AtomicU64::new(0);
