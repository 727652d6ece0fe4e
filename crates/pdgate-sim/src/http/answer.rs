//! Answering a request the engine runs: the whole JSON body once it finishes ([`full`]), or
//! its SSE stream token by token ([`stream`]), in the form of the API's [`Writer`]; a prefill
//! leg's `kv_transfer_params` (its lease), the pending shared-storage KV store, injected
//! aborts, and the per-API success counters ([`count_success`]).

use super::storage as kv_storage;
use super::writer::{Tally, Writer};
use super::{error_for, Worker};
use crate::engine::{Finish, SeqEvent, SeqMode};
use crate::storage::KvRecord;
use axum::body::Body;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::{header, HeaderValue};
use pdgate_api::ApiKind;
use serde_json::{json, Value};
use std::sync::Arc;
use tokio::sync::mpsc;

/// What a running request answers besides its tokens.
pub(super) struct Outcome {
    /// API of the request.
    pub kind: ApiKind,
    /// How the engine runs it (aggregated, prefill leg, remote decode leg).
    pub mode: SeqMode,
    /// Output seed ([`crate::tokenizer::output_seed`]).
    pub seed: u64,
    /// Output tokens per choice.
    pub max_tokens: usize,
    /// A shared-storage KV record to write once the prompt is computed (first token).
    pub store: Option<(String, KvRecord)>,
}

impl Outcome {
    fn tally(&self, fin: &Finish) -> Tally {
        Tally {
            prompt: fin.prompt_tokens,
            cached: fin.cached_tokens,
            output: self.max_tokens,
        }
    }

    /// A prefill leg's `kv_transfer_params` (vLLM NIXL's, pointing at this worker's lease).
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
}

/// Counts a request answered 200: per API in the worker's stats, per API and leg in
/// `pdgate_sim_requests_total`, and the legs of a P/D split per API.
pub(super) fn count_success(w: &Worker, kind: ApiKind, mode: SeqMode) {
    let leg = match mode {
        SeqMode::PrefillLeg => "prefill",
        SeqMode::RemoteDecode => "decode",
        SeqMode::Local | SeqMode::Pooling => "aggregated",
    };
    w.metrics
        .requests
        .with_label_values(&[kind.label(), leg])
        .inc();
    w.engine.count(|c| {
        match kind {
            ApiKind::Completions => c.completions += 1,
            ApiKind::Messages => c.messages += 1,
            ApiKind::Responses => c.responses += 1,
            ApiKind::Embeddings => c.embeddings += 1,
            ApiKind::Generate => c.generate += 1,
            _ => c.chat_completions += 1,
        }
        let by_api = match mode {
            SeqMode::PrefillLeg => &mut c.prefill_legs_by_api,
            SeqMode::RemoteDecode => &mut c.remote_decode_legs_by_api,
            SeqMode::Local | SeqMode::Pooling => return,
        };
        *by_api.entry(kind.label().to_string()).or_default() += 1;
    });
}

/// A 200 JSON response with `body`.
pub(super) fn json_response(body: Vec<u8>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        body,
    )
        .into_response()
}

const ENGINE_STOPPED: &str = "the engine stopped before the request finished";

/// Waits for the request to finish and answers its whole JSON body.
pub(super) async fn full(
    w: Arc<Worker>,
    mut rx: mpsc::UnboundedReceiver<SeqEvent>,
    mut o: Outcome,
    writer: Box<dyn Writer>,
) -> Response {
    loop {
        match rx.recv().await {
            Some(SeqEvent::Token) => o.store_once(&w).await,
            Some(SeqEvent::Finished(fin)) => {
                let body = writer.full(o.seed, &o.tally(&fin), o.kv_params(&w, &fin));
                count_success(&w, o.kind, o.mode);
                return json_response(body);
            }
            None => return error_for(o.kind, 503, ENGINE_STOPPED),
        }
    }
}

/// Answers an SSE stream: the writer's opening events, one token's events per engine token,
/// the last token's with the closing events; `abort_after` cuts the body after that many
/// tokens (`--abort-rate`).
pub(super) fn stream(
    w: Arc<Worker>,
    mut rx: mpsc::UnboundedReceiver<SeqEvent>,
    mut o: Outcome,
    mut writer: Box<dyn Writer>,
    abort_after: Option<usize>,
) -> Response {
    let (tx, body_rx) = mpsc::channel::<Result<Bytes, std::io::Error>>(32);
    tokio::spawn(async move {
        let send_all = |events: Vec<Bytes>| {
            let tx = tx.clone();
            async move {
                for b in events {
                    if tx.send(Ok(b)).await.is_err() {
                        return false;
                    }
                }
                true
            }
        };
        if !send_all(writer.open()).await {
            return;
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
                let last = match writer.broken(ENGINE_STOPPED) {
                    Some(b) => Ok(b),
                    None => Err(std::io::Error::other(ENGINE_STOPPED)),
                };
                let _ = tx.send(last).await;
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
                    let index = sent;
                    sent += 1;
                    if sent < o.max_tokens {
                        if !send_all(writer.token(o.seed, index)).await {
                            return;
                        }
                    } else {
                        // The last token waits for Finished, which carries usage and the lease.
                        let Some(SeqEvent::Finished(fin)) = rx.recv().await else {
                            return;
                        };
                        let kv = o.kv_params(&w, &fin);
                        let out = writer.last(o.seed, index, &o.tally(&fin), kv);
                        count_success(&w, o.kind, o.mode);
                        send_all(out).await;
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
