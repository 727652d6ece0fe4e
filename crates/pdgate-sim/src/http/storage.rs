//! The shared-storage connectors on the HTTP side ([`crate::storage`]): the KV lookup before a
//! request is queued and the store once its prompt is computed (`ExampleConnector`), and the
//! encoder-output lookups and stores of media items (`ECExampleConnector`). Both are counted in
//! the worker's stats and metrics; a failed store is logged and counted, never an error to the
//! client (the request computed its prompt anyway).

use super::{encode, Worker};
use crate::cost;
use crate::storage::{
    kv_key, load_tokens, store_tokens, unix_ms, EcRecord, KvRecord, Lookup, LookupResult, Record,
    SharedStorage, EC_FORMAT, KV_FORMAT, KV_LOADED_TOKENS_HEADER, KV_LOAD_HEADER, KV_WRITER_HEADER,
    KV_WRITER_REVISION_HEADER,
};
use crate::transfer_config::EcRole;
use http::{HeaderMap, HeaderValue};
use pdgate_api::media::MediaItem;
use prometheus::IntCounterVec;
use std::collections::BTreeMap;

/// What the KV connector decided for one request before it is queued.
pub(super) struct KvPlan {
    /// Leading prompt tokens loaded from the storage (0 unless the lookup hit).
    pub loaded: usize,
    /// The lookup.
    lookup: Lookup<KvRecord>,
    /// The record to write once the prompt is computed (when nothing was loaded).
    store: Option<(String, KvRecord)>,
}

impl KvPlan {
    /// Whether the prompt's KV was loaded.
    pub fn hit(&self) -> bool {
        self.lookup.result == LookupResult::Hit
    }

    /// Takes the pending store, if any (it is written once).
    pub fn take_store(&mut self) -> Option<(String, KvRecord)> {
        self.store.take()
    }

    /// Stamps the lookup on a response: result, tokens loaded, and the writer of the record
    /// found (engine id, revision or `none`), so a client can tell which revision computed it.
    pub fn stamp(&self, h: &mut HeaderMap) {
        h.insert(
            KV_LOAD_HEADER,
            HeaderValue::from_static(self.lookup.result.label()),
        );
        h.insert(KV_LOADED_TOKENS_HEADER, HeaderValue::from(self.loaded));
        if let Some(r) = &self.lookup.record {
            let w = &r.writer;
            let rev = w.revision.as_deref().unwrap_or("none");
            for (name, v) in [
                (KV_WRITER_HEADER, w.engine_id.as_str()),
                (KV_WRITER_REVISION_HEADER, rev),
            ] {
                if let Ok(v) = HeaderValue::from_str(v) {
                    h.insert(name, v);
                }
            }
        }
    }
}

/// Counts one lookup in `metric` and `counts` by its result label.
fn count_lookup(metric: &IntCounterVec, counts: &mut BTreeMap<String, u64>, r: LookupResult) {
    metric.with_label_values(&[r.label()]).inc();
    *counts.entry(r.label().into()).or_default() += 1;
}

/// Looks up the KV of `tokens` (+ the request's `mm_hashes`) in `store`, as vLLM's
/// ExampleConnector: the record of `tokens[..align(len − 1)]` is loaded when this model and
/// revision wrote it (after the transfer cost of the tokens not held locally); otherwise the
/// request will store `tokens[..align(len)]`.
pub(super) async fn kv_lookup(
    w: &Worker,
    store: &SharedStorage,
    tokens: &[u32],
    mm_hashes: &[String],
) -> KvPlan {
    let bs = w.cfg.block_size;
    let n = load_tokens(tokens.len(), bs);
    let lookup = if n == 0 {
        Lookup {
            result: LookupResult::Miss,
            record: None,
        }
    } else {
        let key = kv_key(&tokens[..n], mm_hashes);
        let fits = |r: &KvRecord| r.num_tokens == n && r.mm_hashes == mm_hashes;
        store.read(&key, &w.writer, fits).await
    };
    w.engine.count(|c| {
        count_lookup(
            &w.metrics.kv_storage_lookups,
            &mut c.kv_storage_lookups,
            lookup.result,
        )
    });
    if lookup.result == LookupResult::Hit {
        let moved = n.saturating_sub(w.engine.local_hit_tokens(tokens));
        let ms = cost::transfer_ms(
            moved,
            w.cfg.kv_bytes_per_token,
            w.cfg.kv_bandwidth_gbps,
            w.cfg.kv_setup_ms,
        );
        tokio::time::sleep(w.cfg.scaled(ms)).await;
        return KvPlan {
            loaded: n,
            lookup,
            store: None,
        };
    }
    let s = store_tokens(tokens.len(), bs);
    let store = (s > 0).then(|| {
        let record = KvRecord {
            format: KV_FORMAT.into(),
            writer: w.writer.clone(),
            block_size: bs,
            num_tokens: s,
            mm_hashes: mm_hashes.to_vec(),
            written_unix_ms: 0,
        };
        (kv_key(&tokens[..s], mm_hashes), record)
    });
    KvPlan {
        loaded: 0,
        lookup,
        store,
    }
}

