//! The one path from a parsed client request to its pick, called by both fronts (`pdgate
//! serve`'s proxy and `pdgate epp`'s exchange), so that what protects one protects the other
//! by construction (issue 26):
//!
//! 1. [`clean`]: coordinator headers from an untrusted caller are counted and never read; a
//!    client's router-owned body fields ([`pdgate_coordinator::owned`], e.g.
//!    `kv_transfer_params`) are removed before any engine can see them — only the router
//!    makes KV leases;
//! 2. [`route`]: the front's pre-steps, the prompt tokens, the model check, the request's
//!    media keys, the scheduler's header view (a client's copies of router-owned and
//!    forwarded headers hidden), the routing hints, the session, admission (flow control),
//!    the pick and the split decision.
//!
//! Sources: design.md §2 (life of a request), §5.2 (single-consumer handoff), §5.3 (headers
//! between hops).

use crate::errors::ApiError;
use crate::flow_control::{Admission, FlowController, Objectives};
use crate::flow_key::FlowHeadersFrom;
use crate::header_scan::HeaderNames;
use crate::metrics::Metrics;
use crate::prompt_tokens::PromptTokens;
use crate::session::SessionTable;
use http::{HeaderMap, HeaderValue};
use pdgate_api::hints::RoutingHints;
use pdgate_api::{headers, prefer, InferenceRequest, Phase};
use pdgate_coordinator::header_rules::ForwardRules;
use pdgate_fleet::EndpointRegistry;
use pdgate_scheduler::{
    Endpoint, Rejection, RequestHeaders, Scheduler, SchedulingRequest, SchedulingResult, Snapshot,
};
use std::sync::Arc;
use std::time::Instant;

/// The shared handles the intake reads (the stage takes what it uses, not a front's state).
#[derive(Clone, Copy)]
pub struct IntakeHandles<'a> {
    /// The scheduler.
    pub scheduler: &'a Scheduler,
    /// Current endpoints.
    pub registry: &'a EndpointRegistry,
    /// The router's metrics.
    pub metrics: &'a Metrics,
    /// `x-session-id` bindings.
    pub sessions: &'a SessionTable,
    /// The `token-producer` step, when configured.
    pub tokens: Option<&'a PromptTokens>,
    /// Admission before scheduling.
    pub flow: &'a Arc<FlowController>,
    /// InferenceObjective priorities.
    pub objectives: &'a Objectives,
    /// Whom flow identity headers are honoured from.
    pub flow_headers_from: crate::flow_key::FlowHeadersFrom,
    /// Headers forwarded between hops (`forward_response_headers`): a client's copies are
    /// hidden from the scheduler.
    pub forward_rules: &'a ForwardRules,
}

/// What the trust boundary decided about a request's caller.
#[derive(Debug, Clone, Copy)]
pub struct Caller<'a> {
    /// The caller passed the trust boundary (a trusted network or the coordinator token,
    /// [`crate::trust`]): its coordinator headers count.
    pub trusted: bool,
    /// The scheduling profile a trusted coordinator asked for (`x-llm-d-epp-profile`).
    pub profile: Option<&'a str>,
    /// A coordinator sending a phase leg to this per-role router: its body fields and
    /// forwarded headers are the contract between hops and are kept.
    pub coordinator: bool,
    /// The client's address, when the front knows it (the fairness id of a caller whose
    /// flow headers are not honoured).
    pub client: Option<std::net::IpAddr>,
}

impl Caller<'_> {
    /// A client, trusted for nothing (the EPP's callers; `serve`'s untrusted callers).
    pub const CLIENT: Caller<'static> = Caller {
        trusted: false,
        profile: None,
        coordinator: false,
        client: None,
    };
}

/// Counts (and logs, rate-limited) the coordinator-to-router headers an untrusted caller
/// sent; their values are never read ([`crate::trust`]).
pub fn count_untrusted(
    metrics: &Metrics,
    forward_rules: &ForwardRules,
    h: &HeaderMap,
    present: &HeaderNames<'_>,
) {
    let probe = asks_probe(h, present);
    let dropped = crate::trust::PROFILE_HEADERS
        .iter()
        .copied()
        .chain([headers::REVISION_DECISION_ID])
        .chain(forward_rules.names())
        .filter(|n| present.has(n))
        .chain(probe.then_some(headers::PREFER));
    count_ignored(
        metrics,
        dropped,
        "coordinator header from an untrusted caller dropped \
         (see --trusted-coordinator-networks, --coordinator-token-file)",
    );
}

