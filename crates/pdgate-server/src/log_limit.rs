//! Rate limits for operator log lines on the request path: at most one line per
//! [`INTERVAL_MS`] per call site, so a failing fleet logs what happens without flooding.
//! Counters (Prometheus) carry the totals; the log names an example.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// Least time between two lines of one site, ms.
pub const INTERVAL_MS: u64 = 1_000;

/// One call site's last line (ms since the Unix epoch).
pub type Site = AtomicU64;

/// Upstream leg failures.
pub static UPSTREAM_FAILURES: Site = AtomicU64::new(0);
/// Retries on another endpoint.
pub static RETRIES: Site = AtomicU64::new(0);
/// Prefill-unavailable fallbacks and refusals.
pub static PREFILL_FALLBACKS: Site = AtomicU64::new(0);
/// Streams ended by an error event.
pub static STREAM_ERRORS: Site = AtomicU64::new(0);
/// Endpoints file unreadable while watching.
pub static ENDPOINTS_FILE: Site = AtomicU64::new(0);
/// Client request ids replaced.
pub static REQUEST_IDS: Site = AtomicU64::new(0);
/// Router-owned fields removed from client bodies.
pub static CLIENT_FIELDS: Site = AtomicU64::new(0);

/// Failed accepts (descriptors exhausted, …).
pub static ACCEPT_ERRORS: Site = AtomicU64::new(0);
/// Client connections refused over the limit.
pub static CONNECTIONS_REFUSED: Site = AtomicU64::new(0);
/// Requests flow control dropped (capacity, TTL, no endpoints, shutdown).
pub static FLOW_CONTROL: Site = AtomicU64::new(0);
/// Request bodies refused by the in-flight budget, or not sent in time.
pub static BODIES_REFUSED: Site = AtomicU64::new(0);

/// Coordinator headers from untrusted callers.
pub static UNTRUSTED_HEADERS: Site = AtomicU64::new(0);

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
