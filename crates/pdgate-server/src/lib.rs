//! pdgate's HTTP side: the OpenAI-compatible front, the upstream client and the two
//! [`pdgate_coordinator::Dispatcher`]s (engines, per-role routers), endpoint discovery, engine metrics scraping and the
//! router's own Prometheus metrics. Scheduling policy lives in `pdgate-scheduler`; phase
//! order and bodies in `pdgate-coordinator`.

pub mod app;
pub mod args;
pub mod body;
pub mod client_body;
pub mod coordinator_config;
pub mod ctx;
pub mod engine_dispatch;
pub mod forward;
pub mod leg_body;
pub mod leg_send;
pub mod listener;
pub mod media_urls;
pub mod phase_routers;
pub mod pre_steps;
pub mod proxy;
pub mod render_step;
pub mod resilience_args;
pub mod retry;
pub mod router_dispatch;
pub mod served;
pub mod threads;
pub mod timeouts;
pub mod upstream;

pub use pdgate_core::{
    active, body_budget, bounds, breaker, client_limits, errors, failure, flow_control,
    flow_eviction, flow_key, flow_metrics, flow_programs, header_scan, kv_feed, log_limit, metrics,
    owned_filter, plugin_metrics, prompt_tokens, request_ids, session, trust,
};

pub use app::{serve_on, AppState, ServeOptions, ServerHandle};
pub use args::{run, ServeArgs};
pub use pdgate_fleet::{EndpointRegistry, EndpointSource};
