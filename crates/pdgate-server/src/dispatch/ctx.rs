//! [`RequestContext`]: the one record of a request's phases — for each, the pick and its
//! booking, and the endpoint that actually served it (after retries). The dispatchers write
//! it; the served-by headers, the session binding, the prefix recording (through the
//! scheduler's response hooks on the served pick), the metrics and the response body's
//! bookings all read it. Pingora's per-request `CTX` is the model.
//!
//! Slots: `prefill` (a split request's prefill phase) and `main` (the leg whose body the
//! client gets: decode, aggregated, or a per-role router's own phase). A retry from A to B
//! replaces A's pick by B's in the slot, so A's booking ends at once and B is booked (and,
//! on its 2xx, credited) once.

use parking_lot::Mutex;
use pdgate_api::Phase;
use pdgate_coordinator::Target;
use pdgate_scheduler::{Pick, SchedulingResult};

/// Which slot of the context a leg fills.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Slot {
    /// The prefill phase of a split request.
    Prefill,
    /// The leg whose answer goes to the client.
    Main,
}

/// What is known of one phase.
#[derive(Debug, Default)]
pub struct PhaseRecord {
    /// The phase the endpoint ran: `Prefill`, `Decode`, `Aggregated` (prefill and decode on
    /// one endpoint), as the pick or the pipeline says.
    pub phase: Option<Phase>,
    /// The endpoint that answered (or, when none did, the one tried last).
    pub served: Option<Target>,
    /// Status of its answer; `None` when no answer came.
    pub status: Option<u16>,
    /// Tries made, the first included.
    pub attempts: u32,
    /// The booking of `served` (local scheduling only).
    pub pick: Option<Pick>,
}

impl PhaseRecord {
    /// True when the served endpoint answered 2xx.
    pub fn succeeded(&self) -> bool {
        self.status.is_some_and(|s| (200..300).contains(&s))
    }
}

#[derive(Debug, Default)]
struct State {
    prefill: PhaseRecord,
    main: PhaseRecord,
    /// Encode picks, booked until the request ends.
    encode: Vec<Pick>,
}

/// The per-request record (see the module docs). Its lock is per request and uncontended
/// (legs of one request run one after the other, encode legs aside).
#[derive(Debug, Default)]
pub struct RequestContext {
    state: Mutex<State>,
}

impl RequestContext {
    /// A context holding the scheduler's picks (`None` behind per-role routers): the prefill
    /// pick, when the request is split, and the decode (or aggregated) pick.
    pub fn new(result: Option<SchedulingResult>, split: bool) -> Self {
        let mut state = State::default();
        if let Some(r) = result {
            state.main.phase = Some(r.decode.phase);
            state.main.pick = Some(r.decode);
            if let Some(p) = r.prefill.filter(|_| split) {
                state.prefill.phase = Some(Phase::Prefill);
                state.prefill.pick = Some(p);
            }
        }
        RequestContext {
            state: Mutex::new(state),
        }
    }

    /// The slot a leg of `phase` fills: the main slot when it is the phase planned there (a
    /// per-role router's own phase — `Prefill`, `Encode` — runs in the main slot, as the
    /// leg whose answer the client gets); else `Prefill` for prefill, the main slot for
    /// decode and aggregated legs; `None` for the encode step's legs, which the dispatcher
    /// schedules itself.
    pub fn slot_for(&self, phase: Phase) -> Option<Slot> {
        if self.phase(Slot::Main) == Some(phase) {
            return Some(Slot::Main);
        }
        match phase {
            Phase::Prefill => Some(Slot::Prefill),
            Phase::Decode | Phase::Aggregated => Some(Slot::Main),
            Phase::Encode => None,
        }
    }

    /// Runs `f` on the record of `slot`.
    pub fn with<R>(&self, slot: Slot, f: impl FnOnce(&mut PhaseRecord) -> R) -> R {
        let mut s = self.state.lock();
        f(match slot {
            Slot::Prefill => &mut s.prefill,
            Slot::Main => &mut s.main,
        })
    }

    /// Keeps an encode pick booked until the request ends.
    pub fn keep_encode(&self, pick: Pick) {
        self.state.lock().encode.push(pick);
    }

    /// The phase `slot` ran (or is planned to run).
    pub fn phase(&self, slot: Slot) -> Option<Phase> {
        self.with(slot, |r| r.phase)
    }

    /// The name of the endpoint that served `slot` (or was tried last).
    pub fn served_name(&self, slot: Slot) -> Option<String> {
        self.with(slot, |r| r.served.as_ref().map(|t| t.name.clone()))
    }

    /// Ends the prefill booking: completed when its leg answered 2xx (then released now,
    /// not at end of stream), abandoned otherwise.
    pub fn finish_prefill(&self) {
        let pick = self.with(Slot::Prefill, |r| {
            let ok = r.succeeded();
            r.pick.take().map(|mut p| {
                if ok {
                    p.guard.complete();
                }
                p
            })
        });
        drop(pick);
    }

    /// Takes the main slot's pick (its booking moves into the response body).
    pub fn take_main_pick(&self) -> Option<Pick> {
        self.with(Slot::Main, |r| r.pick.take())
    }
}

#[cfg(test)]
#[path = "ctx_tests.rs"]
mod tests;
