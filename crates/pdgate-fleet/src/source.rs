//! The contract of a source of endpoint lists that change over time (the endpoints file, a
//! Kubernetes pool): whoever applies them (the server's registry) sees whole lists.

use futures_util::future::BoxFuture;
use pdgate_scheduler::Endpoint;

/// An endpoint list that cannot be used; names the file, entry and field (or the pool).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{source_name}: {message}")]
pub struct DiscoveryError {
    /// File path, `--endpoint`, or `namespace/pool`.
    pub source_name: String,
    /// What is wrong.
    pub message: String,
}

/// A source of endpoint lists that change over time. The applier takes each list it yields
/// whole (endpoints absent from it are gone).
pub trait EndpointWatcher: Send + 'static {
    /// The source's name in errors and logs (a path, `namespace/pool`).
    fn name(&self) -> String;

    /// Waits for the next endpoint list and returns it: the first call returns the current
    /// list as soon as it is known (for Kubernetes: after the first full list); later calls
    /// return when the list changed. `None` ends the watch. `Some(Err(_))` reports a list
    /// that cannot be used; the previous one stays applied.
    fn next(&mut self) -> BoxFuture<'_, Option<Result<Vec<Endpoint>, DiscoveryError>>>;
}

impl std::fmt::Debug for dyn EndpointWatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "EndpointWatcher({})", self.name())
    }
}
