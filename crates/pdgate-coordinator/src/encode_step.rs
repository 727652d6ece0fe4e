//! The `encode` step: one encode leg per media item of the request (images, audio, video),
//! at most [`EncodeSettings::parallelism`] at a time, before prefill (vLLM encoder
//! disaggregation; the contract of the answers is the [`crate::EcConnector`]).

use crate::dispatch::{DispatchError, Dispatcher, PhaseRequest, PhaseResponse};
use crate::ec_connector::EncodeSettings;
use crate::header_rules::ForwardRules;
use crate::pipeline::PipelineError;
use bytes::Bytes;
use futures_util::stream::{self, StreamExt};
use http::HeaderMap;
use pdgate_api::media::{encode_leg_body, media_items, EC_TRANSFER_PARAMS};
use pdgate_api::{ApiKind, InferenceRequest, Phase};
use serde_json::Value;

/// What the encode step produced.
#[derive(Debug)]
pub enum Encoded {
    /// The `ec_transfer_params` entries of every item, in item order (empty: no media).
    Params(Vec<Value>),
    /// An encode leg answered non-2xx (the first in item order): the request ends with it.
    Rejected(PhaseResponse<Bytes>),
}

/// Runs the encode legs of `req` (the dispatcher picks each one's endpoint) with `headers`
/// (the same headers on every leg, so they share one revision draw through the decision
/// id). Forwarded headers of the 2xx responses are merged by `rules` (most frequent value,
/// ties to the earliest item) into `captured`.
///
/// Errors: a leg got no response, or (connector `pdgate`) a 2xx answer had no
/// `ec_transfer_params` array.
pub async fn run<D: Dispatcher>(
    dispatcher: &D,
    settings: EncodeSettings,
    req: &InferenceRequest,
    headers: &HeaderMap,
    rules: &ForwardRules,
    captured: &mut HeaderMap,
) -> Result<Encoded, PipelineError> {
    let items = media_items(&req.body);
    if items.is_empty() {
        return Ok(Encoded::Params(Vec::new()));
    }
    let legs: Vec<PhaseRequest> = items
        .iter()
        .map(|item| PhaseRequest {
            phase: Phase::Encode,
            api: ApiKind::ChatCompletions,
            headers: headers.clone(),
            body: crate::pipeline::to_bytes(encode_leg_body(&req.model, item)),
        })
        .collect();
    // `buffered` keeps item order while running up to `parallelism` legs at once.
    let answers: Vec<_> = stream::iter(legs)
        .map(|leg| one_leg(dispatcher, leg))
        .buffered(settings.parallelism.max(1))
        .collect()
        .await;
    let mut responses = Vec::with_capacity(answers.len());
    for a in answers {
        let r = a.map_err(|source| PipelineError::Dispatch {
            phase: Phase::Encode,
            source,
        })?;
        if !(200..300).contains(&r.status) {
            return Ok(Encoded::Rejected(r));
        }
        responses.push(r);
    }
    let heads: Vec<&HeaderMap> = responses.iter().map(|r| &r.headers).collect();
    ForwardRules::apply(&rules.capture(&heads), captured);
    let mut params = Vec::with_capacity(items.len());
    if !settings.connector.carries_params() {
        // Shared storage: the prefill engine loads each item by its mm_hash.
        return Ok(Encoded::Params(params));
    }
    for r in &responses {
        let entries = serde_json::from_slice::<Value>(&r.body)
            .ok()
            .and_then(|v| v.get(EC_TRANSFER_PARAMS).and_then(Value::as_array).cloned())
            .ok_or_else(|| PipelineError::BadEncodeResponse {
                endpoint: r.served.clone(),
                reason: format!("no `{EC_TRANSFER_PARAMS}` array in the answer"),
            })?;
        params.extend(entries);
    }
    Ok(Encoded::Params(params))
}

/// Sends one encode leg and reads its whole answer.
async fn one_leg<D: Dispatcher>(
    dispatcher: &D,
    leg: PhaseRequest,
) -> Result<PhaseResponse<Bytes>, DispatchError> {
    let resp = dispatcher.dispatch(leg).await?;
    let body = dispatcher.collect(&resp.served, resp.body).await?;
    Ok(PhaseResponse {
        served: resp.served,
        status: resp.status,
        headers: resp.headers,
        body,
    })
}
