//! The endpoint fleet that pdgate's front ends (`serve`, the HTTP proxy, and next `epp`, the
//! Envoy ext_proc endpoint picker) route over: where endpoint lists come from.
//!
//! - [`source`]: the contract of a watched source ([`source::EndpointWatcher`]) and its error.
//! - [`kube`]: Kubernetes discovery — an `InferencePool` (or a plain pod label selector) and
//!   the pods it selects, watched through kube-rs.
//!
//! The registry that turns lists into scheduler snapshots, the endpoints file and the engine
//! scrapers still live in `pdgate-server` (they move here next, issue 11 item 5).

pub mod kube;
pub mod source;
