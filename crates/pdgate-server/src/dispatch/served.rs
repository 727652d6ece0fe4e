//! Served-by headers (design.md §5.3): every response names the endpoint, DP rank and
//! revision of each phase that ran, and the P/D mode.

use crate::dispatch::ctx::{RequestContext, Slot};
use http::{HeaderMap, HeaderName, HeaderValue};
use pdgate_api::{headers, Phase};
use pdgate_coordinator::{Probe, Target, Trace};

/// The endpoint that served one phase.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Server {
    name: String,
    revision: Option<String>,
    dp_rank: Option<String>,
}

/// The three served-by headers of one phase: endpoint, revision, DP rank (as `HeaderName`s
/// built at compile time, so stamping a response parses no name).
type Names = [HeaderName; 3];
const PREFILL: Names = [
    HeaderName::from_static(headers::SERVED_PREFILL_ENDPOINT),
    HeaderName::from_static(headers::SERVED_PREFILL_REVISION),
    HeaderName::from_static(headers::SERVED_PREFILL_DP_RANK),
];
const DECODE: Names = [
    HeaderName::from_static(headers::SERVED_DECODE_ENDPOINT),
    HeaderName::from_static(headers::SERVED_DECODE_REVISION),
    HeaderName::from_static(headers::SERVED_DECODE_DP_RANK),
];
/// `x-pdgate-pd-mode`.
const MODE: HeaderName = HeaderName::from_static(headers::SERVED_MODE);

impl Server {
    fn of(t: &Target) -> Option<Server> {
        Some(Server {
            name: t.name.clone(),
            revision: t.revision.clone(),
            dp_rank: t.dp_rank.map(|r| r.to_string()),
        })
    }

    /// Read back from a router's response headers.
    fn read(h: &HeaderMap, names: &Names) -> Option<Server> {
        let get = |k: &HeaderName| h.get(k).and_then(|v| v.to_str().ok()).map(str::to_string);
        Some(Server {
            name: get(&names[0])?,
            revision: get(&names[1]),
            dp_rank: get(&names[2]),
        })
    }

    fn write(&self, h: &mut HeaderMap, names: &Names) {
        let values = [
            Some(&self.name),
            self.revision.as_ref(),
            self.dp_rank.as_ref(),
        ];
        for (k, v) in names.iter().zip(values) {
            if let Some(Ok(v)) = v.map(|v| HeaderValue::from_str(v)) {
                h.insert(k.clone(), v);
            }
        }
    }
}

/// Which endpoint served each phase, read from the request's [`RequestContext`]. A header is
/// set only when known: a per-role router names only its own phase and no mode; behind
/// routers, the routers' own served-by headers name the endpoints.
#[derive(Debug, Default)]
pub struct Served {
    prefill: Option<Server>,
    decode: Option<Server>,
    mode: Option<&'static str>,
}

impl Served {
    /// What the request's legs served, per `ctx` (after retries) and `trace`.
    pub fn of(ctx: &RequestContext, trace: &Trace) -> Served {
        let view = |slot| {
            ctx.with(slot, |r| {
                (r.phase, r.served.as_ref().and_then(Server::of), r.status)
            })
        };
        let (prefill_phase, prefill, _) = view(Slot::Prefill);
        let (_, main, main_status) = view(Slot::Main);
        let main_phase = main_phase(ctx, trace);
        let answered = main_status.is_some();
        if trace.prefill_ran {
            return Served {
                prefill,
                decode: main,
                mode: answered.then_some("split"),
            };
        }
        if prefill_phase.is_some() && main_phase != Some(Phase::Aggregated) {
            // Prefill failed: no decode leg was sent, nothing to name but prefill.
            return Served {
                prefill,
                ..Served::default()
            };
        }
        match main_phase {
            Some(Phase::Prefill) => Served {
                prefill: main,
                ..Served::default()
            },
            Some(Phase::Decode) => Served {
                decode: main,
                ..Served::default()
            },
            Some(Phase::Aggregated) => Served {
                prefill: main.clone(),
                decode: main,
                mode: answered.then_some("aggregated"),
            },
            _ => Served::default(),
        }
    }

    /// Writes the served-by headers into the client response `h`.
    pub fn stamp(&self, h: &mut HeaderMap) {
        if let Some(p) = &self.prefill {
            p.write(h, &PREFILL);
        }
        if let Some(d) = &self.decode {
            d.write(h, &DECODE);
        }
        if let Some(mode) = self.mode {
            h.insert(MODE, HeaderValue::from_static(mode));
        }
    }
}

/// The phase the main slot's endpoint ran: the phase of the leg it was sent (recorded in
/// `ctx` by the dispatcher), except that a served conditional-decode probe — a `Decode`
/// leg — ran the whole request (`Aggregated`, per `trace`).
pub fn main_phase(ctx: &RequestContext, trace: &Trace) -> Option<Phase> {
    match trace.probe {
        Some(Probe::Served) => Some(Phase::Aggregated),
        _ => ctx.phase(Slot::Main),
    }
}

/// The endpoint a per-role router's response names for the phase of `slot` (its served-by
/// headers), as a target without an address.
pub fn named_by_router(h: &HeaderMap, slot: Slot) -> Option<Target> {
    let names = match slot {
        Slot::Prefill => PREFILL,
        Slot::Main => DECODE,
    };
    Server::read(h, &names).map(|s| Target {
        name: s.name,
        address: String::new(),
        revision: s.revision,
        dp_rank: s.dp_rank.and_then(|r| r.parse().ok()),
    })
}
