//! Where decoded events go: the precise prefix index implements [`KvEventSink`].

use pdgate_api::kv_events::EventBatch;

/// Receives one publisher's batches in seq order, and is told when what it holds for an
/// endpoint can no longer be trusted. Called from the subscriber's tasks (any thread), one
/// call at a time per endpoint; calls must be quick (they run on the consumer task of that
/// endpoint's queue, so a slow sink makes only that endpoint's queue overflow).
pub trait KvEventSink: Send + Sync {
    /// Applies one batch of `endpoint` (the subscription's name). Batches arrive in seq
    /// order with no gap since the last `clear` (a replayed gap arrives in order too).
    fn apply(&self, endpoint: &str, batch: &EventBatch);
    /// Forgets everything known about `endpoint`'s cache: the next batches describe it
    /// from an unknown starting point (or it is gone).
    fn clear(&self, endpoint: &str, reason: ClearReason);
}

/// Why a sink is told to forget an endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ClearReason {
    /// The engine's seq went backwards or repeated: it restarted with an empty cache.
    Restart,
    /// Messages were missed (a seq gap, or batches dropped from a full queue) and could not
    /// be replayed.
    Gap,
    /// The connection to the publisher dropped: the engine may be gone or restarting.
    Disconnected,
    /// The endpoint left discovery (or its publish address changed).
    Unsubscribed,
}

impl ClearReason {
    /// A stable lower-case name for logs and metric labels (`restart`, `gap`,
    /// `disconnected`, `unsubscribed`).
    pub fn as_str(self) -> &'static str {
        match self {
            ClearReason::Restart => "restart",
            ClearReason::Gap => "gap",
            ClearReason::Disconnected => "disconnected",
            ClearReason::Unsubscribed => "unsubscribed",
        }
    }
}
