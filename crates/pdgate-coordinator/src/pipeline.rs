//! Runs one request's steps in order (design.md §2 steps 2–5, §4, §5.2):
//! `conditional-decode` (optional) → `encode` (requests with media, when the plan has an
//! encode step) → `prefill` → `decode`, or `encode` → one aggregated leg. The plan names
//! phases; the [`Dispatcher`] resolves each leg's endpoint and its answer names who served.

use crate::dispatch::{DispatchError, Dispatcher, PhaseRequest, PhaseResponse};
use crate::encode_step::{self, Encoded};
use crate::header_rules::ForwardRules;
use crate::kv_connector::KvConnector;
use crate::phase_body;
use bytes::Bytes;
use http::{HeaderMap, HeaderValue};
use pdgate_api::{headers, prefer, ApiKind, InferenceRequest, Phase};

/// Which phases a request runs, in order. It names phases, never endpoints: the dispatcher
/// resolves each leg's endpoint (design.md §4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Split the request: a prefill leg, then a decode leg with the KV handoff. A request
    /// that cannot take a handoff ([`InferenceRequest::can_split`]) runs one `Aggregated`
    /// leg instead.
    pub split: bool,
    /// The phase of the one leg of a plan that does not split: `Aggregated` for a router
    /// that runs the whole request; a per-role router's own phase (`Prefill`, `Decode`,
    /// `Encode`) when a coordinator sent it one leg.
    pub one_leg: Phase,
    /// Run the encode step: media items get an encode leg each before prefill; `false`
    /// leaves encoding to the prefill (or aggregated) endpoint.
    pub encode: bool,
    /// Run the `conditional-decode` step first: the decode leg is sent with
    /// `Prefer: if-available`; a 412 goes on with prefill then decode, any other answer is
    /// the request's. Only with `split`, `n == 1`.
    pub conditional: bool,
    /// What to do when the prefill phase cannot be served by any endpoint.
    pub prefill_fallback: PrefillFallback,
    /// The `kv_transfer_params` contract of the prefill and decode legs.
    pub kv_connector: KvConnector,
    /// The encode step's contract and fan-out.
    pub encode_settings: crate::EncodeSettings,
    /// Tokens-in prefill (llm-d `use_openai_format: false`): a chat request that carries
    /// rendered token ids ([`InferenceRequest::rendered_token_ids`]) sends its prefill leg to
    /// `/inference/v1/generate` ([`phase_body::tokens_in_prefill_bytes`]); its decode leg
    /// stays on the client's API.
    pub tokens_in: bool,
}

/// The prefill-unavailable policy (`--prefill-fallback`): what a split request does when no
/// prefill endpoint can serve it (every one failing, circuits open, none Ready).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PrefillFallback {
    /// Run the request aggregated on its decode endpoint (the default: decode pods can
    /// prefill; availability over the P/D speed-up, as Dynamo does without prefill workers).
    #[default]
    Aggregated,
    /// Fail the request with 503 naming the reason.
    Fail,
}

impl PrefillFallback {
    /// The flag value: `aggregated` or `fail`.
    pub fn as_str(self) -> &'static str {
        match self {
            PrefillFallback::Aggregated => "aggregated",
            PrefillFallback::Fail => "fail",
        }
    }
}

impl std::str::FromStr for PrefillFallback {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "aggregated" => Ok(PrefillFallback::Aggregated),
            "fail" => Ok(PrefillFallback::Fail),
            other => Err(format!(
                "`{other}` is not a prefill fallback: use `aggregated` or `fail`"
            )),
        }
    }
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