/// Writes a pending KV record (once the request's prompt is computed).
pub(super) async fn kv_store(w: &Worker, (key, mut record): (String, KvRecord)) {
    let Some(store) = &w.kv_storage else { return };
    record.written_unix_ms = unix_ms();
    let ok = write(store, &key, &record, &w.metrics.kv_storage_stores).await;
    if ok {
        w.engine.count(|c| c.kv_storage_stores += 1);
    }
}

/// Writes `record` under `key`, counting the result (`ok`, `error`) in `metric`.
async fn write<R: Record>(
    store: &SharedStorage,
    key: &str,
    record: &R,
    metric: &IntCounterVec,
) -> bool {
    match store.write(key, record).await {
        Ok(_) => {
            metric.with_label_values(&["ok"]).inc();
            true
        }
        Err(e) => {
            metric.with_label_values(&["error"]).inc();
            tracing::warn!(root = %store.root().display(), key, error = %e, "shared storage record not written");
            false
        }
    }
}

/// Looks up every item's encoder output in `store` (by `mm_hash`, as ECExampleConnector);
/// returns the items not loaded, in order.
async fn ec_lookup<'a>(
    w: &Worker,
    store: &SharedStorage,
    items: &'a [MediaItem],
) -> Vec<&'a MediaItem> {
    let mut missing = Vec::new();
    for item in items {
        let fits = |r: &EcRecord| r.mm_hash == item.hash;
        let lookup = store.read(&item.hash, &w.writer, fits).await;
        w.engine.count(|c| {
            count_lookup(
                &w.metrics.ec_storage_lookups,
                &mut c.ec_storage_lookups,
                lookup.result,
            )
        });
        if lookup.result != LookupResult::Hit {
            missing.push(item);
        }
    }
    missing
}

/// Writes the encoder output of `items` when this worker's `role` stores.
async fn ec_store(w: &Worker, store: &SharedStorage, role: EcRole, items: &[&MediaItem]) {
    if !role.stores() {
        return;
    }
    for item in items {
        let record = EcRecord {
            format: EC_FORMAT.into(),
            writer: w.writer.clone(),
            mm_hash: item.hash.clone(),
            kind: item.kind,
            written_unix_ms: unix_ms(),
        };
        if write(store, &item.hash, &record, &w.metrics.ec_storage_stores).await {
            w.engine.count(|c| c.ec_storage_stores += 1);
        }
    }
}

/// An encode leg with ECExampleConnector: items already stored are loaded, the others are
/// encoded (FIFO, `--encode-ms-per-item` each) and stored (producer roles). Counts the encoded
/// items as the encoder's.
pub(super) async fn ec_encode_leg(
    w: &Worker,
    store: &SharedStorage,
    role: EcRole,
    items: &[MediaItem],
) {
    let missing = ec_lookup(w, store, items).await;
    let n = missing.len() as u64;
    encode::encode(w, missing.len()).await;
    w.engine.count(|c| c.encode_items += n);
    w.metrics.mm_items.with_label_values(&["encoder"]).inc_by(n);
    ec_store(w, store, role, &missing).await;
}

/// The media of a prefill or aggregated request with ECExampleConnector: items stored by an
/// encoder are loaded (free, counted `remote`), the others encoded here (counted `local`) and
/// stored when this worker's role stores. `ec_transfer_params` are ignored.
pub(super) async fn ec_resolve(
    w: &Worker,
    store: &SharedStorage,
    role: EcRole,
    items: &[MediaItem],
) {
    let missing = ec_lookup(w, store, items).await;
    let (local, remote) = (missing.len() as u64, (items.len() - missing.len()) as u64);
    encode::encode(w, missing.len()).await;
    w.engine.count(|c| {
        c.encode_items += local;
        c.local_encoded_items += local;
        c.remote_encoded_items += remote;
    });
    w.metrics
        .mm_items
        .with_label_values(&["local"])
        .inc_by(local);
    w.metrics
        .mm_items
        .with_label_values(&["remote"])
        .inc_by(remote);
    ec_store(w, store, role, &missing).await;
}
