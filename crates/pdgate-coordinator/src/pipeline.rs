//! Runs one request's steps in order (design.md §2 steps 2–5, §4, §5.2):
//! `conditional-decode` (optional) → `encode` (requests with media, when there is an encode
//! target) → `prefill` → `decode`, or `encode` → one aggregated leg.

use crate::dispatch::{DispatchError, Dispatcher, PhaseRequest, PhaseResponse, Target};
use crate::encode_step::{self, Encoded};
use crate::header_rules::ForwardRules;
use crate::phase_body;
use bytes::Bytes;
use http::{HeaderMap, HeaderValue};
use pdgate_api::{headers, prefer, InferenceRequest, Phase};

/// Where a request's legs go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Prefill target when the request is split; `None` runs one aggregated leg.
    pub prefill: Option<Target>,
    /// Decode target (or the aggregated one).
    pub decode: Target,
    /// Encode target: media items get an encode leg each before prefill; `None` leaves
    /// encoding to the prefill (or aggregated) endpoint.
    pub encode: Option<Target>,
    /// The targets are per-role routers, not engines: every leg names its phase profile in
    /// `x-llm-d-epp-profile` (`prefill` / `decode`).
    pub routed: bool,
    /// Run the `conditional-decode` step first: the decode leg is sent with
    /// `Prefer: if-available`; a 412 goes on with prefill then decode, any other answer is
    /// the request's. Only with a prefill target, `n == 1`.
    pub conditional: bool,
}

/// Result of the `conditional-decode` step (`pdgate_conditional_decode_probes_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Probe {
    /// The decode side answered 2xx itself: no prefill leg.
    Served,
    /// 412: the decode side lacks the prefix; prefill then decode follow.
    Deferred,
    /// Transport failure or a status other than 2xx / 412, passed to the client.
    Error,
}

impl Probe {
    /// Metric label: `served`, `deferred`, `error`.
    pub fn as_str(self) -> &'static str {
        match self {
            Probe::Served => "served",
            Probe::Deferred => "deferred",
            Probe::Error => "error",
        }
    }
}

/// What happened along the way, besides the outcome.
#[derive(Debug, Default)]
pub struct Trace {
    /// The `conditional-decode` step's result, when it ran.
    pub probe: Option<Probe>,
    /// Headers of the 2xx prefill response, when a prefill leg ran.
    pub prefill_headers: Option<HeaderMap>,
    /// Headers of the probe's 412, when deferred.
    pub probe_headers: Option<HeaderMap>,
    /// Forwarded headers captured so far (sent on every later leg).
    pub captured: HeaderMap,
}

/// How a request ended, when some upstream answered.
#[derive(Debug)]
pub enum Outcome<B> {
    /// The last leg's response, to stream back to the client as is.
    Final(PhaseResponse<B>),
    /// An encode or prefill leg answered non-2xx: the client gets that status and body; no
    /// later leg was sent.
    Rejected {
        /// `Encode` or `Prefill`.
        phase: Phase,
        /// Name of the target that answered.
        target: String,
        /// Its answer.
        response: PhaseResponse<Bytes>,
    },
}

/// A pipeline failure with no upstream response to pass through.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PipelineError {
    /// A leg got no response.
    #[error("{phase} leg failed: {source}")]
    Dispatch {
        /// Phase of the failed leg.
        phase: Phase,
        /// Why.
        source: DispatchError,
    },
    /// An encoder answered 2xx without usable `ec_transfer_params`.
    #[error("encode endpoint {endpoint} answered without encoder output: {reason}")]
    BadEncodeResponse {
        /// Endpoint name.
        endpoint: String,
        /// What was wrong.
        reason: String,
    },
    /// The prefill answered 2xx without usable `kv_transfer_params`.
    #[error("prefill endpoint {endpoint} answered without a KV handoff: {reason}")]
    BadPrefillResponse {
        /// Endpoint name.
        endpoint: String,
        /// What was wrong.
        reason: String,
    },
}

