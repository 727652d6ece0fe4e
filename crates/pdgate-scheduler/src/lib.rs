//! Pure, synchronous scheduling library of pdgate: the llm-d-compatible endpoint picker (EPP).
//!
//! - [`Scheduler::from_yaml`] loads an llm-d `EndpointPickerConfig` (same plugin names,
//!   parameters and defaults as llm-d's router) and injects llm-d's defaults.
//! - [`Scheduler::schedule`] runs the profile handler over a [`Snapshot`]: screened candidates →
//!   per-profile filters → weighted scorers → picker, booking the in-flight count at pick time.
//! - The approximate prefix index ([`prefix::PrefixIndex`]) is fed by the router's own picks;
//!   the precise one ([`prefix::PreciseIndex`]) by the engines' KV events, which the server
//!   applies ([`Scheduler::kv_event_indexes`]).
//!
//! No IO, no async, no locks held longer than one index lookup, no clock: a scheduling call's
//! time is its caller's [`SchedulingRequest::now_ms`]. See README.md for the plugins.

#![warn(missing_docs)]

mod booking;
pub mod config;
pub mod datalayer;
mod endpoint;
pub mod error;
pub mod flow;
pub mod pins;
pub mod plugin;
pub mod plugin_build;
pub mod plugin_params;
pub mod plugins;
pub mod prefix;
pub mod profile;
pub mod registry;
pub mod request;
mod request_state;
mod scheduler;
pub mod token_params;

pub use booking::Booking;
pub use endpoint::{
    monotonic_ms, Endpoint, EndpointLoad, EndpointState, InFlightGuard, LoraInfo, Snapshot,
    TokenGuard,
};
pub use error::{ConfigError, PinFault, Rejection};
pub use pins::{check_ranks, pin_for, resolve, validate, Pin, PinError, Resolved};
pub use plugin::Decision;
pub use request::{
    Pick, Rejected, RequestCtx, RequestHeaders, RequestState, SchedulingRequest, SchedulingResult,
    SessionBinding,
};
pub use scheduler::{KvEventIndex, Scheduler};

/// The built-in P/D configuration used when `serve` has no `--config`.
///
/// Like llm-d's `pd-epp-config.yaml` (prefill and decode profiles, `disagg-profile-handler`
/// with `prefix-based-pd-decider` `nonCachedTokens: 16`), with one scorer in both profiles:
/// `kv-cost-scorer` (Dynamo's KV-router cost in tokens: the prompt's uncached part and the
/// endpoint's pending prefill, plus its active tokens), so that a prefix shared by every
/// request draws traffic only while its endpoint's queue costs less than the prefill it
/// saves (issue 12, measured by `tools/load-sweep.sh`). A fleet without prefill endpoints runs
/// every request aggregated on the decode pick.
pub const DEFAULT_CONFIG_YAML: &str = include_str!("../configs/default-pd.yaml");

/// Baseline for benchmarks: P/D with `round-robin-picker` in both profiles and
/// `always-disagg-pd-decider` (every request is split when prefill endpoints exist).
pub const ROUND_ROBIN_CONFIG_YAML: &str = include_str!("../configs/round-robin-pd.yaml");
