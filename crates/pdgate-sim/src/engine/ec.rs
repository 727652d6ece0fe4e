//! The encoder cache of an encode worker: each encoded media item waits under a lease (same
//! semantics as the KV leases: TTL, single consumer, tombstones) until a prefill pulls it
//! through `/ec/pull`. Items hold no KV blocks, so the cache has no capacity limit besides the
//! TTL.

use super::lease::{Ended, Expiring};
use super::sched::EngineState;
use super::Engine;
use crate::ec_handoff::{EcPullGrant, EcPullRequest, EcRefusal, EcRejection};
use crate::pull::Pull;
use pdgate_api::media::MediaKind;
use tokio::time::Instant;

/// One encoded item held for a prefill.
#[derive(Debug, Clone)]
pub struct EcLease {
    /// Content hash (`mm_hash`).
    pub mm_hash: String,
    /// Image, audio or video.
    pub kind: MediaKind,
    /// When the engine drops the item if nobody pulled it.
    pub expires_at: Instant,
}

impl Expiring for EcLease {
    fn expires_at(&self) -> Instant {
        self.expires_at
    }
}

impl EngineState {
    /// Stores `items` (content hash, kind) under new leases; returns their ids, in order.
    pub fn ec_store(&mut self, items: &[(String, MediaKind)], now: Instant) -> Vec<String> {
        let expires_at = now + self.cfg.ec_ttl();
        items
            .iter()
            .map(|(hash, kind)| {
                self.next_ec_lease += 1;
                let id = format!("{}-ec-{}", self.engine_id, self.next_ec_lease);
                let lease = EcLease {
                    mm_hash: hash.clone(),
                    kind: *kind,
                    expires_at,
                };
                self.ec_leases.insert(id.clone(), lease);
                id
            })
            .collect()
    }

    /// Answers a pull of one of this engine's encoder leases. Checks, in order: those of
    /// [`super::lease::Leases::check`], content hash. On success the lease ends; a refused pull
    /// leaves a live lease as it was.
    pub fn ec_pull(
        &mut self,
        req: &EcPullRequest,
        addr: &str,
        now: Instant,
    ) -> Result<EcPullGrant, EcRejection> {
        let holder = self.holder(addr);
        let lease = self.ec_leases.check(req.claim(), holder, now, drop)?;
        if req.mm_hash != lease.mm_hash {
            return Err(EcRefusal::HashMismatch {
                lease: req.lease_id.clone(),
                held: lease.mm_hash.clone(),
                asked: req.mm_hash.clone(),
            }
            .into());
        }
        let l = self
            .ec_leases
            .end(&req.lease_id, Ended::Consumed)
            .expect("lease is live");
        Ok(EcPullGrant {
            mm_hash: l.mm_hash,
            kind: l.kind,
        })
    }
}

impl Engine {
    /// Stores encoded items under encoder leases (see [`EngineState::ec_store`]) and counts
    /// them; returns the lease ids, in order.
    pub fn ec_store(&self, items: &[(String, MediaKind)]) -> Vec<String> {
        let ids = {
            let mut st = self.state.lock();
            st.counters.encode_items += items.len() as u64;
            st.ec_store(items, Instant::now())
        };
        self.metrics
            .mm_items
            .with_label_values(&["encoder"])
            .inc_by(items.len() as u64);
        // The loop recomputes its wake-up (the next expiry).
        self.notify.notify_one();
        ids
    }

    /// Answers a pull of one of this engine's encoder leases (`addr` names this worker in
    /// errors).
    pub fn ec_pull(&self, req: &EcPullRequest, addr: &str) -> Result<EcPullGrant, EcRejection> {
        self.count_pull(
            |st, now| st.ec_pull(req, addr, now),
            &self.metrics.ec_pulls,
            |c| (&mut c.ec_pulls_served, &mut c.ec_pull_rejections),
        )
    }
}
