//! Served-by headers (design.md §5.3): every response names the endpoint, DP rank and
//! revision of each phase that ran, and the P/D mode.

use http::{HeaderMap, HeaderValue};
use pdgate_api::{headers, Phase};
use pdgate_coordinator::{Plan, Target, Trace};
use pdgate_scheduler::SchedulingResult;

/// The endpoint that served one phase.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Server {
    name: String,
    revision: Option<String>,
    dp_rank: Option<String>,
}

/// The three served-by headers of one phase: endpoint, revision, DP rank.
type Names = [&'static str; 3];
const PREFILL: Names = [
    headers::SERVED_PREFILL_ENDPOINT,
    headers::SERVED_PREFILL_REVISION,
    headers::SERVED_PREFILL_DP_RANK,
];
const DECODE: Names = [
    headers::SERVED_DECODE_ENDPOINT,
    headers::SERVED_DECODE_REVISION,
    headers::SERVED_DECODE_DP_RANK,
];

impl Server {
    fn of(t: &Target) -> Option<Server> {
        Some(Server {
            name: t.name.clone(),
            revision: t.revision.clone(),
            dp_rank: t.dp_rank.map(|r| r.to_string()),
        })
    }

    /// Read back from a router's response headers.
    fn read(h: &HeaderMap, names: Names) -> Option<Server> {
        let get = |k: &str| h.get(k).and_then(|v| v.to_str().ok()).map(str::to_string);
        Some(Server {
            name: get(names[0])?,
            revision: get(names[1]),
            dp_rank: get(names[2]),
        })
    }

    fn write(&self, h: &mut HeaderMap, names: Names) {
        let values = [
            Some(&self.name),
            self.revision.as_ref(),
            self.dp_rank.as_ref(),
        ];
        for (k, v) in names.into_iter().zip(values) {
            if let Some(Ok(v)) = v.map(|v| HeaderValue::from_str(v)) {
                h.insert(k, v);
            }
        }
    }
}

/// Which endpoint served each phase. A header is set only when known: a per-role router
/// names only its own phase and no mode; a coordinator of routers reads the routers' own
/// served-by headers.
#[derive(Debug, Default)]
pub struct Served {
    prefill: Option<Server>,
    decode: Option<Server>,
    mode: Option<&'static str>,
}

impl Served {
    /// What `plan` (with the local picks in `result`, or routers) served, given `trace`.
    pub fn of(plan: &Plan, result: Option<&SchedulingResult>, trace: &Trace) -> Served {
        let named = Server::of;
        if let Some(r) = result {
            return match (plan.prefill.as_ref(), r.decode.phase) {
                // Prefill failed: no decode leg was sent, nothing to name but prefill.
                (Some(p), _) if trace.prefill_headers.is_none() => Served {
                    prefill: named(p),
                    ..Served::default()
                },
                (Some(p), _) => Served {
                    prefill: named(p),
                    decode: named(&plan.decode),
                    mode: Some("split"),
                },
                (None, Phase::Prefill) => Served {
                    prefill: named(&plan.decode),
                    ..Served::default()
                },
                (None, Phase::Decode) => Served {
                    decode: named(&plan.decode),
                    ..Served::default()
                },
                (None, Phase::Aggregated) => Served {
                    prefill: named(&plan.decode),
                    decode: named(&plan.decode),
                    mode: Some("aggregated"),
                },
                (None, Phase::Encode) => Served::default(),
            };
        }
        // Routed: the decode router's response names the decode endpoint itself; the
        // prefill router's names the prefill endpoint.
        let prefill = trace
            .prefill_headers
            .as_ref()
            .and_then(|h| Server::read(h, PREFILL));
        Served {
            mode: prefill.is_some().then_some("split"),
            prefill,
            decode: None,
        }
    }

    /// Writes the served-by headers into the client response `h`.
    pub fn stamp(&self, h: &mut HeaderMap) {
        if let Some(p) = &self.prefill {
            p.write(h, PREFILL);
        }
        if let Some(d) = &self.decode {
            d.write(h, DECODE);
        }
        if let Some(mode) = self.mode {
            h.insert(headers::SERVED_MODE, HeaderValue::from_static(mode));
        } else if self.prefill.is_none() && self.decode.is_none() {
            // Behind routers, no prefill leg, and a decode router answered: its endpoint ran
            // the whole request (a served conditional-decode probe).
            if let Some(d) = Server::read(h, DECODE) {
                h.insert(headers::SERVED_MODE, HeaderValue::from_static("aggregated"));
                d.write(h, PREFILL);
            }
        }
    }
}
