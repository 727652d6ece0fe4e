//! `POST /tokenize` and `POST /detokenize`, as vLLM's OpenAI server answers them
//! (`vllm/entrypoints/openai/serving_tokenization.py`), with the simulator's tokenizer.
//!
//! - `/tokenize` takes `{model?, prompt}` (text, or token ids taken as they are) or
//!   `{model?, messages}` (flattened as on `/v1/chat/completions`), plus `return_token_strs`,
//!   and answers `{count, max_model_len, tokens, token_strs}` (`token_strs` `null` unless
//!   asked for). `add_special_tokens` and `add_generation_prompt` are accepted; the simulator
//!   has no special tokens.
//! - `/detokenize` takes `{model?, tokens}` and answers `{prompt}`: the words of the ids joined
//!   by spaces. The simulator's ids are hashes of words, so only words it has seen can be
//!   given back (the output vocabulary, and the words of the last 65,536 distinct `/tokenize`
//!   words); any other id below the vocabulary size reads `<tok_ID>`. An id at or above it is
//!   a 400, as vLLM refuses an id outside its vocabulary.
//! - A `model` other than the served one is a 404.

use super::{error, Worker};
use crate::tokenizer;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use bytes::Bytes;
use serde_json::{json, Value};
use std::sync::Arc;

pub(super) async fn tokenize(State(w): State<Arc<Worker>>, body: Bytes) -> Response {
    match tokenize_body(&w, &body) {
        Ok(v) => Json(v).into_response(),
        Err((status, message)) => error(status, message),
    }
}

pub(super) async fn detokenize(State(w): State<Arc<Worker>>, body: Bytes) -> Response {
    match detokenize_body(&w, &body) {
        Ok(v) => Json(v).into_response(),
        Err((status, message)) => error(status, message),
    }
}

/// The JSON object of a body, and its model checked against the worker's.
fn object(w: &Worker, body: &[u8]) -> Result<serde_json::Map<String, Value>, (u16, String)> {
    let v: Value = serde_json::from_slice(body).map_err(|e| (400, format!("invalid JSON: {e}")))?;
    let Value::Object(o) = v else {
        return Err((400, "the body must be a JSON object".into()));
    };
    match o.get("model") {
        None | Some(Value::Null) => {}
        Some(Value::String(m)) if *m == w.cfg.model => {}
        Some(m) => {
            return Err((
                404,
                format!("The model `{}` does not exist.", m.as_str().unwrap_or("?")),
            ))
        }
    }
    Ok(o)
}

fn tokenize_body(w: &Worker, body: &[u8]) -> Result<Value, (u16, String)> {
    let o = object(w, body)?;
    let (tokens, words): (Vec<u32>, Vec<String>) = match (o.get("prompt"), o.get("messages")) {
        (Some(Value::String(text)), None) => {
            tokenizer::remember_words(text);
            (
                tokenizer::tokenize(text),
                text.split_whitespace().map(str::to_string).collect(),
            )
        }
        (Some(Value::Array(ids)), None) => {
            let ids: Option<Vec<u32>> = ids
                .iter()
                .map(|v| v.as_u64().and_then(|n| u32::try_from(n).ok()))
                .collect();
            let ids = ids.ok_or((
                400,
                "`prompt` must be a string or an array of token ids".into(),
            ))?;
            let words = ids.iter().map(|t| tokenizer::word_of(*t)).collect();
            (ids, words)
        }
        (None, Some(m)) => {
            let raw = serde_json::to_string(m).unwrap_or_default();
            let text = pdgate_api::openai::flatten_messages(Some(&raw))
                .map_err(|e| (400, e.to_string()))?;
            tokenizer::remember_words(&text);
            (
                tokenizer::tokenize(&text),
                text.split_whitespace().map(str::to_string).collect(),
            )
        }
        (Some(_), Some(_)) => return Err((400, "give `prompt` or `messages`, not both".into())),
        (Some(_), None) => {
            return Err((
                400,
                "`prompt` must be a string or an array of token ids".into(),
            ))
        }
        (None, None) => return Err((400, "`prompt` or `messages` is required".into())),
    };
    let strs = o.get("return_token_strs").and_then(Value::as_bool) == Some(true);
    Ok(json!({
        "count": tokens.len(),
        "max_model_len": w.cfg.max_model_len,
        "tokens": tokens,
        "token_strs": if strs { json!(words) } else { Value::Null },
    }))
}

fn detokenize_body(w: &Worker, body: &[u8]) -> Result<Value, (u16, String)> {
    let o = object(w, body)?;
    let bad = || (400, "`tokens` must be an array of token ids".to_string());
    let ids = o.get("tokens").and_then(Value::as_array).ok_or_else(bad)?;
    let mut words = Vec::with_capacity(ids.len());
    for v in ids {
        let id = v.as_u64().ok_or_else(bad)?;
        if id >= tokenizer::VOCAB_SIZE as u64 {
            return Err((400, format!("Token id {id} is out of vocabulary")));
        }
        words.push(tokenizer::word_of(id as u32));
    }
    Ok(json!({"prompt": words.join(" ")}))
}
