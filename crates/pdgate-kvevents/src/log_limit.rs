//! Rate-limited warnings of the subscribers: the one log limiter
//! ([`pdgate_api::log_limit::LogLimit`]) at the subscribers' interval. A noisy failure (a
//! flood of undecodable messages, a full queue) logs at most once per interval, with the
//! count of occurrences it stood for.

use std::time::Duration;

pub(crate) use pdgate_api::log_limit::LogLimit;

/// How often one kind of warning may be logged per subscriber.
pub(crate) const WARN_INTERVAL: Duration = Duration::from_secs(10);

/// A limiter for one kind of warning of one subscriber ([`WARN_INTERVAL`]).
pub(crate) fn warn_limit() -> LogLimit {
    LogLimit::every(WARN_INTERVAL)
}
