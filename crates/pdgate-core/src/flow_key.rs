//! A request's flow-control key: its priority (from the InferenceObjective its
//! `x-llm-d-inference-objective` / `x-gateway-inference-objective` header names; llm-d keeps
//! objectives as `InferenceObjective` resources, pdgate takes them from
//! `--inference-objective NAME=PRIORITY`), its fairness id and its TTFT objective.

use http::{HeaderMap, HeaderName};
use pdgate_api::headers;
use pdgate_scheduler::flow::DEFAULT_FLOW;
use std::collections::HashMap;
use std::sync::Arc;

/// Longest fairness id kept, bytes; a longer one is a 400.
pub const MAX_FAIRNESS_ID_BYTES: usize = 128;

/// InferenceObjective name → priority (`--inference-objective NAME=PRIORITY`; in llm-d the
/// `InferenceObjective` resources). An unknown or absent objective has priority 0.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Objectives(pub Arc<HashMap<String, i32>>);

impl Objectives {
    /// Parses `NAME=PRIORITY` entries.
    ///
    /// Errors: an entry without `=`, an empty name, a priority that is not an i32, or a
    /// name given twice; the message names the entry.
    pub fn parse(specs: &[String]) -> Result<Objectives, String> {
        let mut map = HashMap::new();
        for s in specs {
            let (name, p) = s
                .split_once('=')
                .ok_or_else(|| format!("--inference-objective `{s}`: expected NAME=PRIORITY"))?;
            let name = name.trim();
            if name.is_empty() || !name.bytes().all(|b| b.is_ascii_graphic()) {
                return Err(format!(
                    "--inference-objective `{s}`: the name must be visible ASCII (it is \
                     matched against a header value)"
                ));
            }
            let p: i32 = p.trim().parse().map_err(|_| {
                format!("--inference-objective `{s}`: priority `{p}` is not an integer")
            })?;
            if map.insert(name.to_string(), p).is_some() {
                return Err(format!("--inference-objective `{name}` given twice"));
            }
        }
        Ok(Objectives(Arc::new(map)))
    }

    /// The priority of `objective` (0 when unknown).
    pub fn priority(&self, objective: Option<&str>) -> i32 {
        objective.and_then(|o| self.0.get(o)).copied().unwrap_or(0)
    }
}

/// Whom a request's flow identity headers (objective, fairness id, TTFT objective) are
/// honoured from (`--flow-headers-from`).
///
/// In llm-d the gateway sets these headers (an HTTPRoute filter overwrites the client's), so
/// its EPP reads them from every request; `pdgate serve` is a front door itself, where any
/// client could pick the highest priority or a new fairness id per request and take every
/// share (issue 26). The default therefore honours them only from callers that passed the
/// trust boundary ([`crate::trust`]); from anyone else they are ignored and counted
/// (`pdgate_untrusted_headers_dropped_total{header}`), the request gets priority 0 and its
/// client address as fairness id.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum FlowHeadersFrom {
    /// Only from trusted callers (`--trusted-coordinator-networks`, the coordinator token).
    #[default]
    Trusted,
    /// From every request: the gateway in front sets or overwrites them (llm-d's behaviour).
    Any,
}

/// Every flow identity header (both names of each), as a client may send them.
pub const FLOW_HEADERS: [&str; 6] = [
    headers::INFERENCE_OBJECTIVE,
    headers::INFERENCE_OBJECTIVE_LEGACY,
    headers::FAIRNESS_ID,
    headers::FAIRNESS_ID_LEGACY,
    headers::SLO_TTFT_MS,
    headers::SLO_TTFT_MS_LEGACY,
];

/// The flow key of a request whose identity headers are not honoured: priority 0, the
/// client's address as fairness id (every request of one client in one flow; the default
/// flow when the address is unknown), no TTFT objective.
pub fn untrusted_flow_key(client: Option<std::net::IpAddr>, bytes: u64) -> FlowKey {
    let flow: Arc<str> = match client {
        Some(ip) => Arc::from(ip.to_string()),
        None => Arc::from(DEFAULT_FLOW),
    };
    FlowKey {
        priority: 0,
        flow,
        slo_ttft_ms: None,
        bytes,
    }
}

/// A request's flow key and size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlowKey {
    /// Priority (from the objective).
    pub priority: i32,
    /// Fairness id (`default-flow` when absent).
    pub flow: Arc<str>,
    /// `x-llm-d-slo-ttft-ms`, when it is a whole number.
    pub slo_ttft_ms: Option<u64>,
    /// Body bytes.
    pub bytes: u64,
}

/// The objective headers (llm-d's name, then the Gateway's), as names built at compile time
/// (a lookup by `&str` parses and hashes the name on every request).
const OBJECTIVE: [HeaderName; 2] = [
    HeaderName::from_static(headers::INFERENCE_OBJECTIVE),
    HeaderName::from_static(headers::INFERENCE_OBJECTIVE_LEGACY),
];
/// The fairness-id headers.
const FAIRNESS: [HeaderName; 2] = [
    HeaderName::from_static(headers::FAIRNESS_ID),
    HeaderName::from_static(headers::FAIRNESS_ID_LEGACY),
];
/// The TTFT-objective headers.
const SLO_TTFT: [HeaderName; 2] = [
    HeaderName::from_static(headers::SLO_TTFT_MS),
    HeaderName::from_static(headers::SLO_TTFT_MS_LEGACY),
];

/// The first of `names` carried with a non-empty value, as text: a value that is not
/// visible ASCII is read lossily (these headers only select a band or a flow; an unknown
/// value means the defaults, never an error).
fn text(h: &HeaderMap, names: &[HeaderName; 2]) -> Option<String> {
    names.iter().find_map(|n| {
        let t = String::from_utf8_lossy(h.get(n)?.as_bytes())
            .trim()
            .to_string();
        (!t.is_empty()).then_some(t)
    })
}

/// The priority of a request with headers `h`: its objective's (0 when it names none or an
/// unknown one). Never an error.
pub fn priority(h: &HeaderMap, objectives: &Objectives) -> i32 {
    let objective = text(h, &OBJECTIVE);
    objectives.priority(objective.as_deref())
}

/// The flow key of a request with headers `h` and a body of `bytes` (flow control on).
///
/// Errors: a fairness id over [`MAX_FAIRNESS_ID_BYTES`] → 400 naming the header (it becomes
/// a queue's key). Other values never fail: see [`priority`].
pub fn flow_key(
    h: &HeaderMap,
    objectives: &Objectives,
    bytes: u64,
) -> Result<FlowKey, crate::errors::ApiError> {
    let flow = text(h, &FAIRNESS);
    if flow
        .as_ref()
        .is_some_and(|f| f.len() > MAX_FAIRNESS_ID_BYTES)
    {
        return Err(crate::errors::ApiError::InvalidHeader {
            header: headers::FAIRNESS_ID,
            reason: format!("longer than {MAX_FAIRNESS_ID_BYTES} bytes"),
        });
    }
    let slo = text(h, &SLO_TTFT).and_then(|v| v.parse().ok());
    Ok(FlowKey {
        priority: priority(h, objectives),
        flow: Arc::from(flow.as_deref().unwrap_or(DEFAULT_FLOW)),
        slo_ttft_ms: slo,
        bytes,
    })
}
