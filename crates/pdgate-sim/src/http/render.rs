//! `POST /v1/completions/render` and `POST /v1/chat/completions/render`: the prompt as the
//! engine would run it, without running it (vLLM's render API, in vLLM 0.32 and the
//! GPU-less `vllm launch render` server). A chat request's messages become the prompt by the
//! same rule as on `/v1/chat/completions` (`pdgate_api::openai::flatten_messages`), then the
//! simulator's tokenizer.
//!
//! Shapes (vLLM `vllm/entrypoints/serve/disagg/protocol.py`, `GenerateRequest`): completions
//! answer a JSON array with one object per prompt (the simulator takes one prompt per request,
//! as on `/v1/completions`), chat answers one object:
//! `{request_id: "cmpl-…"|"chatcmpl-…", token_ids, features: null, sampling_params, model,
//! stream, stream_options, cache_salt, priority, kv_transfer_params: null}`.
//! `sampling_params` carries the subset the simulator reads: `n`, `temperature`, `top_p`,
//! `seed`, `max_tokens` (default: what is left of `max_model_len`, as vLLM).

use super::{error, request_id, Worker};
use crate::tokenizer;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use bytes::Bytes;
use http::HeaderMap;
use pdgate_api::{ApiKind, InferenceRequest};
use serde_json::{json, Value};
use std::sync::Arc;

pub(super) async fn completions(
    State(w): State<Arc<Worker>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    match render(&w, ApiKind::Completions, &headers, &body) {
        Ok(r) => Json(vec![r]).into_response(),
        Err((status, message)) => error(status, message),
    }
}

pub(super) async fn chat_completions(
    State(w): State<Arc<Worker>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    match render(&w, ApiKind::ChatCompletions, &headers, &body) {
        Ok(r) => Json(r).into_response(),
        Err((status, message)) => error(status, message),
    }
}

/// One rendered prompt, or the error's status and message (400 bad body or prompt too long,
/// 404 unknown model).
fn render(
    w: &Worker,
    kind: ApiKind,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Value, (u16, String)> {
    let req = InferenceRequest::parse(kind, body).map_err(|e| (400, e.to_string()))?;
    if req.model != w.cfg.model {
        return Err((404, format!("The model `{}` does not exist.", req.model)));
    }
    let tokens = tokenizer::prompt_tokens(&req.prompt);
    if tokens.is_empty() {
        return Err((400, "No token_ids rendered".into()));
    }
    let max_model_len = w.cfg.max_model_len;
    if tokens.len() >= max_model_len {
        return Err((
            400,
            format!(
                "This model's maximum context length is {max_model_len} tokens. However, your request has {} input tokens.",
                tokens.len()
            ),
        ));
    }
    let field = |name: &str| -> Value {
        req.body
            .raw(name)
            .and_then(|raw| serde_json::from_str(raw).ok())
            .unwrap_or(Value::Null)
    };
    let or = |v: Value, default: Value| if v.is_null() { default } else { v };
    let max_tokens = req
        .max_tokens
        .map_or(max_model_len - tokens.len(), |m| m as usize);
    let sampling_params = json!({
        "n": req.n,
        "temperature": or(field("temperature"), json!(1.0)),
        "top_p": or(field("top_p"), json!(1.0)),
        "seed": field("seed"),
        "max_tokens": max_tokens,
    });
    let prefix = match kind {
        ApiKind::Completions => "cmpl",
        _ => "chatcmpl",
    };
    Ok(json!({
        "request_id": format!("{prefix}-{}", request_id(headers)),
        "token_ids": tokens,
        "features": null,
        "sampling_params": sampling_params,
        "model": req.model,
        "stream": req.stream,
        "stream_options": if req.stream { field("stream_options") } else { Value::Null },
        "cache_salt": field("cache_salt"),
        "priority": or(field("priority"), json!(0)),
        "kv_transfer_params": null,
    }))
}
