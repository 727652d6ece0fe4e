//! `pdgate serve`, pdgate's HTTP front end, by request stage: [`ingress`] (the handler,
//! the role decided once, one planner per role), [`pre_steps`] (render, media URLs),
//! [`dispatch`] (the request context, the two [`pdgate_coordinator::Dispatcher`]s — engines
//! and per-role routers — legs, upstream client, retries, timeouts), [`respond`] (the answer
//! and relayed bodies), [`config`] (flags, the coordinator file). What it shares with `pdgate
//! epp` lives in `pdgate-core`; scheduling policy in `pdgate-scheduler`; phase order and
//! bodies in `pdgate-coordinator`.

pub mod app;
pub(crate) mod config;
pub(crate) mod dispatch;
pub(crate) mod ingress;
pub(crate) mod listener;
pub mod pre_steps;
pub(crate) mod respond;
pub mod state;

// Paths the server's assembly (app.rs, listener.rs) names at the crate root.
use config::resilience_args;
use dispatch::{retry, timeouts, upstream};
use ingress::proxy;
pub(crate) use pdgate_core::{
    active, body_budget, bounds, breaker, client_limits, errors, failure, flow_control,
    flow_eviction, flow_programs, header_scan, kv_feed, log_limit, metrics, owned_filter,
    prompt_tokens, request_ids, session, trust,
};

pub use app::{serve_on, AppState, ServeOptions, ServerHandle};
pub use config::args::{run, ServeArgs};
pub use config::coordinator_config;
pub use dispatch::phase_routers::PhaseRouters;
pub use dispatch::upstream::MAX_ANSWER_BYTES;
pub use pdgate_fleet::{EndpointRegistry, EndpointSource};
pub use pre_steps::media_urls::MediaUrlSettings;
pub use pre_steps::render_step::RenderArgs;
