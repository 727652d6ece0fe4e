//! `POST /v1/completions` and `POST /v1/chat/completions`: parse, inject failures, run the P/D
//! handshake for decode legs (NIXL), or the shared-storage KV lookup of every request
//! (ExampleConnector, see `storage.rs`), get the media's encoder output (pulled, loaded or
//! encoded here; encode workers answer encode legs instead, see `encode.rs`), queue the request
//! on the engine, and answer JSON or SSE.

use super::shape::{self, Shape, DONE};
use super::storage::{self as kv_storage, KvPlan};
use super::{encode, error, request_id, Worker};
use crate::config::DEFAULT_MAX_TOKENS;
use crate::cost;
use crate::engine::{Finish, SeqEvent, SeqMode, SeqRequest, SubmitError};
use crate::handoff::{self, HandoffFailure, PullTarget, Rejection};
use crate::stats::tally;
use crate::storage::KvRecord;
use crate::tokenizer;
use axum::body::Body;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use bytes::Bytes;
use http::{header, HeaderMap, HeaderValue};
use pdgate_api::media::media_items;
use pdgate_api::{ApiKind, InferenceRequest, KvTransferParams, Role};
use serde_json::{json, Value};
use std::sync::Arc;
use tokio::sync::mpsc;
use tokio::time::Instant;

pub(super) async fn completions(
    State(w): State<Arc<Worker>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    infer(w, ApiKind::Completions, headers, body).await
}

pub(super) async fn chat_completions(
    State(w): State<Arc<Worker>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    infer(w, ApiKind::ChatCompletions, headers, body).await
}

/// What a finished request answers besides its tokens.
struct Outcome {
    kind: ApiKind,
    shape: Shape,
    seed: u64,
    max_tokens: usize,
    kv_params: Option<Value>,
    /// A shared-storage KV record to write once the prompt is computed (first token).
    store: Option<(String, KvRecord)>,
}

