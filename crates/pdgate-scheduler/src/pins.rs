//! Client pins: the one phase-aware resolver and the validation of a pin against its phase's
//! pool (design.md §5.3, "Pins are phase-aware"; hint names from NVIDIA Dynamo).
//!
//! | phase | endpoint pin read from | DP rank read from |
//! |---|---|---|
//! | Prefill | prefill pin only | prefill DP rank only |
//! | Decode | decode pin, else worker pin | DP rank |
//! | Aggregated | worker pin, else decode pin | DP rank |
//! | Encode | never pinned | — |
//!
//! A pin in one phase never constrains another phase's choice: a request that pins only its
//! decode worker gets a freely chosen prefill endpoint. (In the seed, the prefill hop looked the
//! decode worker up in the prefill pool and failed with 500.)
//!
//! Use: parse [`RoutingHints`] once at ingress, call [`check_ranks`] (a DP rank without its
//! endpoint pin is a 400 even for a phase that never runs), then for each phase to schedule,
//! [`pin_for`] and, when it returns a pin, [`validate`] against the current [`Snapshot`].

use crate::endpoint::{EndpointState, Snapshot};
use pdgate_api::hints::{describe, shown, Hint, RoutingHints};
use pdgate_api::{Phase, Role};
use std::fmt;
use std::sync::Arc;

/// A client's choice of endpoint (and DP rank) for one phase, as [`resolve`] reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pin {
    /// The endpoint (or pod, when [`Pin::dp_rank`] is set) named by the client.
    pub endpoint: String,
    /// The data-parallel rank that goes with it, if given.
    pub dp_rank: Option<u32>,
    /// Header name or body path the endpoint came from (e.g. `x-worker-instance-id`,
    /// `nvext.prefill_worker_id`); errors name it (see [`pdgate_api::hints::describe`]).
    pub source: String,
    /// Header name or body path the DP rank came from, when there is one.
    pub rank_source: Option<String>,
}

/// What the hints say about one phase: its pin, and a DP rank that has no endpoint pin to go
/// with (which [`Resolved::check`] turns into [`PinError::RankWithoutEndpoint`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Resolved {
    /// The phase's pin; `None` lets the scheduler choose freely.
    pub pin: Option<Pin>,
    /// The phase's DP rank and its source, when the phase has a rank but no endpoint pin.
    pub orphan_rank: Option<(u32, String)>,
}

impl Resolved {
    /// The pin, or [`PinError::RankWithoutEndpoint`] (400) when a DP rank came without an
    /// endpoint pin for this phase.
    pub fn check(self) -> Result<Option<Pin>, PinError> {
        match self.orphan_rank {
            Some((rank, source)) => Err(PinError::rank_without_endpoint(rank, source)),
            None => Ok(self.pin),
        }
    }
}

/// Applies the phase table (module docs) to `hints`: which endpoint pin and which DP rank this
/// phase reads. Pure; never looks at endpoints.
pub fn resolve(phase: Phase, hints: &RoutingHints) -> Resolved {
    let (endpoint, rank) = match phase {
        Phase::Encode => return Resolved::default(),
        Phase::Prefill => (hints.prefill_pin.as_ref(), hints.prefill_dp_rank.as_ref()),
        Phase::Decode => (
            hints.decode_pin.as_ref().or(hints.worker_pin.as_ref()),
            hints.dp_rank.as_ref(),
        ),
        Phase::Aggregated => (
            hints.worker_pin.as_ref().or(hints.decode_pin.as_ref()),
            hints.dp_rank.as_ref(),
        ),
    };
    match endpoint {
        Some(e) => Resolved {
            pin: Some(Pin {
                endpoint: e.value.clone(),
                dp_rank: rank.map(|r| r.value),
                source: e.source.to_string(),
                rank_source: rank.map(|r| r.source.to_string()),
            }),
            orphan_rank: None,
        },
        None => Resolved {
            pin: None,
            orphan_rank: rank.map(|r| (r.value, r.source.to_string())),
        },
    }
}

/// The pin of `phase`, per the phase table; `None` when the phase is not pinned (a DP rank
/// without an endpoint pin is dropped here: use [`resolve`] or [`check_ranks`] to reject it).
pub fn pin_for(phase: Phase, hints: &RoutingHints) -> Option<Pin> {
    resolve(phase, hints).pin
}

