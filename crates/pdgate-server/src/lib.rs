//! pdgate's HTTP side: the OpenAI-compatible front, the upstream client and the two
//! [`pdgate_coordinator::Dispatcher`]s (engines, per-role routers), endpoint discovery, engine metrics scraping and the
//! router's own Prometheus metrics. Scheduling policy lives in `pdgate-scheduler`; phase
//! order and bodies in `pdgate-coordinator`.

pub mod active;
pub mod app;
pub mod args;
pub mod body;
pub mod body_budget;
pub mod bounds;
pub mod breaker;
pub mod client_body;
pub mod client_limits;
pub mod coordinator_config;
pub mod ctx;
pub mod engine_dispatch;
pub mod errors;
pub mod failure;
pub mod flow_control;
pub mod flow_eviction;
pub mod flow_key;
pub mod flow_metrics;
pub mod flow_programs;
pub mod forward;
pub mod header_scan;
pub mod kv_feed;
pub mod leg_body;
pub mod leg_send;
pub mod listener;
pub mod log_limit;
pub mod media_urls;
pub mod metrics;
pub mod owned_filter;
pub mod phase_routers;
pub mod plugin_metrics;
pub mod pre_steps;
pub mod prompt_tokens;
pub mod proxy;
pub mod render_step;
pub mod request_ids;
pub mod resilience_args;
pub mod retry;
pub mod router_dispatch;
pub mod served;
pub mod session;
pub mod threads;
pub mod timeouts;
pub mod trust;
pub mod upstream;

pub use app::{serve_on, AppState, ServeOptions, ServerHandle};
pub use args::{run, ServeArgs};
pub use pdgate_fleet::{EndpointRegistry, EndpointSource};