async fn infer(w: Arc<Worker>, kind: ApiKind, headers: HeaderMap, body: Bytes) -> Response {
    let arrived = Instant::now();
    let req = match InferenceRequest::parse(kind, &body) {
        Ok(r) => r,
        Err(e) => return error(400, e.to_string()),
    };
    if req.model != w.cfg.model {
        return error(404, format!("The model `{}` does not exist.", req.model));
    }
    let media = media_items(&req.body);
    if w.role == Role::Encode {
        if let Err(m) = encode::check_encode_leg(&req, &media) {
            return error(400, m);
        }
        if let Some(resp) = inject_and_delay(&w).await {
            return resp;
        }
        let seed = tokenizer::output_seed(&tokenizer::prompt_tokens(&req.prompt));
        return encode::encode_leg(&w, &media, &request_id(&headers), seed).await;
    }
    // ExampleConnector ignores kv_transfer_params, as vLLM's does.
    let params = match req.body.get("kv_transfer_params") {
        _ if w.kv_storage.is_some() => None,
        None | Some(Value::Null) => None,
        Some(v) => match serde_json::from_value::<KvTransferParams>(v.clone()) {
            Ok(p) => Some(p),
            Err(e) => return error(400, format!("field `kv_transfer_params` is invalid: {e}")),
        },
    };
    let include_usage = req
        .body
        .get("stream_options")
        .and_then(|o| o.get("include_usage").and_then(Value::as_bool))
        .unwrap_or(false);
    if let Some(resp) = inject_and_delay(&w).await {
        return resp;
    }
    let tokens = tokenizer::prompt_tokens(&req.prompt);
    let mut max_tokens = req.max_tokens.map_or(DEFAULT_MAX_TOKENS, |m| m as usize);
    let mut mode = SeqMode::Local;
    let mut kv_plan = None;
    if let Some(store) = &w.kv_storage {
        let mm_hashes: Vec<String> = media.iter().map(|m| m.hash.clone()).collect();
        kv_plan = Some(kv_storage::kv_lookup(&w, store, &tokens, &mm_hashes).await);
    }
    match &params {
        Some(p) if p.do_remote_prefill => match remote_prefill(&w, p, &tokens).await {
            Ok(()) => mode = SeqMode::RemoteDecode,
            Err(f) => return error(f.status, f.message()),
        },
        Some(p) if p.do_remote_decode => {
            mode = SeqMode::PrefillLeg;
            max_tokens = 1;
        }
        _ => {}
    }
    // A decode leg's KV, or KV loaded from the storage, already holds the media: nothing to
    // encode or pull.
    if mode != SeqMode::RemoteDecode && !kv_plan.as_ref().is_some_and(KvPlan::hit) {
        if let Err(f) = encode::resolve_media(&w, &req.body, &media).await {
            return error(f.status, f.message());
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
        Err(e @ SubmitError::Invalid(_)) => return error(400, e.to_string()),
        Err(e @ SubmitError::Closed) => return error(503, e.to_string()),
    };
    let request_id = request_id(&headers);
    let outcome = Outcome {
        kind,
        shape: Shape::new(kind, &request_id, &w.cfg.model, req.n),
        seed: tokenizer::output_seed(&tokens),
        max_tokens,
        kv_params: None,
        store: kv_plan.as_mut().and_then(KvPlan::take_store),
    };
    let mut resp = if req.stream {
        let abort_after = rand::random_bool(w.cfg.abort_rate).then_some(max_tokens / 2);
        stream(w, rx, outcome, include_usage, abort_after)
    } else {
        full(w, rx, outcome).await
    };
    if let Some(p) = &kv_plan {
        p.stamp(resp.headers_mut());
    }
    resp
}

/// `--error-rate` (answers the injected error) and `--slow-start-ms` (waits).
async fn inject_and_delay(w: &Worker) -> Option<Response> {
    if rand::random_bool(w.cfg.error_rate) {
        w.metrics.injected.with_label_values(&["error"]).inc();
        w.engine.count(|c| c.injected_errors += 1);
        return Some(error(w.cfg.error_status, "injected failure (--error-rate)"));
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

impl Outcome {
    fn usage(&self, fin: &Finish) -> pdgate_api::Usage {
        shape::usage(
            fin.prompt_tokens,
            self.max_tokens * self.shape.n as usize,
            fin.cached_tokens,
        )
    }

    fn kv_params(&self, w: &Worker, fin: &Finish) -> Option<Value> {
        fin.lease.as_ref().map(|l| {
            json!({
                "do_remote_prefill": true,
                "do_remote_decode": false,
                "remote_engine_id": w.engine.engine_id,
                "remote_block_ids": l.blocks,
                "remote_host": w.advertise_host,
                "remote_port": w.addr.port(),
                "remote_request_id": l.id,
                "tp_size": 1,
            })
        })
    }

    /// Writes the pending shared-storage record, once (called at each token; the first one
    /// means the prompt is computed).
    async fn store_once(&mut self, w: &Worker) {
        if let Some(s) = self.store.take() {
            kv_storage::kv_store(w, s).await;
        }
    }

    fn count_success(&self, w: &Worker) {
        let kind = self.kind;
        w.engine.count(|c| match kind {
            ApiKind::Completions => c.completions += 1,
            _ => c.chat_completions += 1,
        });
    }
}

async fn full(
    w: Arc<Worker>,
    mut rx: mpsc::UnboundedReceiver<SeqEvent>,
    mut o: Outcome,
) -> Response {
    loop {
        match rx.recv().await {
            Some(SeqEvent::Token) => o.store_once(&w).await,
            Some(SeqEvent::Finished(fin)) => {
                o.kv_params = o.kv_params(&w, &fin);
                let text = tokenizer::output_text(o.seed, o.max_tokens);
                let mut body = o.shape.full(&text, &o.usage(&fin));
                if let Some(kv) = o.kv_params.take() {
                    body["kv_transfer_params"] = kv;
                }
                o.count_success(&w);
                return Json(body).into_response();
            }
            None => return error(503, "the engine stopped before the request finished"),
        }
    }
}

fn stream(
    w: Arc<Worker>,
    mut rx: mpsc::UnboundedReceiver<SeqEvent>,
    mut o: Outcome,
    include_usage: bool,
    abort_after: Option<usize>,
) -> Response {
    let (tx, body_rx) = mpsc::channel::<Result<Bytes, std::io::Error>>(32);
    tokio::spawn(async move {
        if let Some(role) = o.shape.role_chunk() {
            if tx.send(Ok(shape::sse(&role))).await.is_err() {
                return;
            }
        }
        let mut sent = 0usize;
        loop {
            // A client gone while its request waits (no token to write yet) drops the engine
            // side now, as vLLM aborts on disconnect; the engine counts it cancelled.
            let ev = tokio::select! {
                ev = rx.recv() => ev,
                _ = tx.closed() => return,
            };
            let Some(ev) = ev else {
                let err = json!({"error": {"message": "the engine stopped before the request finished", "type": "server_error", "code": 503}});
                let _ = tx.send(Ok(shape::sse(&err))).await;
                return;
            };
            match ev {
                SeqEvent::Token => {
                    o.store_once(&w).await;
                    if abort_after == Some(sent) {
                        w.metrics.injected.with_label_values(&["abort"]).inc();
                        w.engine.count(|c| c.injected_aborts += 1);
                        let _ = tx
                            .send(Err(std::io::Error::other("injected abort (--abort-rate)")))
                            .await;
                        return;
                    }
                    let text = tokenizer::output_token_text(o.seed, sent);
                    sent += 1;
                    if sent < o.max_tokens {
                        if tx
                            .send(Ok(shape::sse(&o.shape.token_chunk(&text, None))))
                            .await
                            .is_err()
                        {
                            return;
                        }
                    } else {
                        // The last token waits for Finished, which carries usage and the lease.
                        let Some(SeqEvent::Finished(fin)) = rx.recv().await else {
                            return;
                        };
                        let mut chunk = o.shape.token_chunk(&text, Some("length"));
                        if let Some(kv) = o.kv_params(&w, &fin) {
                            chunk["kv_transfer_params"] = kv;
                        }
                        let mut out = vec![shape::sse(&chunk)];
                        if include_usage {
                            out.push(shape::sse(&o.shape.usage_chunk(&o.usage(&fin))));
                        }
                        out.push(Bytes::from_static(DONE));
                        o.count_success(&w);
                        for b in out {
                            if tx.send(Ok(b)).await.is_err() {
                                return;
                            }
                        }
                        return;
                    }
                }
                SeqEvent::Finished(_) => return,
            }
        }
    });
    let mut resp =
        Body::from_stream(tokio_stream::wrappers::ReceiverStream::new(body_rx)).into_response();
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    resp
}
