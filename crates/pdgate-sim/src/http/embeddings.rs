//! `POST /v1/embeddings` (pooling, as vLLM 0.32 serves it,
//! `vllm/entrypoints/pooling/embed/{protocol,serving}.py`): JSON only, never decodes.
//!
//! - Request: `input` (a string, token ids, a batch of strings or of token-id lists) or chat
//!   `messages`, `model?`, `encoding_format` (`float` only), `request_id?`. No
//!   `kv_transfer_params` (vLLM's embedding request has none; the shared-storage KV connector
//!   is not consulted either).
//! - Each input runs as one engine request of the prefill step only ([`SeqMode::Pooling`]):
//!   it loads the batch and the prefix cache as a prefill does; no generated token counted.
//! - Answer: `EmbeddingResponse.model_dump()`: `{"id":"embd-<x-request-id, else the body's
//!   request_id, else random>","object":"list","created":…,"model":…,"data":[{"index":i,
//!   "object":"embedding","embedding":[…]}],"usage":{"prompt_tokens":N,"total_tokens":N,
//!   "completion_tokens":0,"prompt_tokens_details":null,"completion_tokens_details":null}}`,
//!   one `data` entry per input in order, `prompt_tokens` summed over the batch.
//! - The vector: [`EMBEDDING_DIM`] float32 values, L2-normalised, derived from the input's
//!   token ids only ([`embedding`]): the same input gives the same vector on any worker.

use super::answer::{count_success, json_response};
use super::infer::{check_model, inject_and_delay};
use super::writer::{js, random_uuid, unix_now};
use super::{encode, error, error_for, Worker};
use crate::engine::{SeqEvent, SeqMode, SeqRequest, SubmitError};
use crate::tokenizer;
use axum::extract::State;
use axum::response::Response;
use bytes::Bytes;
use http::HeaderMap;
use pdgate_api::headers::REQUEST_ID;
use pdgate_api::media::media_items;
use pdgate_api::{ApiKind, InferenceRequest, Role};
use serde_json::Value;
use std::sync::Arc;
use tokio::time::Instant;
use xxhash_rust::xxh3::xxh3_64;

/// Dimension of the simulated embeddings.
pub const EMBEDDING_DIM: usize = 16;

/// The embedding of a prompt's token ids: [`EMBEDDING_DIM`] values in [-1, 1] hashed from
/// the ids, L2-normalised, rounded to float32 (a model's output dtype).
pub fn embedding(tokens: &[u32]) -> Vec<f64> {
    let seed = tokenizer::output_seed(tokens);
    let raw: Vec<f64> = (0..EMBEDDING_DIM as u64)
        .map(|d| {
            let h = xxh3_64(&[seed.to_le_bytes(), d.to_le_bytes()].concat());
            (h >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
        })
        .collect();
    let norm = raw
        .iter()
        .map(|x| x * x)
        .sum::<f64>()
        .sqrt()
        .max(f64::MIN_POSITIVE);
    raw.iter().map(|x| f64::from((x / norm) as f32)).collect()
}

/// The token ids of each input of the batch, in order.
fn inputs(req: &InferenceRequest) -> Vec<Vec<u32>> {
    match req.body.get("input") {
        Some(Value::Array(items)) if items.first().is_some_and(Value::is_string) => items
            .iter()
            .map(|i| tokenizer::tokenize(i.as_str().unwrap_or_default()))
            .collect(),
        Some(Value::Array(items)) if items.first().is_some_and(Value::is_array) => items
            .iter()
            .map(|i| {
                let ids = i.as_array().map(Vec::as_slice).unwrap_or_default();
                ids.iter()
                    .filter_map(|t| t.as_u64().and_then(|t| u32::try_from(t).ok()))
                    .collect()
            })
            .collect(),
        _ => vec![tokenizer::prompt_tokens(&req.prompt)],
    }
}

/// `POST /v1/embeddings`.
pub(super) async fn embeddings(
    State(w): State<Arc<Worker>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let arrived = Instant::now();
    let kind = ApiKind::Embeddings;
    let req = match InferenceRequest::parse(kind, &body) {
        Ok(r) => r,
        Err(e) => return error(400, e.to_string()),
    };
    if let Some(resp) = check_model(&w, &req) {
        return resp;
    }
    match req.body.get("encoding_format") {
        None | Some(Value::Null) => {}
        Some(Value::String(f)) if f == "float" => {}
        Some(_) => return error(
            400,
            "field `encoding_format` must be \"float\" (the simulator answers float vectors only)",
        ),
    }
    let base = match (
        headers.get(REQUEST_ID).and_then(|v| v.to_str().ok()),
        req.body.get("request_id"),
    ) {
        (Some(h), _) => h.to_string(),
        (None, Some(Value::String(s))) => s,
        (None, None | Some(Value::Null)) => random_uuid(),
        (None, Some(_)) => return error(400, "field `request_id` must be a string"),
    };
    if w.role == Role::Encode {
        return error(400, encode::ENCODE_COMPLETIONS);
    }
    if let Some(resp) = inject_and_delay(&w, kind).await {
        return resp;
    }
    let media = media_items(&req.body);
    if let Err(f) = encode::resolve_media(&w, &req.body, &media).await {
        return error_for(kind, f.status, f.message());
    }
    let batch = inputs(&req);
    let mut pending = Vec::with_capacity(batch.len());
    for tokens in &batch {
        let submitted = w.engine.submit(SeqRequest {
            tokens: tokens.clone(),
            max_tokens: 1,
            mode: SeqMode::Pooling,
            external_tokens: None,
            arrived,
        });
        match submitted {
            Ok(rx) => pending.push(rx),
            Err(e @ SubmitError::Invalid(_)) => return error_for(kind, 400, e.to_string()),
            Err(e @ SubmitError::Closed) => return error_for(kind, 503, e.to_string()),
        }
    }
    let mut prompt_tokens = 0;
    for mut rx in pending {
        loop {
            match rx.recv().await {
                Some(SeqEvent::Token) => {}
                Some(SeqEvent::Finished(fin)) => {
                    prompt_tokens += fin.prompt_tokens;
                    break;
                }
                None => {
                    return error_for(kind, 503, "the engine stopped before the request finished")
                }
            }
        }
    }
    let data: Vec<String> = batch
        .iter()
        .enumerate()
        .map(|(i, tokens)| {
            let v = serde_json::to_string(&embedding(tokens)).expect("floats serialize");
            format!(r#"{{"index":{i},"object":"embedding","embedding":{v}}}"#)
        })
        .collect();
    let body = format!(
        concat!(
            r#"{{"id":{},"object":"list","created":{},"model":{},"data":[{}],"#,
            r#""usage":{{"prompt_tokens":{},"total_tokens":{},"completion_tokens":0,"#,
            r#""prompt_tokens_details":null,"completion_tokens_details":null}}}}"#
        ),
        js(&format!("embd-{base}")),
        unix_now(),
        js(&w.cfg.model),
        data.join(","),
        prompt_tokens,
        prompt_tokens
    );
    count_success(&w, kind, SeqMode::Pooling);
    json_response(body.into_bytes())
}
