//! Retry policy for one phase leg: how many tries, how long to wait between them, and which
//! failures may be retried at all.
//!
//! Capped exponential backoff with jitter (AWS Architecture Blog, "Exponential Backoff And
//! Jitter", 2015; the `[b/2, b]` range is what it calls *equal jitter*), as in Envoy's
//! `retry_policy` (`num_retries`, `base_interval` 25 ms, `max_interval` 10× base) with
//! `retry_on: connect-failure,reset,gateway-error` (502/503/504). A retry is never attempted
//! once the phase is pinned to an endpoint (another endpoint would break the pin) nor once the
//! first response byte reached the client (the client cannot un-read it; design.md §5.5).
//!
//! Which failures may be retried is the failure rule's ([`crate::failure::rule`]); this
//! module only says how often and how long to wait. The loop lives in
//! the engine dispatcher (`dispatch::engine_dispatch`).

use rand::Rng;
use std::time::Duration;

/// Default tries per phase, the first included.
pub const DEFAULT_MAX_ATTEMPTS: u32 = 3;
/// Default backoff before the first retry, 10 ms.
pub const DEFAULT_BASE_BACKOFF: Duration = Duration::from_millis(10);
/// Default cap on one backoff, 200 ms.
pub const DEFAULT_MAX_BACKOFF: Duration = Duration::from_millis(200);

/// When and how a phase leg is retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Tries per phase, the first included (0 is read as 1: no retries).
    pub max_attempts: u32,
    /// Backoff ceiling before the first retry; doubles per retry.
    pub base_backoff: Duration,
    /// Cap on the backoff ceiling.
    pub max_backoff: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            base_backoff: DEFAULT_BASE_BACKOFF,
            max_backoff: DEFAULT_MAX_BACKOFF,
        }
    }
}

impl RetryPolicy {
    /// The un-jittered backoff before retry number `attempt` (1-based; 0 is read as 1):
    /// `min(max_backoff, base_backoff · 2^(attempt−1))`, saturating.
    pub fn backoff_ceiling(&self, attempt: u32) -> Duration {
        let doubled = 1u32
            .checked_shl(attempt.max(1) - 1)
            .and_then(|f| self.base_backoff.checked_mul(f));
        doubled.map_or(self.max_backoff, |d| d.min(self.max_backoff))
    }

    /// The backoff before retry number `attempt` (1-based): uniform in
    /// `[ceiling/2, ceiling]` of [`backoff_ceiling`](Self::backoff_ceiling), from the
    /// thread-local RNG.
    pub fn backoff(&self, attempt: u32) -> Duration {
        self.backoff_with(attempt, &mut rand::rng())
    }

    /// [`backoff`](Self::backoff) with the caller's RNG (seed it for reproducible runs).
    pub fn backoff_with<R: Rng + ?Sized>(&self, attempt: u32, rng: &mut R) -> Duration {
        let hi = u64::try_from(self.backoff_ceiling(attempt).as_nanos()).unwrap_or(u64::MAX);
        Duration::from_nanos(rng.random_range(hi / 2..=hi))
    }

    /// Whether another try is allowed after `attempt` tries of this phase (1 after the first
    /// failed): never when the phase is `pinned`, never once a byte was `streamed` to the
    /// client, never when `max_attempts` tries were made. Check the failure rule separately.
    pub fn may_retry(&self, attempt: u32, pinned: bool, streamed: bool) -> bool {
        !pinned && !streamed && attempt < self.max_attempts.max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::SeedableRng;

    const MS: fn(u64) -> Duration = Duration::from_millis;

    #[test]
    fn defaults() {
        let p = RetryPolicy::default();
        assert_eq!(
            (p.max_attempts, p.base_backoff, p.max_backoff),
            (3, MS(10), MS(200))
        );
    }

    #[test]
    fn backoff_table() {
        let p = RetryPolicy::default();
        // (retry number, ceiling): 10·2^(n−1) ms capped at 200 ms.
        let table = [(1, 10), (2, 20), (3, 40), (4, 80), (5, 160), (6, 200)];
        let mut rng = StdRng::seed_from_u64(7);
        for (attempt, ceiling) in table {
            assert_eq!(p.backoff_ceiling(attempt), MS(ceiling), "attempt {attempt}");
            let (lo, hi) = (MS(ceiling) / 2, MS(ceiling));
            let (mut min, mut max) = (hi, lo);
            for _ in 0..2_000 {
                for d in [p.backoff_with(attempt, &mut rng), p.backoff(attempt)] {
                    assert!(lo <= d && d <= hi, "attempt {attempt}: {d:?}");
                    (min, max) = (min.min(d), max.max(d));
                }
            }
            // The jitter spans the range (a 4000-draw sample lands within 1% of each end).
            assert!(min < lo + (hi - lo) / 100 && max > hi - (hi - lo) / 100);
        }
    }

    #[test]
    fn backoff_edges_saturate() {
        let p = RetryPolicy::default();
        assert_eq!(p.backoff_ceiling(0), MS(10), "0 is read as the first retry");
        assert_eq!(p.backoff_ceiling(33), MS(200), "2^32 overflows u32");
        assert_eq!(p.backoff_ceiling(u32::MAX), MS(200));
        let huge = RetryPolicy {
            base_backoff: Duration::MAX,
            max_backoff: Duration::MAX,
            ..p
        };
        assert_eq!(huge.backoff_ceiling(2), Duration::MAX);
        assert!(huge.backoff(2) >= Duration::from_nanos(u64::MAX / 2));
        let zero = RetryPolicy {
            base_backoff: Duration::ZERO,
            ..p
        };
        assert_eq!(zero.backoff(3), Duration::ZERO);
    }

    #[test]
    fn may_retry_matrix() {
        let p = RetryPolicy::default();
        // (tries made, pinned, streamed) → allowed; max_attempts = 3.
        let matrix = [
            (1, false, false, true),
            (2, false, false, true),
            (3, false, false, false),
            (4, false, false, false),
            (1, true, false, false),
            (1, false, true, false),
            (1, true, true, false),
            (2, true, false, false),
            (2, false, true, false),
        ];
        for (attempt, pinned, streamed, want) in matrix {
            assert_eq!(
                p.may_retry(attempt, pinned, streamed),
                want,
                "attempt {attempt} pinned {pinned} streamed {streamed}"
            );
        }
        let once = RetryPolicy {
            max_attempts: 1,
            ..p
        };
        assert!(!once.may_retry(1, false, false));
        let zero = RetryPolicy {
            max_attempts: 0,
            ..p
        };
        assert!(!zero.may_retry(1, false, false), "0 is read as 1");
    }
}
