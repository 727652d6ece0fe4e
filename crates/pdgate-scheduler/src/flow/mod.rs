//! Flow control: llm-d's EPP admission layer, pure and sync (the async controller that
//! waits on it is `pdgate_server::flow_control`).
//!
//! A request gets a flow key — priority from its InferenceObjective (header
//! `x-llm-d-inference-objective`, alias `x-gateway-inference-objective`; unknown → 0) and a
//! fairness id (`x-llm-d-inference-fairness-id`, default `default-flow`). With the
//! `flowControl` feature gate on, every request enters its priority band's queue and is
//! dispatched to scheduling when the pool's saturation (a [`SaturationDetector`]) is below the
//! usage-limit ceiling: bands in strict priority order, flows within a band by the band's
//! fairness policy, items within a flow by its ordering policy ([`queues::Queues`]).
//! Without the gate, only sheddable requests (priority < 0) are checked: rejected when the
//! pool is saturated (llm-d's legacy admission).
//!
//! Sources: llm-d-router `pkg/epp/flowcontrol` (controller, registry, processor),
//! `pkg/epp/framework/plugins/flowcontrol` (detectors, fairness, ordering, usage limits),
//! `requestcontrol/admission.go` (outcome → status mapping).

pub mod config;
mod config_raw;
pub mod detector;
pub mod duration;
mod effective;
pub mod eviction;
pub mod plugins;
pub mod policy;
pub mod priority_holdback;
pub mod program_aware;
pub mod quantity;
pub mod queues;
pub mod saturation;
pub mod settings;
pub mod soft_reflective_ceiling;
pub mod usage_limit;

pub use config::FEATURE_GATE;
pub use policy::sheddable;
pub use queues::{Item, Queues, Refusal};
pub use saturation::{SaturationDetector, Stages};
pub use settings::{BandConfig, FlowControlConfig, FlowSettings};

/// Fairness id of a request that names none (llm-d's `default-flow`).
pub const DEFAULT_FLOW: &str = "default-flow";

/// A queued request's fate, as llm-d names it (`flowcontrol/types/outcomes.go`; the
/// `outcome` label of the flow-control metrics).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// Left the queue for scheduling.
    Dispatched,
    /// Refused at enqueue: a global or band limit (`maxRequests`/`maxBytes`) was reached.
    RejectedCapacity,
    /// Refused at enqueue: the pool has no endpoints.
    RejectedNoEndpoints,
    /// Refused: the controller is shutting down.
    RejectedOther,
    /// Waited longer than `defaultRequestTTL` while the pool had endpoints.
    EvictedTtl,
    /// Waited longer than `noEndpointRequestTTL` while the pool had none.
    EvictedNoEndpoints,
    /// The client went away while queued.
    EvictedContextCancelled,
    /// Removed for another reason (shutdown).
    EvictedOther,
    /// Dispatched, then evicted to unblock a higher band (`enableEviction`,
    /// [`eviction`]); counted by the revocation metrics, not as a queue outcome.
    EvictedInFlight,
}

impl Outcome {
    /// llm-d's label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Dispatched => "Dispatched",
            Outcome::RejectedCapacity => "RejectedCapacity",
            Outcome::RejectedNoEndpoints => "RejectedNoEndpoints",
            Outcome::RejectedOther => "RejectedOther",
            Outcome::EvictedTtl => "EvictedTTL",
            Outcome::EvictedNoEndpoints => "EvictedNoEndpoints",
            Outcome::EvictedContextCancelled => "EvictedContextCancelled",
            Outcome::EvictedOther => "EvictedOther",
            Outcome::EvictedInFlight => "EvictedInFlight",
        }
    }

    /// What the client gets: `(class, x-llm-d-request-dropped-reason)`, as llm-d's
    /// `translateFlowControlOutcome` maps it — [`DropClass::Contended`] (429) when capacity
    /// exists but is contended, [`DropClass::NoCapacity`] (503) when there is none (the front
    /// maps the class to its status). `None` for [`Outcome::Dispatched`] and for a client
    /// that is gone.
    pub fn client_answer(self) -> Option<(DropClass, &'static str)> {
        match self {
            Outcome::Dispatched | Outcome::EvictedContextCancelled => None,
            Outcome::RejectedCapacity => Some((DropClass::Contended, "rejected-saturated")),
            Outcome::EvictedTtl => Some((DropClass::Contended, "rejected-ttl-expired")),
            Outcome::RejectedNoEndpoints | Outcome::EvictedNoEndpoints => {
                Some((DropClass::NoCapacity, "rejected-no-endpoints"))
            }
            Outcome::RejectedOther | Outcome::EvictedOther => {
                Some((DropClass::NoCapacity, "rejected-shutting-down"))
            }
            Outcome::EvictedInFlight => Some((DropClass::Contended, "evicted")),
        }
    }
}

/// How flow control refused a request (the front maps it: 429 and 503, as llm-d does).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DropClass {
    /// Capacity exists but is contended (llm-d: 429 Too Many Requests).
    Contended,
    /// There is no capacity to wait for (no endpoints, shutting down; llm-d: 503).
    NoCapacity,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_map_as_llm_d_does() {
        assert_eq!(
            Outcome::RejectedCapacity.client_answer(),
            Some((DropClass::Contended, "rejected-saturated"))
        );
        assert_eq!(
            Outcome::EvictedTtl.client_answer(),
            Some((DropClass::Contended, "rejected-ttl-expired"))
        );
        assert_eq!(
            Outcome::EvictedNoEndpoints.client_answer(),
            Some((DropClass::NoCapacity, "rejected-no-endpoints"))
        );
        assert_eq!(
            Outcome::RejectedOther.client_answer(),
            Some((DropClass::NoCapacity, "rejected-shutting-down"))
        );
        assert_eq!(Outcome::EvictedContextCancelled.client_answer(), None);
        assert_eq!(
            Outcome::EvictedInFlight.client_answer(),
            Some((DropClass::Contended, "evicted"))
        );
        assert_eq!(Outcome::EvictedTtl.as_str(), "EvictedTTL");
        assert!(sheddable(-1) && !sheddable(0));
    }
}
