//! The endpoint fleet that pdgate's front ends (`serve`, the HTTP proxy, and `epp`, the
//! Envoy ext_proc endpoint picker) route over. It depends on neither front end.
//!
//! - [`discovery`]: where endpoint lists come from (flags, the endpoints file, Kubernetes, any
//!   [`source::EndpointWatcher`]) and [`discovery::start`], which applies them.
//! - [`registry`]: the [`registry::EndpointRegistry`] — the current scheduler snapshot (with
//!   endpoints whose `/metrics` goes unanswered out of the candidates) and the per-endpoint
//!   load cells that outlive snapshots (bookings, scraped gauges, models).
//! - [`endpoints_file`]: the endpoints file and `--endpoint` flag formats and their checks.
//! - [`kube`]: Kubernetes discovery — an `InferencePool` (or a plain pod label selector) and
//!   the pods it selects, watched through kube-rs.
//! - [`scrape`]: engine `/metrics` and `/v1/models` scraping into the load cells; front ends
//!   observe failures and restarts through [`scrape::ScrapeObserver`].
//! - [`file_read`], [`log_limit`]: bounded reads of operator files, rate-limited log lines.

pub mod args;
pub mod discovery;
pub mod endpoints_file;
pub mod file_read;
pub mod kube;
pub mod log_limit;
pub mod registry;
pub mod scrape;
pub mod source;

pub use discovery::EndpointSource;
pub use registry::EndpointRegistry;
