//! Encoder disaggregation on the HTTP side (vLLM "EPD"): encode legs on encode workers, the
//! media of prefill and aggregated requests (pulled from encoders when the body carries
//! `ec_transfer_params`, else encoded here), and the encoder's side channel `/ec/pull`.
//!
//! Encoding is a FIFO per worker, in front of the engine: each item takes
//! `encode_ms_per_item / speedup`, one item after the other across concurrent requests.

use super::shape::{self, Shape};
use super::{answer_pull, storage, Worker};
use crate::ec_handoff::{self, EcFailure, EcPullRequest, EcRefusal, EcRejection};
use crate::stats::tally;
use crate::tokenizer;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use bytes::Bytes;
use pdgate_api::media::{EcTransferEntry, MediaItem, MediaKind, EC_TRANSFER_PARAMS};
use pdgate_api::{ApiKind, InferenceRequest, RawObject};
use serde_json::{Map, Value};
use std::sync::Arc;
use tokio::time::Instant;

/// Message of a `/v1/completions` request to an encode worker.
pub const ENCODE_COMPLETIONS: &str = "encode workers serve chat requests with media";

/// Checks a request to an encode worker before any work: chat, not streamed, with media.
pub(super) fn check_encode_leg(req: &InferenceRequest, items: &[MediaItem]) -> Result<(), String> {
    if req.kind == ApiKind::Completions {
        return Err(ENCODE_COMPLETIONS.into());
    }
    if items.is_empty() {
        return Err("field `messages` must contain at least one media part (image_url, input_audio, video_url or audio_url) on an encode worker".into());
    }
    if req.stream {
        return Err("field `stream` must be false on an encode worker".into());
    }
    Ok(())
}

/// Waits until this worker's encoder has encoded `n` more items (FIFO across requests).
pub(super) async fn encode(w: &Worker, n: usize) {
    if n == 0 {
        return;
    }
    let cost = w.cfg.scaled(w.cfg.encode_ms_per_item * n as f64);
    let end = {
        let mut free = w.encoder_free_at.lock();
        *free = (*free).max(Instant::now()) + cost;
        *free
    };
    tokio::time::sleep_until(end).await;
}

/// An encode leg: encodes `items` and answers a one-token chat completion. Without an EC
/// connector each item is kept under an encoder lease and the answer carries one
/// `ec_transfer_params` entry per item, in order; with ECExampleConnector the items go to the
/// shared storage and the answer carries none.
pub(super) async fn encode_leg(
    w: &Worker,
    items: &[MediaItem],
    request_id: &str,
    seed: u64,
) -> Response {
    let shape = Shape::new(ApiKind::ChatCompletions, request_id, &w.cfg.model, 1);
    let usage = shape::usage(items.len(), 1, 0);
    let mut body = shape.full(&tokenizer::output_text(seed, 1), &usage);
    if let Some((store, role)) = &w.ec_storage {
        // ECExampleConnector: the output goes to the shared storage; nothing on the wire.
        storage::ec_encode_leg(w, store, *role, items).await;
    } else {
        body[EC_TRANSFER_PARAMS] = Value::Array(encode_to_leases(w, items).await);
    }
    w.engine.count(|c| {
        c.chat_completions += 1;
        c.prompt_tokens += items.len() as u64;
        c.generation_tokens += 1;
    });
    Json(body).into_response()
}

/// Encodes `items`, keeps each under an encoder lease and returns their
/// `ec_transfer_params` entries, in order.
async fn encode_to_leases(w: &Worker, items: &[MediaItem]) -> Vec<Value> {
    encode(w, items.len()).await;
    let stored: Vec<(String, MediaKind)> = items.iter().map(|i| (i.hash.clone(), i.kind)).collect();
    let ids = w.engine.ec_store(&stored);
    items
        .iter()
        .zip(ids)
        .map(|(item, lease_id)| {
            let entry = EcTransferEntry {
                mm_hash: item.hash.clone(),
                encoder_engine_id: w.engine.engine_id.clone(),
                lease_id,
                remote_host: w.advertise_host.clone(),
                remote_port: w.addr.port(),
                extra: Map::new(),
            };
            serde_json::to_value(entry).expect("entry serializes")
        })
        .collect()
}

/// Makes the encoder output of `items` available to a prefill or aggregated request: pulled
/// from the encoders named in `ec_transfer_params` (free), else encoded here. With
/// ECExampleConnector: loaded from the shared storage, else encoded here.
pub(super) async fn resolve_media(
    w: &Worker,
    body: &RawObject,
    items: &[MediaItem],
) -> Result<(), EcFailure> {
    if let Some((store, role)) = &w.ec_storage {
        storage::ec_resolve(w, store, *role, items).await;
        return Ok(());
    }
    let params = body.get(EC_TRANSFER_PARAMS).filter(|v| !v.is_null());
    let n = items.len() as u64;
    let Some(params) = params else {
        if n > 0 {
            encode(w, items.len()).await;
            w.engine.count(|c| {
                c.encode_items += n;
                c.local_encoded_items += n;
            });
            w.metrics.mm_items.with_label_values(&["local"]).inc_by(n);
        }
        return Ok(());
    };
    if n == 0 && params.as_array().is_some_and(Vec::is_empty) {
        return Ok(());
    }
    let result = pull_all(w, &params, items).await;
    let rejected_as = result.as_ref().err().map(|f| f.label);
    w.engine.count(|c| {
        let (ok, rejections) = (&mut c.remote_encoded_items, &mut c.ec_handoff_rejections);
        tally(&w.metrics.ec_handoffs, rejected_as, ok, n, rejections)
    });
    if result.is_ok() {
        w.metrics.mm_items.with_label_values(&["remote"]).inc_by(n);
    }
    result
}

/// Checks that entries and items match (every item has an entry with its hash, every entry
/// names an item), then pulls every entry, concurrently.
async fn pull_all(w: &Worker, params: &Value, items: &[MediaItem]) -> Result<(), EcFailure> {
    let entries = ec_handoff::parse_entries(params)?;
    if let Some(item) = items
        .iter()
        .find(|i| !entries.iter().any(|e| e.mm_hash == i.hash))
    {
        let missing = EcRefusal::MissingEntry {
            hash: item.hash.clone(),
            index: item.index,
        };
        return Err(EcRejection::from(missing).into());
    }
    if let Some((i, e)) = entries
        .iter()
        .enumerate()
        .find(|(_, e)| !items.iter().any(|it| it.hash == e.mm_hash))
    {
        return Err(EcRejection::Malformed(format!(
            "ec_transfer_params[{i}].mm_hash {} matches no media item of the request",
            e.mm_hash
        ))
        .into());
    }
    let pulls = entries
        .iter()
        .map(|e| ec_handoff::pull(&w.client, e, w.spec.revision.clone()));
    for result in futures_util::future::join_all(pulls).await {
        result?;
    }
    Ok(())
}

/// `POST /ec/pull`: hands one encoded item to a prefill (single consumer).
pub(super) async fn ec_pull(State(w): State<Arc<Worker>>, body: Bytes) -> Response {
    answer_pull(&w, &body, |req: &EcPullRequest, addr| {
        w.engine.ec_pull(req, addr)
    })
}
