//! Rate limits for operator log lines: at most one line per [`INTERVAL_MS`] per call site,
//! so a failing fleet logs what happens without flooding. Counters (Prometheus) carry the
//! totals; the log names an example. Each front end declares its own sites.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// Least time between two lines of one site, ms.
pub const INTERVAL_MS: u64 = 1_000;

/// One call site's last line (ms since the Unix epoch).
pub type Site = AtomicU64;

/// True when `site` may log now (and records that it did).
pub fn allow(site: &Site) -> bool {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let last = site.load(Ordering::Relaxed);
    now.saturating_sub(last) >= INTERVAL_MS
        && site
            .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
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
}
