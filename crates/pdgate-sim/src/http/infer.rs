//! The engine APIs' pipeline: `POST /v1/completions`, `/v1/chat/completions`, `/v1/messages`,
//! `/v1/responses` and `/inference/v1/generate` (`/v1/embeddings`, which never decodes, is in
//! `embeddings.rs`). Parse, inject failures, run the P/D handshake for decode legs (NIXL:
//! `kv_transfer_params` top-level in the request, as vLLM 0.32 reads it on every one of these
//! APIs), or the shared-storage KV lookup of every request (ExampleConnector, see
//! `storage.rs`), get the media's encoder output (pulled, loaded or encoded here; encode
//! workers answer encode legs instead, see `encode.rs`), queue the request on the engine, and
//! answer JSON or SSE through the API's [`Writer`] (`answer.rs`).
//!
//! Errors: a body that does not parse is a 400 in OpenAI's form naming the field (vLLM's
//! request validation answers every API so); later errors (unknown model, engine, handoff,
//! injected) come in the API's form (Anthropic's on messages).

use super::answer::{self, Outcome};
use super::generate::GenerateWriter;
use super::messages::MessagesWriter;
use super::responses::ResponsesWriter;
use super::shape::{OpenAiWriter, Shape};
use super::storage::{self as kv_storage, KvPlan};
use super::writer::{random_uuid, Writer};
use super::{encode, error, error_for, request_id, Worker};
use crate::config::DEFAULT_MAX_TOKENS;
use crate::cost;
use crate::engine::{SeqMode, SeqRequest, SubmitError};
use crate::handoff::{self, HandoffFailure, PullTarget, Rejection};
use crate::stats::tally;
use crate::tokenizer;
use axum::extract::State;
use axum::response::Response;
use bytes::Bytes;
use http::HeaderMap;
use pdgate_api::headers::REQUEST_ID;
use pdgate_api::media::media_items;
use pdgate_api::{ApiKind, InferenceRequest, KvTransferParams, Role};
use serde_json::Value;
use std::sync::Arc;
use tokio::time::Instant;

macro_rules! engine_route {
    ($name:ident, $kind:expr, $doc:literal) => {
        #[doc = $doc]
        pub(super) async fn $name(
            State(w): State<Arc<Worker>>,
            headers: HeaderMap,
            body: Bytes,
        ) -> Response {
            infer(w, $kind, headers, body).await
        }
    };
}

engine_route!(completions, ApiKind::Completions, "`POST /v1/completions`.");
engine_route!(
    chat_completions,
    ApiKind::ChatCompletions,
    "`POST /v1/chat/completions`."
);
engine_route!(messages, ApiKind::Messages, "`POST /v1/messages`.");
engine_route!(responses, ApiKind::Responses, "`POST /v1/responses`.");
engine_route!(
    generate,
    ApiKind::Generate,
    "`POST /inference/v1/generate`."
);

/// The [`Writer`] of `req` (`prompt` tokens, `max_tokens` resolved); a 400 message when a
/// field only the writer reads is wrong.
fn writer(
    w: &Worker,
    req: &InferenceRequest,
    headers: &HeaderMap,
    prompt: usize,
    max_tokens: usize,
) -> Result<Box<dyn Writer>, String> {
    let model = w.cfg.model.clone();
    let include_usage = req
        .body
        .get("stream_options")
        .and_then(|o| o.get("include_usage").and_then(Value::as_bool))
        .unwrap_or(false);
    let header_id = headers
        .get(REQUEST_ID)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    Ok(match req.kind {
        ApiKind::Messages => Box::new(MessagesWriter {
            id: format!("chatcmpl-{}", request_id(headers)),
            model,
            prompt,
        }),
        ApiKind::Responses => Box::new(ResponsesWriter::new(
            &req.body,
            &request_id(headers),
            &model,
            max_tokens,
        )?),
        ApiKind::Generate => {
            let base = match (header_id, req.body.get("request_id")) {
                (Some(h), _) => h,
                (None, None | Some(Value::Null)) => random_uuid(),
                (None, Some(Value::String(s))) => s,
                (None, Some(_)) => return Err("field `request_id` must be a string".into()),
            };
            Box::new(GenerateWriter {
                request_id: format!("generate-tokens-{base}"),
                model,
                include_usage,
            })
        }
        kind => Box::new(OpenAiWriter {
            shape: Shape::new(kind, &request_id(headers), &model, req.n),
            include_usage,
        }),
    })
}

