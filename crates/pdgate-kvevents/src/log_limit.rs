//! Rate-limited warnings: a noisy failure (a flood of undecodable messages, a full queue)
//! logs at most once per interval, with the count of occurrences it stood for.

use std::time::{Duration, Instant};

/// How often one kind of warning may be logged per subscriber.
pub(crate) const WARN_INTERVAL: Duration = Duration::from_secs(10);

/// Tracks one kind of warning.
#[derive(Debug, Default)]
pub(crate) struct LogLimit {
    last: Option<Instant>,
    suppressed: u64,
}

impl LogLimit {
    /// Whether to log now; if so, also how many occurrences since the last log were
    /// suppressed (to put in the message).
    pub(crate) fn allow(&mut self) -> Option<u64> {
        let now = Instant::now();
        if self
            .last
            .is_some_and(|t| now.duration_since(t) < WARN_INTERVAL)
        {
            self.suppressed += 1;
            return None;
        }
        self.last = Some(now);
        Some(std::mem::take(&mut self.suppressed))
    }
}