/// Runs `plan` for `req`, recording the probe and prefill headers in `trace`.
///
/// `raw` is the client body as received: an aggregated leg (and the conditional-decode
/// probe) sends it unchanged (no re-serialization). `headers` are the upstream headers from
/// [`ForwardRules::upstream_request_headers`], sent on every leg; with `plan.routed` each
/// leg adds its `x-llm-d-epp-profile`, and the probe adds `Prefer: if-available`. The
/// headers `rules` forward are captured from every phase response — 2xx and the probe's
/// 412 — and sent on every later leg (design.md §5.3). `n > 1` requests never relay a
/// handoff (single consumer): they run aggregated on the decode target (design.md §5.2).
pub async fn run<D: Dispatcher>(
    dispatcher: &D,
    plan: &Plan,
    req: &InferenceRequest,
    raw: &Bytes,
    headers: &HeaderMap,
    rules: &ForwardRules,
    trace: &mut Trace,
) -> Result<Outcome<D::Body>, PipelineError> {
    let leg_headers = |phase: Phase, captured: &HeaderMap| {
        let mut h = headers.clone();
        ForwardRules::apply(captured, &mut h);
        if plan.routed {
            let profile = match phase {
                Phase::Prefill => "prefill",
                Phase::Encode => "encode",
                Phase::Decode | Phase::Aggregated => "decode",
            };
            h.insert(headers::EPP_PROFILE, HeaderValue::from_static(profile));
        }
        h
    };
    let split = plan.prefill.as_ref().filter(|_| req.n == 1);
    if plan.conditional && split.is_some() {
        let mut h = leg_headers(Phase::Decode, &trace.captured);
        h.insert(
            headers::PREFER,
            HeaderValue::from_static(prefer::IF_AVAILABLE),
        );
        let leg = PhaseRequest {
            phase: Phase::Decode,
            target: plan.decode.clone(),
            api: req.kind,
            headers: h,
            body: raw.clone(),
        };
        let resp = match dispatch(dispatcher, leg).await {
            Ok(r) => r,
            Err(e) => {
                trace.probe = Some(Probe::Error);
                return Err(e);
            }
        };
        if resp.status != 412 {
            let ok = (200..300).contains(&resp.status);
            trace.probe = Some(if ok { Probe::Served } else { Probe::Error });
            return Ok(Outcome::Final(resp));
        }
        trace.probe = Some(Probe::Deferred);
        // The 412's body is an error message; read it so the connection can be reused.
        let _ = dispatcher.collect(&plan.decode.name, resp.body).await;
        trace.captured = rules.capture(&[&resp.headers]);
        trace.probe_headers = Some(resp.headers);
    }

    let ec = match &plan.encode {
        Some(target) => {
            let h = leg_headers(Phase::Encode, &trace.captured);
            match encode_step::run(dispatcher, target, req, &h, rules, &mut trace.captured).await? {
                Encoded::Params(p) => p,
                Encoded::Rejected(response) => {
                    return Ok(Outcome::Rejected {
                        phase: Phase::Encode,
                        target: target.name.clone(),
                        response,
                    })
                }
            }
        }
        None => Vec::new(),
    };
    let Some(prefill) = split else {
        let body = if ec.is_empty() {
            raw.clone()
        } else {
            to_bytes(phase_body::with_encoder_output(req.body.clone(), ec))
        };
        let leg = PhaseRequest {
            phase: Phase::Aggregated,
            target: plan.decode.clone(),
            api: req.kind,
            headers: leg_headers(Phase::Aggregated, &trace.captured),
            body,
        };
        return dispatch(dispatcher, leg).await.map(Outcome::Final);
    };
    let leg = PhaseRequest {
        phase: Phase::Prefill,
        target: prefill.clone(),
        api: req.kind,
        headers: leg_headers(Phase::Prefill, &trace.captured),
        body: to_bytes(phase_body::with_encoder_output(
            phase_body::prefill_body(req),
            ec,
        )),
    };
    let resp = dispatch(dispatcher, leg).await?;
    let body = dispatcher
        .collect(&prefill.name, resp.body)
        .await
        .map_err(|source| PipelineError::Dispatch {
            phase: Phase::Prefill,
            source,
        })?;
    if !(200..300).contains(&resp.status) {
        return Ok(Outcome::Rejected {
            phase: Phase::Prefill,
            target: prefill.name.clone(),
            response: PhaseResponse {
                status: resp.status,
                headers: resp.headers,
                body,
            },
        });
    }
    ForwardRules::apply(&rules.capture(&[&resp.headers]), &mut trace.captured);
    trace.prefill_headers = Some(resp.headers);
    let kv = phase_body::kv_params_from_prefill(&body).map_err(|reason| {
        PipelineError::BadPrefillResponse {
            endpoint: prefill.name.clone(),
            reason,
        }
    })?;
    let leg = PhaseRequest {
        phase: Phase::Decode,
        target: plan.decode.clone(),
        api: req.kind,
        headers: leg_headers(Phase::Decode, &trace.captured),
        body: to_bytes(phase_body::decode_body(req, kv)),
    };
    dispatch(dispatcher, leg).await.map(Outcome::Final)
}

async fn dispatch<D: Dispatcher>(
    d: &D,
    leg: PhaseRequest,
) -> Result<PhaseResponse<D::Body>, PipelineError> {
    let phase = leg.phase;
    d.dispatch(leg)
        .await
        .map_err(|source| PipelineError::Dispatch { phase, source })
}

pub(crate) fn to_bytes(body: serde_json::Map<String, serde_json::Value>) -> Bytes {
    // Serializing a Map of Values cannot fail (string keys, finite JSON numbers).
    Bytes::from(serde_json::to_vec(&body).unwrap_or_default())
}

#[cfg(test)]
#[path = "pipeline_tests.rs"]
mod tests;