async fn infer(w: Arc<Worker>, kind: ApiKind, headers: HeaderMap, body: Bytes) -> Response {
    let arrived = Instant::now();
    let req = match InferenceRequest::parse(kind, &body) {
        Ok(r) => r,
        Err(e) => return error(400, e.to_string()),
    };
    if let Some(resp) = check_model(&w, &req) {
        return resp;
    }
    let media = media_items(&req.body);
    if w.role == Role::Encode {
        if let Err(m) = encode::check_encode_leg(&req, &media) {
            return error(400, m);
        }
        if let Some(resp) = inject_and_delay(&w, kind).await {
            return resp;
        }
        let seed = tokenizer::output_seed(&tokenizer::prompt_tokens(&req.prompt));
        return encode::encode_leg(&w, &media, &request_id(&headers), seed).await;
    }
    // ExampleConnector ignores kv_transfer_params, as vLLM's does. Generate also reads them
    // from `sampling_params.extra_args`, where vLLM 0.32 copies a top-level one (which wins).
    let nested = || {
        let object = kind.leg_params_object()?;
        let extra = req
            .body
            .get(object)?
            .get("extra_args")?
            .get("kv_transfer_params")?
            .clone();
        Some(extra)
    };
    let given = match req.body.get("kv_transfer_params") {
        None | Some(Value::Null) => nested(),
        top => top,
    };
    let params = match given {
        _ if w.kv_storage.is_some() => None,
        None | Some(Value::Null) => None,
        Some(v) => match serde_json::from_value::<KvTransferParams>(v) {
            Ok(p) => Some(p),
            Err(e) => return error(400, format!("field `kv_transfer_params` is invalid: {e}")),
        },
    };
    let tokens = tokenizer::prompt_tokens(&req.prompt);
    let mut max_tokens = req.max_tokens.map_or(DEFAULT_MAX_TOKENS, |m| m as usize);
    let prefill_leg = params
        .as_ref()
        .is_some_and(|p| p.do_remote_decode && !p.do_remote_prefill);
    if prefill_leg {
        max_tokens = 1;
    }
    let writer = match writer(&w, &req, &headers, tokens.len(), max_tokens) {
        Ok(x) => x,
        Err(m) => return error(400, m),
    };
    if let Some(resp) = inject_and_delay(&w, kind).await {
        return resp;
    }
    let mut mode = SeqMode::Local;
    let mut kv_plan = None;
    if let Some(store) = &w.kv_storage {
        let mm_hashes: Vec<String> = media.iter().map(|m| m.hash.clone()).collect();
        kv_plan = Some(kv_storage::kv_lookup(&w, store, &tokens, &mm_hashes).await);
    }
    match &params {
        Some(p) if p.do_remote_prefill => match remote_prefill(&w, p, &tokens).await {
            Ok(()) => mode = SeqMode::RemoteDecode,
            Err(f) => return error_for(kind, f.status, f.message()),
        },
        _ if prefill_leg => mode = SeqMode::PrefillLeg,
        _ => {}
    }
    // A decode leg's KV, or KV loaded from the storage, already holds the media: nothing to
    // encode or pull.
    if mode != SeqMode::RemoteDecode && !kv_plan.as_ref().is_some_and(KvPlan::hit) {
        if let Err(f) = encode::resolve_media(&w, &req.body, &media).await {
            return error_for(kind, f.status, f.message());
        }
    }
    let rx = match w.engine.submit(SeqRequest {
        tokens: tokens.clone(),
        max_tokens,
        mode,
        external_tokens: kv_plan.as_ref().map(|p| p.loaded),
        arrived,
    }) {
        Ok(rx) => rx,
        Err(e @ SubmitError::Invalid(_)) => return error_for(kind, 400, e.to_string()),
        Err(e @ SubmitError::Closed) => return error_for(kind, 503, e.to_string()),
    };
    let outcome = Outcome {
        kind,
        mode,
        seed: tokenizer::output_seed(&tokens),
        max_tokens,
        store: kv_plan.as_mut().and_then(KvPlan::take_store),
    };
    let mut resp = if req.stream {
        let abort_after = rand::random_bool(w.cfg.abort_rate).then_some(max_tokens / 2);
        answer::stream(w, rx, outcome, writer, abort_after)
    } else {
        answer::full(w, rx, outcome, writer).await
    };
    if let Some(p) = &kv_plan {
        p.stamp(resp.headers_mut());
    }
    resp
}

/// A 404 in the API's form when the body names a model other than the served one (a body
/// naming none is served, on the APIs whose model is optional).
pub(super) fn check_model(w: &Worker, req: &InferenceRequest) -> Option<Response> {
    (!req.model.is_empty() && req.model != w.cfg.model).then(|| {
        error_for(
            req.kind,
            404,
            format!("The model `{}` does not exist.", req.model),
        )
    })
}

/// `--error-rate` (answers the injected error) and `--slow-start-ms` (waits).
pub(super) async fn inject_and_delay(w: &Worker, kind: ApiKind) -> Option<Response> {
    if rand::random_bool(w.cfg.error_rate) {
        w.metrics.injected.with_label_values(&["error"]).inc();
        w.engine.count(|c| c.injected_errors += 1);
        return Some(error_for(
            kind,
            w.cfg.error_status,
            "injected failure (--error-rate)",
        ));
    }
    if !w.cfg.slow_start.is_zero() {
        tokio::time::sleep(w.cfg.slow_start).await;
    }
    None
}

/// Pulls the prompt's KV from the prefill named in `p` and waits the transfer cost. The
/// transferred tokens are not `cached_tokens` of the decode leg (vLLM 0.32 reports 0 for
/// them); the engine counts them under `prompt_tokens_by_source{source="external_kv_transfer"}`.
async fn remote_prefill(
    w: &Worker,
    p: &KvTransferParams,
    tokens: &[u32],
) -> Result<(), HandoffFailure> {
    let result = async {
        if p.do_remote_decode {
            return Err(Rejection::Malformed(
                "do_remote_prefill and do_remote_decode are both true".into(),
            )
            .into());
        }
        let target = PullTarget::from_params(p)?;
        let skip = w.engine.local_hit_tokens(tokens).min(tokens.len());
        handoff::pull(
            &w.client,
            &target,
            w.spec.revision.clone(),
            tokens.len(),
            crate::engine::cache::prompt_fingerprint(tokens),
            skip,
        )
        .await
    }
    .await;
    let rejected_as = result.as_ref().err().map(|f| f.label);
    w.engine.count(|c| {
        let (ok, rejections) = (&mut c.remote_decode_legs, &mut c.handoff_rejections);
        tally(&w.metrics.handoffs, rejected_as, ok, 1, rejections)
    });
    let grant = result?;
    let ms = cost::transfer_ms(
        grant.transferred_tokens,
        w.cfg.kv_bytes_per_token,
        w.cfg.kv_bandwidth_gbps,
        w.cfg.kv_setup_ms,
    );
    tokio::time::sleep(w.cfg.scaled(ms)).await;
    Ok(())
}
