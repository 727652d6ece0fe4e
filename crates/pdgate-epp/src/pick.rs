//! Routing one buffered request, as `pdgate serve` does, for an endpoint picker: the body
//! parsed once, routing hints (pins, DP ranks, sessions) read, the scheduler run with the
//! same config and screeners, restricted to the data plane's subset hint. The answer names
//! the destination (the decode or aggregated pick, then fallbacks of the same revision and
//! role) and, when the decider splits, the prefill endpoint for llm-d's routing sidecar.

use crate::state::Epp;
use http::HeaderMap;
use pdgate_api::{headers, ApiKind, InferenceRequest};
use pdgate_core::errors::ApiError;
use pdgate_core::intake::{self, Caller, Intake};
use pdgate_scheduler::plugins::data_parallel_profile_handler;
use pdgate_scheduler::{Endpoint, EndpointState, Pick};
use rand::seq::IndexedRandom;
use std::collections::BTreeSet;
use std::sync::Arc;

/// Most fallback endpoints named after the pick (Envoy tries them in order when the pick
/// fails and retries are configured).
pub const MAX_FALLBACKS: usize = 2;

/// A routed request: where Envoy sends it and what is booked.
#[derive(Debug)]
pub struct Routed {
    /// `ip:port` of the pick, then its fallbacks.
    pub destinations: Vec<String>,
    /// The decode (or aggregated) pick, booked.
    pub decode: Pick,
    /// The prefill pick of a split request, booked; its address goes in
    /// `x-prefiller-host-port`.
    pub prefill: Option<Pick>,
    /// Request headers the profile handler asks the gateway to set (`name`, `value`), e.g.
    /// `data-parallel-profile-handler`'s `x-data-parallel-host-port`.
    pub headers: Vec<(String, String)>,
}

/// The parts of a request the picker reads.
pub struct Buffered<'a> {
    /// `:path` without the query.
    pub path: &'a str,
    /// Request headers (pseudo-headers removed).
    pub headers: &'a HeaderMap,
    /// The whole body.
    pub body: bytes::Bytes,
    /// The subset hint: `None` = the whole pool.
    pub subset: Option<&'a BTreeSet<String>>,
}

/// The inference API of `path` (its query and a trailing `/` removed), if it is one the
/// scheduler reads ([`ApiKind::from_path`]).
pub fn api_of(path: &str) -> Option<ApiKind> {
    let path = path.split('?').next().unwrap_or_default();
    ApiKind::from_path(path.strip_suffix('/').unwrap_or(path))
}

fn in_subset(subset: Option<&BTreeSet<String>>, e: &Endpoint) -> bool {
    subset.is_none_or(|s| s.contains(&e.address))
}

/// A random schedulable endpoint in the subset (a request the scheduler does not read, e.g.
/// `GET /v1/models`).
///
/// Errors: none in the subset → 503.
pub fn random(epp: &Epp, subset: Option<&BTreeSet<String>>) -> Result<String, ApiError> {
    let snap = epp.registry.snapshot();
    let ready: Vec<&Arc<EndpointState>> = (snap.endpoints.iter())
        .filter(|e| e.endpoint.schedulable() && in_subset(subset, &e.endpoint))
        .collect();
    match ready.choose(&mut rand::rng()) {
        Some(e) => Ok(e.endpoint.address.clone()),
        None => Err(no_endpoint(subset)),
    }
}

fn no_endpoint(subset: Option<&BTreeSet<String>>) -> ApiError {
    let reason = match subset {
        Some(_) => {
            "the subset hint (x-gateway-destination-endpoint-subset) matches no ready endpoint"
        }
        None => "no ready endpoint",
    };
    ApiError::Rejected(
        pdgate_scheduler::Rejection::Screened {
            reason: reason.into(),
        }
        .into(),
    )
}

/// Parses the buffered body of `api`.
///
/// Errors: a bad body (400, naming the field).
pub fn parse(api: ApiKind, body: &bytes::Bytes) -> Result<InferenceRequest, ApiError> {
    Ok(InferenceRequest::from_bytes(api, body.clone())?)
}

