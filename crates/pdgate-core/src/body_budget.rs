//! Bytes of client request bodies held at once, over the whole process (issue 10): a few
//! huge bodies must be refused rather than take the memory every other request needs.
//!
//! A request takes a [`BodyLease`] for its body as it is read (its declared `Content-Length`
//! at once, else as frames arrive) and holds it until the request is answered: the lease
//! gives the bytes back on drop, whatever the outcome. A body that would pass
//! [`ClientLimits::max_inflight_body_bytes`](crate::client_limits::ClientLimits) is refused
//! (429), unless it is at most [`SMALL_BODY_BYTES`]: small requests always pass, so normal
//! traffic goes on while large ones are shed.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Bodies up to this size are never refused by the budget (they still count), bytes.
pub const SMALL_BODY_BYTES: usize = 64 << 10;

/// The shared budget.
#[derive(Debug)]
pub struct BodyBudget {
    limit: usize,
    used: AtomicUsize,
}

/// Bytes of one request's body, given back on drop.
#[derive(Debug)]
pub struct BodyLease {
    budget: Arc<BodyBudget>,
    bytes: usize,
}

/// The budget has no room for a body of this size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OverBudget {
    /// The budget, bytes.
    pub limit: usize,
}

impl BodyBudget {
    /// A budget of `limit` bytes.
    pub fn new(limit: usize) -> Arc<Self> {
        Arc::new(BodyBudget {
            limit,
            used: AtomicUsize::new(0),
        })
    }

    /// Bytes held now.
    pub fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    /// An empty lease, to grow as the body arrives.
    pub fn lease(self: &Arc<Self>) -> BodyLease {
        BodyLease {
            budget: self.clone(),
            bytes: 0,
        }
    }
}

impl BodyLease {
    /// Makes the lease cover `total` bytes (a no-op when it already does).
    ///
    /// Errors: [`OverBudget`] when `total` is over [`SMALL_BODY_BYTES`] and the budget cannot
    /// take the difference; the lease is then unchanged.
    pub fn cover(&mut self, total: usize) -> Result<(), OverBudget> {
        if total <= self.bytes {
            return Ok(());
        }
        let more = total - self.bytes;
        let b = &self.budget;
        let small = total <= SMALL_BODY_BYTES;
        let mut used = b.used.load(Ordering::Relaxed);
        loop {
            let next = used.saturating_add(more);
            if next > b.limit && !small {
                return Err(OverBudget { limit: b.limit });
            }
            match b
                .used
                .compare_exchange_weak(used, next, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => break,
                Err(now) => used = now,
            }
        }
        self.bytes = total;
        Ok(())
    }

    /// Bytes this lease holds.
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

impl Drop for BodyLease {
    fn drop(&mut self) {
        self.budget.used.fetch_sub(self.bytes, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_bodies_share_the_budget_and_small_ones_always_pass() {
        let b = BodyBudget::new(1 << 20);
        let mut a = b.lease();
        a.cover(600 << 10).unwrap();
        let mut c = b.lease();
        assert_eq!(c.cover(500 << 10), Err(OverBudget { limit: 1 << 20 }));
        assert_eq!((c.bytes(), b.used()), (0, 600 << 10));
        c.cover(400 << 10).unwrap();
        // Over the budget now, but small.
        let mut s = b.lease();
        s.cover(SMALL_BODY_BYTES).unwrap();
        assert_eq!(b.used(), (1000 << 10) + SMALL_BODY_BYTES);
        // Growing a lease counts only the difference.
        a.cover(600 << 10).unwrap();
        assert!(a.cover(700 << 10).is_err());
        drop((a, c, s));
        assert_eq!(b.used(), 0);
    }

    #[test]
    fn the_default_budget_refuses_the_sixth_concurrent_60_mb_body() {
        use crate::client_limits::{
            BODY_MEMORY_BOUND, BODY_MEMORY_PER_BYTE, DEFAULT_MAX_INFLIGHT_BODY_BYTES,
        };
        // Issue 26: six 60 MB bodies at once reached 1.08 GB with none refused.
        let b = BodyBudget::new(DEFAULT_MAX_INFLIGHT_BODY_BYTES);
        let body = 60_000_000;
        let mut held = Vec::new();
        let mut refused = 0;
        for _ in 0..6 {
            let mut l = b.lease();
            match l.cover(body) {
                Ok(()) => held.push(l),
                Err(_) => refused += 1,
            }
        }
        assert_eq!((held.len(), refused), (5, 1));
        // What is admitted stays under the stated memory bound.
        assert!(b.used() * BODY_MEMORY_PER_BYTE <= BODY_MEMORY_BOUND);
        assert_eq!(DEFAULT_MAX_INFLIGHT_BODY_BYTES, 357_913_941);
    }
}
