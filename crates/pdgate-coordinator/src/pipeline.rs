//! Runs one request's phases in order: prefill leg (when split) then decode leg, or one
//! aggregated leg (design.md §2 steps 2–5, §5.2).

use crate::dispatch::{DispatchError, Dispatcher, PhaseRequest, PhaseResponse, Target};
use crate::phase_body;
use bytes::Bytes;
use http::HeaderMap;
use pdgate_api::{InferenceRequest, Phase};

/// The endpoints chosen for a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Prefill endpoint when the request is split; `None` runs one aggregated leg.
    pub prefill: Option<Target>,
    /// Decode endpoint (or the aggregated one).
    pub decode: Target,
}

/// How a request ended, when some upstream answered.
#[derive(Debug)]
pub enum Outcome<B> {
    /// The last leg's response, to stream back to the client as is.
    Final(PhaseResponse<B>),
    /// The prefill leg answered non-2xx: the client gets that status and body; no decode leg
    /// was sent.
    PrefillRejected(PhaseResponse<Bytes>),
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
    /// The prefill answered 2xx without usable `kv_transfer_params`.
    #[error("prefill endpoint {endpoint} answered without a KV handoff: {reason}")]
    BadPrefillResponse {
        /// Endpoint name.
        endpoint: String,
        /// What was wrong.
        reason: String,
    },
}

/// Runs `plan` for `req`.
///
/// `raw` is the client body as received: an aggregated leg sends it unchanged (no
/// re-serialization). `headers` are the upstream headers from
/// [`crate::header_rules::upstream_request_headers`], sent on every leg.
/// `n > 1` requests never relay a handoff (single consumer): they run aggregated on the
/// decode endpoint (design.md §5.2).
pub async fn run<D: Dispatcher>(
    dispatcher: &D,
    plan: &Plan,
    req: &InferenceRequest,
    raw: &Bytes,
    headers: &HeaderMap,
) -> Result<Outcome<D::Body>, PipelineError> {
    let prefill = match &plan.prefill {
        Some(p) if req.n == 1 => p,
        _ => {
            let leg = PhaseRequest {
                phase: Phase::Aggregated,
                target: plan.decode.clone(),
                api: req.kind,
                headers: headers.clone(),
                body: raw.clone(),
            };
            return dispatch(dispatcher, leg).await.map(Outcome::Final);
        }
    };

    let leg = PhaseRequest {
        phase: Phase::Prefill,
        target: prefill.clone(),
        api: req.kind,
        headers: headers.clone(),
        body: to_bytes(phase_body::prefill_body(req)),
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
        return Ok(Outcome::PrefillRejected(PhaseResponse {
            status: resp.status,
            headers: resp.headers,
            body,
        }));
    }
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
        headers: headers.clone(),
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

fn to_bytes(body: serde_json::Map<String, serde_json::Value>) -> Bytes {
    // Serializing a Map of Values cannot fail (string keys, finite JSON numbers).
    Bytes::from(serde_json::to_vec(&body).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;
    use pdgate_api::ApiKind;
    use std::sync::Mutex;

    /// A dispatcher that records legs and answers from a script.
    struct Fake {
        legs: Mutex<Vec<PhaseRequest>>,
        prefill_status: u16,
    }

    impl Dispatcher for Fake {
        type Body = Bytes;
        async fn dispatch(&self, req: PhaseRequest) -> Result<PhaseResponse<Bytes>, DispatchError> {
            let phase = req.phase;
            self.legs.lock().unwrap().push(req);
            let (status, body): (u16, &'static [u8]) = match phase {
                Phase::Prefill => (
                    self.prefill_status,
                    br#"{"kv_transfer_params":{"remote_engine_id":"p0","remote_block_ids":[1]}}"#,
                ),
                _ => (200, b"decoded"),
            };
            Ok(PhaseResponse {
                status,
                headers: HeaderMap::new(),
                body: Bytes::from_static(body),
            })
        }
        async fn collect(&self, _: &str, body: Bytes) -> Result<Bytes, DispatchError> {
            Ok(body)
        }
    }

    fn target(n: &str) -> Target {
        Target {
            name: n.into(),
            address: format!("{n}:1"),
            revision: None,
        }
    }

    fn request(n: u32) -> (InferenceRequest, Bytes) {
        let raw = Bytes::from(format!(
            r#"{{"model":"m","prompt":"hi","n":{n},"max_tokens":9}}"#
        ));
        (
            InferenceRequest::parse(ApiKind::Completions, &raw).unwrap(),
            raw,
        )
    }

    #[tokio::test]
    async fn split_plan_sends_prefill_then_decode_with_the_handoff() {
        let fake = Fake {
            legs: Mutex::new(vec![]),
            prefill_status: 200,
        };
        let plan = Plan {
            prefill: Some(target("p0")),
            decode: target("d0"),
        };
        let (req, raw) = request(1);
        let out = run(&fake, &plan, &req, &raw, &HeaderMap::new())
            .await
            .unwrap();
        assert!(matches!(out, Outcome::Final(r) if r.body == "decoded"));
        let legs = fake.legs.lock().unwrap();
        assert_eq!(
            legs.iter()
                .map(|l| (l.phase, l.target.name.as_str()))
                .collect::<Vec<_>>(),
            [(Phase::Prefill, "p0"), (Phase::Decode, "d0")]
        );
        let decode: serde_json::Value = serde_json::from_slice(&legs[1].body).unwrap();
        assert_eq!(decode["kv_transfer_params"]["remote_engine_id"], "p0");
        assert_eq!(decode["max_tokens"], 9);
    }

    #[tokio::test]
    async fn failed_prefill_sends_no_decode_and_n_above_one_runs_aggregated() {
        let fake = Fake {
            legs: Mutex::new(vec![]),
            prefill_status: 409,
        };
        let plan = Plan {
            prefill: Some(target("p0")),
            decode: target("d0"),
        };
        let (req, raw) = request(1);
        let out = run(&fake, &plan, &req, &raw, &HeaderMap::new())
            .await
            .unwrap();
        assert!(matches!(out, Outcome::PrefillRejected(r) if r.status == 409));
        assert_eq!(fake.legs.lock().unwrap().len(), 1);

        let fake = Fake {
            legs: Mutex::new(vec![]),
            prefill_status: 200,
        };
        let (req, raw) = request(2);
        run(&fake, &plan, &req, &raw, &HeaderMap::new())
            .await
            .unwrap();
        let legs = fake.legs.lock().unwrap();
        assert_eq!(legs.len(), 1);
        assert_eq!(
            (legs[0].phase, legs[0].body.clone()),
            (Phase::Aggregated, raw)
        );
    }
}
