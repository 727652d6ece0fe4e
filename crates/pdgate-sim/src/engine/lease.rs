//! Leases: the prompt blocks a prefill leg keeps referenced for one remote decode (or the
//! encoder output an encode leg keeps for one prefill, [`super::ec::EcLease`]), until it is
//! pulled (single consumer) or the TTL runs out. Ended leases leave a tombstone so that a second
//! pull is told "consumed" or "expired" rather than "unknown". [`Leases::check`] runs the checks
//! every pull of either kind starts with.

use super::cache::BlockId;
use crate::pull::{Claim, PullRejection, Refusal};
use lru::LruCache;
use std::collections::{HashMap, VecDeque};
use std::num::NonZeroUsize;
use tokio::time::Instant;

/// Tombstones kept for ended leases.
const TOMBSTONES: usize = 65_536;

/// Blocks held for a remote decode.
#[derive(Debug, Clone)]
pub struct Lease {
    /// Prompt blocks, in prompt order.
    pub blocks: Vec<BlockId>,
    /// Prompt length in tokens.
    pub prompt_tokens: usize,
    /// Fingerprint of the prompt (`cache::prompt_fingerprint`).
    pub fingerprint: u64,
    /// Prompt tokens the prefill found in its cache (not computed by it).
    pub cached_tokens: usize,
    /// When the engine releases the blocks if nobody pulled them.
    pub expires_at: Instant,
}

/// What a lease table holds: anything with an expiry.
pub trait Expiring {
    /// When the engine ends the lease if nobody pulled it.
    fn expires_at(&self) -> Instant;
}

impl Expiring for Lease {
    fn expires_at(&self) -> Instant {
        self.expires_at
    }
}

/// How a lease ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// Pulled by a decode.
    Consumed,
    /// Released by the engine at its TTL.
    Expired,
}

/// The engine answering a pull: its id and revision, and the address it was pulled at.
#[derive(Debug, Clone)]
pub struct Holder<'a> {
    /// Engine id.
    pub engine_id: String,
    /// Engine revision.
    pub revision: Option<String>,
    /// `host:port` of this worker (named in errors).
    pub addr: &'a str,
}

/// Live leases and tombstones (KV leases by default).
pub struct Leases<T = Lease> {
    live: HashMap<String, T>,
    /// Expiry order (leases share one TTL, so creation order is expiry order).
    order: VecDeque<(Instant, String)>,
    ended: LruCache<String, Ended>,
}

impl<T> Default for Leases<T> {
    fn default() -> Self {
        Leases {
            live: HashMap::new(),
            order: VecDeque::new(),
            ended: LruCache::new(NonZeroUsize::new(TOMBSTONES).expect("non-zero")),
        }
    }
}

impl<T: Expiring> Leases<T> {
    /// Live leases.
    pub fn len(&self) -> usize {
        self.live.len()
    }

    /// Adds a lease under `id`.
    pub fn insert(&mut self, id: String, lease: T) {
        self.order.push_back((lease.expires_at(), id.clone()));
        self.live.insert(id, lease);
    }

    /// The live lease `id`.
    pub fn get(&self, id: &str) -> Option<&T> {
        self.live.get(id)
    }

    /// How lease `id` ended, if it did recently.
    pub fn ended(&mut self, id: &str) -> Option<Ended> {
        self.ended.get(id).copied()
    }

    /// Removes lease `id`, leaving a tombstone; returns it so the caller releases its blocks.
    pub fn end(&mut self, id: &str, how: Ended) -> Option<T> {
        let lease = self.live.remove(id)?;
        self.ended.put(id.to_string(), how);
        Some(lease)
    }

    /// Ends every lease whose TTL ran out by `now`; returns them for release.
    pub fn expire(&mut self, now: Instant) -> Vec<T> {
        let mut out = Vec::new();
        while let Some((at, _)) = self.order.front() {
            if *at > now {
                break;
            }
            let (_, id) = self.order.pop_front().expect("front exists");
            if let Some(lease) = self.end(&id, Ended::Expired) {
                out.push(lease);
            }
        }
        out
    }

    /// When the next live lease expires.
    pub fn next_expiry(&mut self) -> Option<Instant> {
        while let Some((at, id)) = self.order.front() {
            if self.live.contains_key(id) {
                return Some(*at);
            }
            self.order.pop_front();
        }
        None
    }

    /// The live lease a pull names, after the checks every pull starts with, in order: engine
    /// id, lease (live, or how it ended), expiry, revision. A lease found expired is ended and
    /// handed to `release`; any other refusal leaves a live lease as it was.
    pub fn check<R: Refusal>(
        &mut self,
        pull: Claim<'_>,
        holder: Holder<'_>,
        now: Instant,
        release: impl FnOnce(T),
    ) -> Result<&T, PullRejection<R>> {
        let (engine, lease) = (holder.engine_id, pull.lease_id.to_string());
        if pull.engine_id != engine {
            return Err(PullRejection::UnknownEngine {
                asked: pull.engine_id.to_string(),
                addr: holder.addr.to_string(),
                actual: engine,
            });
        }
        let expires_at = match self.get(pull.lease_id) {
            Some(l) => l.expires_at(),
            None => {
                return Err(match self.ended(pull.lease_id) {
                    Some(Ended::Consumed) => PullRejection::Consumed { engine, lease },
                    Some(Ended::Expired) => PullRejection::Expired { engine, lease },
                    None => PullRejection::UnknownLease { engine, lease },
                })
            }
        };
        if expires_at <= now {
            if let Some(l) = self.end(pull.lease_id, Ended::Expired) {
                release(l);
            }
            return Err(PullRejection::Expired { engine, lease });
        }
        if *pull.revision != holder.revision {
            return Err(PullRejection::RevisionMismatch {
                engine,
                own: holder.revision,
                asked: pull.revision.clone(),
            });
        }
        Ok(self.get(pull.lease_id).expect("lease is live"))
    }
}
