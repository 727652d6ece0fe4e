//! The one log limiter ([`pdgate_api::log_limit`]), re-exported for the fleet's sites.

pub use pdgate_api::log_limit::{allow, Site, INTERVAL_MS};