/// Counts each of `names` in `pdgate_untrusted_headers_dropped_total{header}` and logs the
/// first with `why` (rate-limited): the one record of headers ignored from an untrusted caller.
fn count_ignored<'n>(metrics: &Metrics, names: impl Iterator<Item = &'n str>, why: &str) {
    let mut any = None;
    for name in names {
        metrics
            .untrusted_headers_dropped
            .with_label_values(&[name])
            .inc();
        any.get_or_insert(name);
    }
    if let Some(name) = any {
        if crate::log_limit::allow(&crate::log_limit::UNTRUSTED_HEADERS) {
            tracing::warn!(header = name, "{why}");
        }
    }
}

/// Counts (and logs, rate-limited) the flow identity headers ([`crate::flow_key::FLOW_HEADERS`])
/// a caller sent whose flow headers are not honoured ([`FlowHeadersFrom`]).
fn count_untrusted_flow(metrics: &Metrics, present: &HeaderNames<'_>) {
    let names = crate::flow_key::FLOW_HEADERS
        .into_iter()
        .filter(|n| present.has(n));
    count_ignored(
        metrics,
        names,
        "flow-control header from an untrusted caller ignored (see --flow-headers-from)",
    );
}

/// True when the request carries `Prefer: if-available` (a conditional-decode probe).
pub fn asks_probe(h: &HeaderMap, present: &HeaderNames<'_>) -> bool {
    present.has(headers::PREFER)
        && prefer::prefers(
            h.get_all(headers::PREFER)
                .iter()
                .filter_map(|v| v.to_str().ok()),
            prefer::IF_AVAILABLE,
        )
}

/// Step 1 for every request of a client (never for a coordinator's phase leg): its
/// router-owned body fields are removed from the parsed body and its bytes; each is counted
/// (`pdgate_client_fields_dropped_total{field}`) and logged (rate-limited).
pub fn clean(metrics: &Metrics, req: &mut InferenceRequest, caller: Caller<'_>) {
    if caller.coordinator {
        return;
    }
    for field in pdgate_coordinator::owned::strip_request(req) {
        metrics
            .client_fields_dropped
            .with_label_values(&[field])
            .inc();
        if crate::log_limit::allow(&crate::log_limit::CLIENT_FIELDS) {
            tracing::warn!(field, "router-owned field removed from a client request");
        }
    }
}

/// The first router-owned field ([`pdgate_coordinator::owned::ROUTER_OWNED_FIELDS`]) named as
/// a key anywhere in a JSON body, `None` when there is none or the body is not JSON. For a
/// body on a path the router does not parse (so [`clean`] cannot remove the field in place):
/// an engine that decodes the path (uvicorn percent-decodes `/v1/%63ompletions`) would
/// otherwise read a client's `kv_transfer_params` (issue 26). Bodies that cannot mention one
/// ([`pdgate_coordinator::owned::mentions`]) are never parsed.
pub fn owned_field_in(body: &[u8]) -> Option<&'static str> {
    fn find(v: &serde_json::Value) -> Option<&'static str> {
        match v {
            serde_json::Value::Object(m) => {
                for (k, v) in m {
                    let owned = pdgate_coordinator::owned::ROUTER_OWNED_FIELDS.iter();
                    if let Some(f) = owned.copied().find(|f| f == k) {
                        return Some(f);
                    }
                    if let Some(f) = find(v) {
                        return Some(f);
                    }
                }
                None
            }
            serde_json::Value::Array(a) => a.iter().find_map(find),
            _ => None,
        }
    }
    if !pdgate_coordinator::owned::mentions(body) {
        return None;
    }
    find(&serde_json::from_slice(body).ok()?)
}

/// Routing-hint headers must be readable and unambiguous: a value that is not visible ASCII,
/// or the same header given twice with different values, is a 400 naming it (never read as
/// absent, which would route the request freely).
pub fn check_hint_headers(h: &HeaderMap, present: &HeaderNames<'_>) -> Result<(), ApiError> {
    for name in pdgate_api::hints::HINT_HEADERS {
        if !present.has(name) {
            continue;
        }
        let mut values = h.get_all(*name).iter();
        let Some(first) = values.next() else {
            continue;
        };
        let bad = |reason: &str| ApiError::InvalidHeader {
            header: name,
            reason: reason.to_string(),
        };
        if first.to_str().is_err() {
            return Err(bad("not a visible ASCII string"));
        }
        if values.any(|v| v != first) {
            return Err(bad("given more than once with different values"));
        }
    }
    Ok(())
}

/// Request headers as the scheduler's plugins read them.
pub struct SchedulerHeaders<'a>(pub &'a HeaderMap);