/// Routes `parsed`, the buffered request `req`, through the one intake `serve` uses
/// ([`pdgate_core::intake::route`]): the client's router-owned body fields removed (the
/// cleaned bytes are `parsed.body`), its copies of router-owned headers hidden from the
/// scheduler, flow control's admission, the pick and the split decision (see the module
/// docs).
///
/// Errors ([`ApiError`], answered as immediate responses): a bad body or hint (400), an
/// unknown model (404), flow control's refusals (429/503), the scheduler's rejections (503
/// screened or no endpoint, 429 saturated, pins), a subset that matches no ready endpoint
/// (503).
pub async fn route(
    epp: &Epp,
    parsed: &mut InferenceRequest,
    req: &Buffered<'_>,
) -> Result<Routed, ApiError> {
    let subset = req.subset;
    if subset.is_some() {
        let snapshot = epp.registry.snapshot();
        let any = (snapshot.endpoints.iter())
            .any(|e| e.endpoint.schedulable() && in_subset(subset, &e.endpoint));
        if !any {
            return Err(no_endpoint(subset));
        }
    }
    let h = req.headers;
    let rid = h
        .get(headers::REQUEST_ID)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let outside = |e: &Endpoint| !in_subset(subset, e);
    // The EPP trusts no caller: coordinator headers a client sent (profile, decision id,
    // forwarded revision, a conditional-decode `Prefer`) are counted as serve counts them;
    // the intake hides them from the screeners.
    let present = pdgate_core::header_scan::HeaderNames::of(h);
    intake::count_untrusted(&epp.metrics, &epp.forward_rules, h, &present);
    let routed = intake::route(
        epp.intake_handles(),
        parsed,
        &Intake {
            headers: h,
            present: &present,
            rid,
            caller: Caller::CLIENT,
            body_bytes: req.body.len() as u64,
            avoid: Some(&outside),
        },
        async |_: &mut InferenceRequest| Ok(()),
    )
    .await?;
    let result = routed.result;
    if let Some(id) = &routed.session_id {
        epp.sessions.bind(id, &result, tokio::time::Instant::now());
    }
    let prefill = result.prefill;
    let decode = result.decode;
    let snapshot = routed.snapshot;
    // `data-parallel-profile-handler`: the gateway sends to the pod's primary port and the
    // header names the rank behind it; no fallback (another pod would forward to it anyway).
    if let Some(dp) = data_parallel_profile_handler::route_of(decode.guard.state()) {
        let header = data_parallel_profile_handler::HOST_PORT_HEADER.to_string();
        return Ok(Routed {
            destinations: vec![dp.destination],
            decode,
            prefill,
            headers: vec![(header, dp.host_port)],
        });
    }
    let mut destinations = vec![decode.endpoint.endpoint.address.clone()];
    if !decode.pinned {
        destinations.extend(fallbacks(
            &snapshot.endpoints,
            &decode,
            &parsed.model,
            subset,
        ));
    }
    Ok(Routed {
        destinations,
        decode,
        prefill,
        headers: Vec::new(),
    })
}

/// Up to [`MAX_FALLBACKS`] other endpoints that could serve `pick`'s phase: schedulable, in the
/// subset, serving `model`, of the same revision (never another version) and the same role
/// as the pick; least loaded first.
fn fallbacks(
    all: &[Arc<EndpointState>],
    pick: &Pick,
    model: &str,
    subset: Option<&BTreeSet<String>>,
) -> Vec<String> {
    let chosen = &pick.endpoint.endpoint;
    let mut others: Vec<&Arc<EndpointState>> = all
        .iter()
        .filter(|e| {
            let ep = &e.endpoint;
            ep.name != chosen.name
                && ep.address != chosen.address
                && ep.schedulable()
                && in_subset(subset, ep)
                && e.load.serves(model)
                && ep.revision() == chosen.revision()
                && ep.role == chosen.role
        })
        .collect();
    others.sort_by(|a, b| a.load.queue_depth().total_cmp(&b.load.queue_depth()));
    let mut out: Vec<String> = Vec::new();
    for e in others {
        if out.len() == MAX_FALLBACKS {
            break;
        }
        if !out.contains(&e.endpoint.address) {
            out.push(e.endpoint.address.clone());
        }
    }
    out
}
