//! Rate limits for operator log lines, the one limiter of every crate: a noisy failure logs
//! at most one line per interval per call site, so a failing fleet logs what happens without
//! flooding. Counters (Prometheus) carry the totals; the log names an example.
//!
//! - [`Site`] and [`allow`]: a `static` per call site, one line per [`INTERVAL_MS`].
//! - [`LogLimit`]: one per owner (e.g. a KV-event subscriber) with its own interval, that
//!   also says how many occurrences a line stands for.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Least time between two lines of one [`Site`], ms.
pub const INTERVAL_MS: u64 = 1_000;

/// One call site's last line (ms since the Unix epoch).
pub type Site = AtomicU64;

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// True when `site` may log now (and records that it did): at most once per
/// [`INTERVAL_MS`].
pub fn allow(site: &Site) -> bool {
    allow_every(site, INTERVAL_MS)
}

fn allow_every(site: &Site, interval_ms: u64) -> bool {
    let now = now_ms();
    let last = site.load(Ordering::Relaxed);
    now.saturating_sub(last) >= interval_ms
        && site
            .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
}

/// One kind of warning of one owner, with its own interval and a count of the occurrences
/// it did not log.
#[derive(Debug)]
pub struct LogLimit {
    interval_ms: u64,
    last: Site,
    suppressed: AtomicU64,
}

impl LogLimit {
    /// A limiter allowing one line per `interval` (rounded down to ms).
    pub const fn every(interval: Duration) -> Self {
        LogLimit {
            interval_ms: interval.as_millis() as u64,
            last: AtomicU64::new(0),
            suppressed: AtomicU64::new(0),
        }
    }

    /// `Some(n)` when a line may be logged now, `n` being the occurrences suppressed since
    /// the last line (to put in the message); `None` otherwise (counted as suppressed).
    pub fn allow(&self) -> Option<u64> {
        if allow_every(&self.last, self.interval_ms) {
            Some(self.suppressed.swap(0, Ordering::Relaxed))
        } else {
            self.suppressed.fetch_add(1, Ordering::Relaxed);
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_interval() {
        let site = AtomicU64::new(0);
        assert!(allow(&site));
        assert!(
            !allow(&site),
            "a second line within the interval is dropped"
        );
        site.store(
            site.load(Ordering::Relaxed) - INTERVAL_MS,
            Ordering::Relaxed,
        );
        assert!(allow(&site));
    }

    #[test]
    fn a_limiter_counts_what_it_suppressed() {
        let l = LogLimit::every(Duration::from_secs(10));
        assert_eq!(l.allow(), Some(0));
        assert_eq!(l.allow(), None);
        assert_eq!(l.allow(), None);
        l.last.fetch_sub(10_000, Ordering::Relaxed);
        assert_eq!(l.allow(), Some(2));
    }
}