/// Request-level check, independent of which phases run: every DP rank needs its endpoint pin
/// (the prefill DP rank the prefill pin; the DP rank the worker or decode pin).
///
/// Errors: [`PinError::RankWithoutEndpoint`] (400) naming the rank's header or field; the
/// prefill rank is checked first.
pub fn check_ranks(hints: &RoutingHints) -> Result<(), PinError> {
    let orphan = |rank: &Option<Hint<u32>>, pins: [&Option<Hint<String>>; 2]| match rank {
        Some(r) if pins.iter().all(|p| p.is_none()) => Err(PinError::rank_without_endpoint(
            r.value,
            r.source.to_string(),
        )),
        _ => Ok(()),
    };
    orphan(&hints.prefill_dp_rank, [&hints.prefill_pin, &None])?;
    orphan(&hints.dp_rank, [&hints.worker_pin, &hints.decode_pin])
}

/// True when an endpoint of `role` (`None` = no role label) may be pinned for `phase`: the pool
/// the phase's profile picks from. Prefill: prefill-capable roles. Decode and Aggregated:
/// decode-capable roles and unlabeled endpoints (the aggregated phase runs on the decode pick,
/// design.md §1 and `disagg-profile-handler`). Encode: encode-capable roles.
///
/// The one definition of the role rules: `prefill-filter`, `decode-filter` and `encode-filter`
/// keep exactly the endpoints this accepts for their phase.
pub fn phase_accepts(phase: Phase, role: Option<Role>) -> bool {
    match phase {
        Phase::Prefill => role.is_some_and(|r| r.can_prefill()),
        Phase::Decode | Phase::Aggregated => role.is_none_or(|r| r.can_decode()),
        Phase::Encode => role.is_some_and(|r| r.can_encode()),
    }
}

/// Finds the endpoint `pin` names in `snapshot` and checks it may serve `phase` now.
///
/// Without a DP rank the endpoint is the one named [`Pin::endpoint`]. With rank `r` it is the
/// endpoint named `<endpoint>-rank-<r>` (design.md §1), else the endpoint named `<endpoint>`
/// whose [`crate::Endpoint::dp_rank`] is `r`.
///
/// Errors, in this order: [`PinError::Unknown`] (400) when neither the endpoint nor any of its
/// ranks is known; [`PinError::UnknownRank`] (400) when it is known without that rank;
/// [`PinError::WrongRole`] (400) when its role is not in the phase's pool ([`phase_accepts`]);
/// [`PinError::NotReady`] (503) when it is not Ready or is terminating.
pub fn validate<'s>(
    pin: &Pin,
    phase: Phase,
    snapshot: &'s Snapshot,
) -> Result<&'s Arc<EndpointState>, PinError> {
    let state = match pin.dp_rank {
        None => snapshot.get(&pin.endpoint),
        Some(rank) => snapshot
            .get(&pdgate_api::labels::rank_endpoint_name(&pin.endpoint, rank))
            .or_else(|| {
                snapshot
                    .get(&pin.endpoint)
                    .filter(|s| s.endpoint.dp_rank == Some(rank))
            }),
    };
    let Some(state) = state else {
        let known = known_ranks(snapshot, &pin.endpoint);
        return Err(match pin.dp_rank {
            Some(rank) if snapshot.get(&pin.endpoint).is_some() || !known.is_empty() => {
                PinError::UnknownRank {
                    source: pin
                        .rank_source
                        .clone()
                        .unwrap_or_else(|| pin.source.clone()),
                    endpoint: pin.endpoint.clone(),
                    rank,
                    known,
                }
            }
            _ => PinError::Unknown {
                source: pin.source.clone(),
                endpoint: pin.endpoint.clone(),
            },
        });
    };
    let ep = &state.endpoint;
    if !phase_accepts(phase, ep.role) {
        return Err(PinError::WrongRole {
            source: pin.source.clone(),
            endpoint: ep.name.clone(),
            role: ep.role,
            phase,
        });
    }
    if !ep.schedulable() {
        return Err(PinError::NotReady {
            source: pin.source.clone(),
            endpoint: ep.name.clone(),
            terminating: ep.terminating,
        });
    }
    Ok(state)
}

/// DP ranks known for `pod`: from endpoints named `<pod>-rank-<i>` and from the endpoint named
/// `<pod>` itself; sorted, without duplicates.
fn known_ranks(snapshot: &Snapshot, pod: &str) -> Vec<u32> {
    let prefix = format!("{pod}-rank-");
    let mut ranks: Vec<u32> = snapshot
        .endpoints
        .iter()
        .filter_map(|s| {
            let name = s.endpoint.name.as_str();
            if name == pod {
                return s.endpoint.dp_rank;
            }
            let digits = name.strip_prefix(&prefix)?;
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            digits.parse().ok()
        })
        .collect();
    ranks.sort_unstable();
    ranks.dedup();
    ranks
}

