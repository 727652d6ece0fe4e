//! pdgate's HTTP side: the OpenAI-compatible front, the upstream client (the in-process
//! [`pdgate_coordinator::Dispatcher`]), endpoint discovery, engine metrics scraping and the
//! router's own Prometheus metrics. Scheduling policy lives in `pdgate-scheduler`; phase
//! order and bodies in `pdgate-coordinator`.

pub mod app;
pub mod args;
pub mod body;
pub mod bounds;
pub mod breaker;
pub mod discovery;
pub mod errors;
pub mod forward;
pub mod local_dispatch;
pub mod metrics;
pub mod plugin_metrics;
pub mod proxy;
pub mod retry;
pub mod scrape;
pub mod served;
pub mod session;
pub mod threads;
pub mod upstream;

pub use app::{serve_on, AppState, ServeOptions, ServerHandle};
pub use args::{run, ServeArgs};
pub use discovery::{EndpointRegistry, EndpointSource};
