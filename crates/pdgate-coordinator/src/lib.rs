//! The request pipeline: which phases run, the body and headers of each phase leg, and the
//! order they run in (design.md §2, §5.2, §5.3).
//!
//! The coordinator does not know whether a phase is dispatched in-process to an upstream
//! endpoint or over HTTP to another router: it talks to a [`Dispatcher`]. Phase bodies
//! ([`phase_body`]) and header rules ([`header_rules`]) are pure functions.

pub mod dispatch;
pub mod ec_connector;
pub mod encode_step;
pub mod header_rules;
pub mod json_patch;
pub mod kv_connector;
pub mod owned;
pub mod phase_body;
pub mod pipeline;

pub use dispatch::{DispatchError, Dispatcher, FailureKind, PhaseRequest, PhaseResponse, Target};
pub use ec_connector::{EcConnector, EncodeSettings};
pub use kv_connector::KvConnector;
pub use pipeline::{run, Outcome, PipelineError, Plan, PrefillFallback, Probe, Trace};