/// A pin the router cannot honor. [`PinError::status`] gives the HTTP status (design.md §5.5:
/// a bad pin is 400, a pinned endpoint that is not Ready is 503); the message names the header
/// or body field at fault.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PinError {
    /// A DP rank with no endpoint pin for it (400).
    ///
    /// Display: ``header `x-dp-rank`: DP rank 2 is given without an endpoint to pin
    /// (`x-worker-instance-id` or `x-decode-instance-id`)``.
    RankWithoutEndpoint {
        /// Header name or body path of the rank.
        source: String,
        /// The rank.
        rank: u32,
        /// The headers that would pin its endpoint, as the message lists them.
        needs: &'static str,
    },
    /// No endpoint of that name, nor any `<name>-rank-<i>` when a rank was given (400).
    ///
    /// Display: ``header `x-worker-instance-id`: endpoint `decode-7` is not known``.
    Unknown {
        /// Header name or body path of the endpoint pin.
        source: String,
        /// The endpoint named by the client.
        endpoint: String,
    },
    /// The endpoint is known but has no such DP rank (400).
    ///
    /// Display: ``header `x-dp-rank`: endpoint `pod-a` has no DP rank 3 (known ranks: 0, 1)``,
    /// or ``… (it has no DP ranks)``.
    UnknownRank {
        /// Header name or body path of the rank.
        source: String,
        /// The pinned endpoint (pod).
        endpoint: String,
        /// The rank asked for.
        rank: u32,
        /// Ranks the snapshot knows for the endpoint, sorted.
        known: Vec<u32>,
    },
    /// The endpoint's role is not in the phase's pool ([`phase_accepts`]) (400).
    ///
    /// Display: ``header `x-prefill-instance-id`: endpoint `decode-0` has role `decode`, which
    /// cannot run the prefill phase`` (``has no role label`` when unlabeled).
    WrongRole {
        /// Header name or body path of the endpoint pin.
        source: String,
        /// The endpoint found (with its rank suffix, if any).
        endpoint: String,
        /// Its role; `None` when unlabeled.
        role: Option<Role>,
        /// The phase it was pinned for.
        phase: Phase,
    },
    /// The endpoint is known but not Ready, or terminating (503).
    ///
    /// Display: ``header `x-worker-instance-id`: endpoint `decode-7` is not ready`` (or ``is
    /// terminating``).
    NotReady {
        /// Header name or body path of the endpoint pin.
        source: String,
        /// The endpoint found.
        endpoint: String,
        /// True when it is being deleted (else it is not Ready).
        terminating: bool,
    },
    /// Pins of two phases name endpoints of different revisions (400): a request runs on one
    /// revision (design.md §5.1).
    ///
    /// Display: ``header `x-worker-instance-id`: endpoint of revision `b` cannot serve a
    /// request whose header `x-prefill-instance-id` pinned revision `a```.
    RevisionConflict {
        /// Source of the first pin (which fixed the revision).
        first: String,
        /// Its revision.
        first_revision: String,
        /// Source of the conflicting pin.
        second: String,
        /// Its revision.
        second_revision: String,
    },
}

const DECODE_PIN_NAMES: &str = "`x-worker-instance-id` or `x-decode-instance-id`";
const PREFILL_PIN_NAMES: &str = "`x-prefill-instance-id`";

impl PinError {
    fn rank_without_endpoint(rank: u32, source: String) -> PinError {
        // Prefill rank sources all name "prefill"; the others go with the worker/decode pin.
        let needs = if source.contains("prefill") {
            PREFILL_PIN_NAMES
        } else {
            DECODE_PIN_NAMES
        };
        PinError::RankWithoutEndpoint {
            source,
            rank,
            needs,
        }
    }

    /// The kind of fault: [`PinFault::Unavailable`] for [`PinError::NotReady`],
    /// [`PinFault::Invalid`] for everything else.
    pub fn fault(&self) -> crate::error::PinFault {
        match self {
            PinError::NotReady { .. } => crate::error::PinFault::Unavailable,
            _ => crate::error::PinFault::Invalid,
        }
    }

    /// Short stable reason for metrics labels (`pin rejections`, design.md §5.4):
    /// `rank_without_endpoint`, `unknown_endpoint`, `unknown_rank`, `wrong_role`, `not_ready`.
    pub fn reason(&self) -> &'static str {
        match self {
            PinError::RankWithoutEndpoint { .. } => "rank_without_endpoint",
            PinError::Unknown { .. } => "unknown_endpoint",
            PinError::UnknownRank { .. } => "unknown_rank",
            PinError::WrongRole { .. } => "wrong_role",
            PinError::NotReady { .. } => "not_ready",
            PinError::RevisionConflict { .. } => "revision_conflict",
        }
    }

    /// The header name or body path at fault.
    pub fn source_name(&self) -> &str {
        match self {
            PinError::RankWithoutEndpoint { source, .. }
            | PinError::Unknown { source, .. }
            | PinError::UnknownRank { source, .. }
            | PinError::WrongRole { source, .. }
            | PinError::NotReady { source, .. } => source,
            PinError::RevisionConflict { second, .. } => second,
        }
    }
}