impl RequestHeaders for SchedulerHeaders<'_> {
    fn header(&self, name: &str) -> Option<&str> {
        self.0.get(name).and_then(|v| v.to_str().ok())
    }
}

/// The names a client's scheduler view hides: router-owned (internal) headers, the profile
/// headers, and every forwarded header (a client must not choose a revision or a decision
/// id).
fn hidden_names(rules: &ForwardRules) -> impl Iterator<Item = &str> {
    rules
        .names()
        .chain(headers::INTERNAL.iter().copied())
        .chain(crate::trust::PROFILE_HEADERS.iter().copied())
        .chain([headers::DISAGG_REVISION])
}

/// One request as a front hands it to [`route`].
pub struct Intake<'a> {
    /// The client's headers (as received).
    pub headers: &'a HeaderMap,
    /// Their names, scanned once by the front ([`HeaderNames::of`]).
    pub present: &'a HeaderNames<'a>,
    /// The request id (`x-request-id`).
    pub rid: &'a str,
    /// What the trust boundary decided.
    pub caller: Caller<'a>,
    /// Body bytes as received (flow control's size).
    pub body_bytes: u64,
    /// Endpoints the front excludes (`serve`: open breakers; `epp`: outside the data
    /// plane's subset hint).
    pub avoid: Option<&'a (dyn Fn(&Endpoint) -> bool + Sync)>,
}

/// The intake's answer: everything a front needs to send the request on.
pub struct Routed {
    /// The pick; a prefill pick only when the request is split.
    pub result: SchedulingResult,
    /// The request is split (prefill then decode): the decider chose a prefill endpoint and
    /// the request can take a KV handoff ([`InferenceRequest::can_split`]).
    pub split: bool,
    /// The decider wanted a split no prefill endpoint could serve: why (the front applies
    /// its prefill-unavailable policy).
    pub prefill_unavailable: Option<String>,
    /// The session id of the request, when it names one.
    pub session_id: Option<String>,
    /// The revision decision id the scheduler saw (shared with encode picks), when one was
    /// made for the request.
    pub decision: Option<HeaderValue>,
    /// With flow control's `enableEviction`: the ticket that lets it evict the request; keep
    /// it with the answer.
    pub eviction: Option<crate::flow_eviction::InFlight>,
    /// With a program-aware band: the ticket that reports the answer's cost; keep it with
    /// the answer ([`crate::flow_programs::metered`]).
    pub program: Option<crate::flow_programs::ProgramTicket>,
    /// The endpoint snapshot the pick was made on.
    pub snapshot: Arc<Snapshot>,
}

/// Admission before scheduling ([`crate::flow_control`]): with the `flowControl` gate the
/// request waits for its turn; without it only a sheddable request (priority < 0) can be
/// refused, while the pool is saturated.
///
/// Errors: the flow-control outcome as [`ApiError::Dropped`] (429/503 with
/// `x-llm-d-request-dropped-reason`); a bad fairness-id header → 400.
async fn admit(
    h: IntakeHandles<'_>,
    headers: Option<&HeaderMap>,
    client: Option<std::net::IpAddr>,
    bytes: u64,
    priority: i32,
) -> Result<Option<Admission>, ApiError> {
    if h.flow.gated() {
        let key = match headers {
            Some(headers) => crate::flow_control::flow_key(headers, h.objectives, bytes)?,
            None => crate::flow_key::untrusted_flow_key(client, bytes),
        };
        return h
            .flow
            .admit(key)
            .await
            .map(Some)
            .map_err(|o| ApiError::dropped(o, false));
    }
    h.flow
        .legacy_check(priority)
        .map_err(|o| ApiError::dropped(o, true))?;
    Ok(None)
}