/// What happened along the way, besides the outcome. Which endpoint served each phase is
/// not here: the dispatcher records it (one record per fact).
#[derive(Debug, Default)]
pub struct Trace {
    /// The `conditional-decode` step's result, when it ran.
    pub probe: Option<Probe>,
    /// A prefill leg answered 2xx with a usable KV handoff.
    pub prefill_ran: bool,
    /// The request was split but ran aggregated because its prefill phase was unavailable:
    /// the reason (policy [`PrefillFallback::Aggregated`]).
    pub fallback: Option<String>,
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
        /// Its answer (naming who answered).
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
    /// No prefill endpoint could serve a split request and the policy is
    /// [`PrefillFallback::Fail`] (503).
    #[error("prefill unavailable: {reason}")]
    PrefillUnavailable {
        /// Why (the last prefill failure, or the scheduler's reason).
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

/// Runs `plan` for `req`, recording the probe, the prefill and any fallback in `trace`.
///
/// `req.body` holds the client's bytes: an aggregated leg (and the conditional-decode probe)
/// sends them unchanged (no re-serialization). The legs name phases; `dispatcher` resolves
/// their endpoints. `headers` are the upstream headers from
/// [`ForwardRules::upstream_request_headers`], sent on every leg; the probe adds
/// `Prefer: if-available` (a `Decode` leg; served, it ran the whole request: [`Probe::Served`]).
/// The headers `rules` forward are captured from every phase response — 2xx and
/// the probe's 412 — and sent on every later leg (design.md §5.3). `n > 1` requests never
/// relay a handoff (single consumer): they run one `Aggregated` leg (design.md §5.2). A
/// prefill leg that fails with [`DispatchError::unavailable`] follows
/// `plan.prefill_fallback`: one `Aggregated` leg (reason in
/// [`Trace::fallback`]) or [`PipelineError::PrefillUnavailable`].
pub async fn run<D: Dispatcher>(
    dispatcher: &D,
    plan: &Plan,
    req: &InferenceRequest,
    headers: &HeaderMap,
    rules: &ForwardRules,
    trace: &mut Trace,
) -> Result<Outcome<D::Body>, PipelineError> {
    let leg_headers = |captured: &HeaderMap| {
        let mut h = headers.clone();
        ForwardRules::apply(captured, &mut h);
        h
    };
    let split = plan.split && req.can_split();
    if plan.conditional && split {
        let mut h = leg_headers(&trace.captured);
        h.insert(
            headers::PREFER,
            HeaderValue::from_static(prefer::IF_AVAILABLE),
        );
        let leg = PhaseRequest {
            phase: Phase::Decode,
            api: req.kind,
            headers: h,
            body: req.body.bytes().clone(),
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
        let _ = dispatcher.collect(&resp.served, resp.body).await;
        trace.captured = rules.capture(&[&resp.headers]);
    }

    let ec = match plan.encode {
        true => {
            let h = leg_headers(&trace.captured);
            match encode_step::run(
                dispatcher,
                plan.encode_settings,
                req,
                &h,
                rules,
                &mut trace.captured,
            )
            .await?
            {
                Encoded::Params(p) => p,
                Encoded::Rejected(response) => {
                    return Ok(Outcome::Rejected {
                        phase: Phase::Encode,
                        response,
                    })
                }
            }
        }
        false => Vec::new(),
    };
    // One leg: the whole request (`Aggregated`), or a per-role router's own phase.
    let one_leg_phase = if plan.split {
        Phase::Aggregated
    } else {
        plan.one_leg
    };
    let aggregated = |ec: Vec<serde_json::Value>, captured: &HeaderMap| PhaseRequest {
        phase: one_leg_phase,
        api: req.kind,
        headers: leg_headers(captured),
        body: phase_body::aggregated_bytes(req, &ec),
    };
    if !split {
        return dispatch(dispatcher, aggregated(ec, &trace.captured))
            .await
            .map(Outcome::Final);
    };
    let rendered = req.rendered_token_ids().filter(|_| plan.tokens_in);
    let (api, body) = match &rendered {
        Some(ids) => (
            ApiKind::Generate,
            phase_body::tokens_in_prefill_bytes(req, ids, &ec, plan.kv_connector),
        ),
        None => (
            req.kind,
            phase_body::prefill_bytes(req, &ec, plan.kv_connector),
        ),
    };
    let leg = PhaseRequest {
        phase: Phase::Prefill,
        api,
        headers: leg_headers(&trace.captured),
        body,
    };
    let resp = match dispatcher.dispatch(leg).await {
        Ok(r) => r,
        Err(e) if e.unavailable => {
            let reason = e.to_string();
            if plan.prefill_fallback == PrefillFallback::Fail {
                return Err(PipelineError::PrefillUnavailable { reason });
            }
            trace.fallback = Some(reason);
            return dispatch(dispatcher, aggregated(ec, &trace.captured))
                .await
                .map(Outcome::Final);
        }
        Err(source) => {
            return Err(PipelineError::Dispatch {
                phase: Phase::Prefill,
                source,
            })
        }
    };
    let served = resp.served;
    let body = dispatcher
        .collect(&served, resp.body)
        .await
        .map_err(|source| PipelineError::Dispatch {
            phase: Phase::Prefill,
            source,
        })?;
    if !(200..300).contains(&resp.status) {
        return Ok(Outcome::Rejected {
            phase: Phase::Prefill,
            response: PhaseResponse {
                served,
                status: resp.status,
                headers: resp.headers,
                body,
            },
        });
    }
    ForwardRules::apply(&rules.capture(&[&resp.headers]), &mut trace.captured);
    // Shared storage needs nothing from the prefill's answer: the engines find the KV by the
    // prompt's tokens.
    let kv = if plan.kv_connector.needs_prefill_params() {
        phase_body::kv_params_from_prefill(&body).map_err(|reason| {
            PipelineError::BadPrefillResponse {
                endpoint: served.clone(),
                reason,
            }
        })?
    } else {
        serde_json::Map::new()
    };
    trace.prefill_ran = true;
    let leg = PhaseRequest {
        phase: Phase::Decode,
        api: req.kind,
        headers: leg_headers(&trace.captured),
        body: phase_body::decode_bytes(req, kv, plan.kv_connector),
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