impl fmt::Display for PinError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: ", describe(self.source_name()))?;
        match self {
            PinError::RankWithoutEndpoint { rank, needs, .. } => {
                write!(
                    f,
                    "DP rank {rank} is given without an endpoint to pin ({needs})"
                )
            }
            PinError::Unknown { endpoint, .. } => {
                write!(f, "endpoint `{}` is not known", shown(endpoint))
            }
            PinError::UnknownRank {
                endpoint,
                rank,
                known,
                ..
            } => {
                write!(f, "endpoint `{}` has no DP rank {rank} (", shown(endpoint))?;
                if known.is_empty() {
                    f.write_str("it has no DP ranks)")
                } else {
                    let list: Vec<String> = known.iter().map(u32::to_string).collect();
                    write!(f, "known ranks: {})", list.join(", "))
                }
            }
            PinError::WrongRole {
                endpoint,
                role,
                phase,
                ..
            } => {
                write!(f, "endpoint `{endpoint}` ")?;
                match role {
                    Some(r) => write!(f, "has role `{r}`")?,
                    None => f.write_str("has no role label")?,
                }
                write!(f, ", which cannot run the {phase} phase")
            }
            PinError::NotReady {
                endpoint,
                terminating,
                ..
            } => {
                let state = if *terminating {
                    "is terminating"
                } else {
                    "is not ready"
                };
                write!(f, "endpoint `{endpoint}` {state}")
            }
            PinError::RevisionConflict {
                first,
                first_revision,
                second_revision,
                ..
            } => write!(
                f,
                "endpoint of revision `{second_revision}` cannot serve a request whose {} \
                 pinned revision `{first_revision}`",
                describe(first)
            ),
        }
    }
}

impl std::error::Error for PinError {}

/// The pins of one request, validated against the snapshot once per `schedule`: the
/// endpoint each phase must use, and the revision a pin fixes for the whole request.
#[derive(Debug, Default, Clone)]
pub struct RequestPins<'s> {
    /// Prefill pin.
    pub prefill: Option<&'s Arc<EndpointState>>,
    /// Decode pin (decode pin, else worker pin).
    pub decode: Option<&'s Arc<EndpointState>>,
    /// Aggregated pin (worker pin, else decode pin).
    pub aggregated: Option<&'s Arc<EndpointState>>,
    /// The revision label of the pinned endpoints; every phase stays in it.
    pub revision: Option<String>,
}

impl<'s> RequestPins<'s> {
    /// Resolves and validates every phase's pin of `hints` against `snapshot`.
    ///
    /// Errors: [`check_ranks`], [`validate`] errors of any phase's pin, and pins of two
    /// phases in different revisions (400 naming both sources).
    pub fn of(hints: &RoutingHints, snapshot: &'s Snapshot) -> Result<Self, PinError> {
        check_ranks(hints)?;
        let mut out = RequestPins::default();
        let mut fixed: Option<(String, String)> = None; // (revision, source)
        for phase in [Phase::Prefill, Phase::Decode, Phase::Aggregated] {
            let Some(pin) = resolve(phase, hints).check()? else {
                continue;
            };
            let ep = validate(&pin, phase, snapshot)?;
            if let Some(rev) = ep.endpoint.revision() {
                match &fixed {
                    Some((r, src)) if r != rev => {
                        return Err(PinError::RevisionConflict {
                            first: src.clone(),
                            first_revision: r.clone(),
                            second: pin.source.clone(),
                            second_revision: rev.to_string(),
                        })
                    }
                    Some(_) => {}
                    None => fixed = Some((rev.to_string(), pin.source.clone())),
                }
            }
            match phase {
                Phase::Prefill => out.prefill = Some(ep),
                Phase::Decode => out.decode = Some(ep),
                _ => out.aggregated = Some(ep),
            }
        }
        out.revision = fixed.map(|(r, _)| r);
        Ok(out)
    }

    /// The pinned endpoint of `phase`, if any.
    pub fn get(&self, phase: Phase) -> Option<&'s Arc<EndpointState>> {
        match phase {
            Phase::Prefill => self.prefill,
            Phase::Decode => self.decode,
            Phase::Aggregated => self.aggregated,
            Phase::Encode => None,
        }
    }

    /// True when no phase is pinned.
    pub fn is_empty(&self) -> bool {
        self.prefill.is_none() && self.decode.is_none() && self.aggregated.is_none()
    }
}