/// Step 2, the one routing function of both fronts (see the module docs): runs `pre_steps`
/// on a client's request (`serve`'s render and media steps; the EPP has none), then turns
/// the parsed request and its headers into the pick and the split decision. The request is
/// [`clean`]ed first.
///
/// Errors ([`ApiError`]): a pre-step's error; an unknown model (404); an unreadable or
/// ambiguous hint header or hint (400, naming it); an unknown profile (400 naming
/// `x-llm-d-epp-profile`); flow control's refusal (429/503); the scheduler's rejections.
pub async fn route<P>(
    h: IntakeHandles<'_>,
    req: &mut InferenceRequest,
    intake: &Intake<'_>,
    pre_steps: P,
) -> Result<Routed, ApiError>
where
    P: AsyncFnOnce(&mut InferenceRequest) -> Result<(), ApiError>,
{
    let caller = intake.caller;
    let headers = intake.headers;
    let present = intake.present;
    clean(h.metrics, req, caller);
    let flow_trusted = caller.trusted || h.flow_headers_from == FlowHeadersFrom::Any;
    if !flow_trusted {
        count_untrusted_flow(h.metrics, present);
    }
    if !caller.coordinator {
        pre_steps(req).await?;
    }
    let snapshot = h.registry.snapshot();
    crate::prompt_tokens::tokenize_prompt(h.tokens, req, &snapshot, h.metrics).await;
    if !h.registry.model_may_exist(&req.model) {
        return Err(ApiError::ModelNotFound(req.model.clone()));
    }
    // The request's multimodal items, hashed once: the encode decider and the encoder-cache
    // scorer read them.
    let media = pdgate_api::media::media_keys(&req.body);
    // A client's own copies of forwarded and router-owned headers are hidden from the
    // screeners; from a coordinator, forwarded headers are the contract between hops.
    let own_view: HeaderMap;
    let view = if caller.coordinator {
        headers
    } else {
        let untrusted_flow = (!flow_trusted).then_some(crate::flow_key::FLOW_HEADERS);
        let strip: Vec<&str> = hidden_names(h.forward_rules)
            .chain(untrusted_flow.into_iter().flatten())
            .filter(|n| present.has(n))
            .collect();
        if strip.is_empty() && media.is_empty() {
            // The common case: nothing to hide, nothing to add — no copy of the headers.
            headers
        } else {
            let mut v = headers.clone();
            for name in strip {
                v.remove(name);
            }
            if !media.is_empty() {
                // This request's own decision id, shared with its encode picks (never sent
                // upstream).
                v.insert(
                    headers::REVISION_DECISION_ID,
                    crate::request_ids::decision_id(),
                );
            }
            own_view = v;
            &own_view
        }
    };
    let conditional = caller.trusted && asks_probe(headers, present);
    check_hint_headers(headers, present)?;
    let hints = RoutingHints::parse(
        |n| {
            present
                .has(n)
                .then(|| headers.get(n)?.to_str().ok())
                .flatten()
        },
        &req.body,
    )?;
    let decision = view.get(headers::REVISION_DECISION_ID).cloned();
    let session_id = hints.session_id.as_ref().map(|s| s.value.clone());
    let session = (session_id.as_deref()).and_then(|id| h.sessions.lookup(id, now()));
    // Flow identity (priority, fairness id) from a trusted source only.
    let flow_headers = flow_trusted.then_some(headers);
    let priority = flow_headers.map_or(0, |fh| crate::flow_control::priority(fh, h.objectives));
    // The admission counts the request as pending load until it has booked its endpoint.
    let mut admission = admit(h, flow_headers, caller.client, intake.body_bytes, priority).await?;
    let started = Instant::now();
    let scheduler_headers = SchedulerHeaders(view);
    let mut result = h
        .scheduler
        .schedule(
            &SchedulingRequest {
                profile: caller.profile,
                conditional,
                headers: &scheduler_headers,
                hints: (!hints.is_empty()).then_some(&hints),
                session: session.as_ref(),
                avoid: intake.avoid,
                media: &media,
                priority: Some(priority),
                // The scheduler reads no clock: every time-dependent decision uses this.
                now_ms: pdgate_scheduler::monotonic_ms(),
                ..SchedulingRequest::new(intake.rid, &req.model, &req.prompt)
            },
            &snapshot,
        )
        .inspect_err(|e| {
            if let Rejection::Pin { reason, .. } = e.reason {
                h.metrics.pin_rejections.with_label_values(&[reason]).inc();
            }
        })
        .map_err(|e| match e.reason {
            Rejection::UnknownProfile(_) => ApiError::InvalidHeader {
                header: headers::EPP_PROFILE,
                reason: e.reason.to_string(),
            },
            _ => ApiError::Rejected(e),
        })?;
    let eviction = admission.as_mut().and_then(Admission::take_ticket);
    let program = admission.as_mut().and_then(Admission::take_program);
    drop(admission);
    h.metrics
        .scheduling
        .observe(started.elapsed().as_secs_f64());
    // A handoff is single-consumer: with `n > 1`, an API without KV handoff or a stored
    // response, decode runs the request whole, and says so (design.md §5.2).
    let split = result.prefill.is_some() && req.can_split();
    if result.prefill.is_some() && !split {
        result.decode.phase = Phase::Aggregated;
        result.prefill = None;
    }
    let prefill_unavailable = result.prefill_unavailable.clone();
    Ok(Routed {
        result,
        split,
        prefill_unavailable,
        session_id,
        decision,
        eviction,
        program,
        snapshot,
    })
}

fn now() -> tokio::time::Instant {
    tokio::time::Instant::now()
}
