//! `mm-embeddings-cache-producer` — remembers which multimodal items each endpoint has
//! encoded, for `mm-embeddings-cache-scorer`.
//!
//! - **Type:** `mm-embeddings-cache-producer` (llm-d's default producer of its key: a
//!   config whose `mm-embeddings-cache-scorer` names no producer, or names this default
//!   name, gets one with default parameters when none of that name is declared).
//! - **Extension points:** data producer (its [`MmCache`] is read by the scorer), PreRequest
//!   (records the request's items on its primary pick).
//! - **Parameters:** `cacheSizeInMBPerServer` (MiB of encoder cache per endpoint, default
//!   [`DEFAULT_CACHE_SIZE_MB`] = 4096; 0 means the default; at most
//!   [`MAX_CACHE_SIZE_MB`]). The per-endpoint LRU holds
//!   `max(1, cacheSizeInMBPerServer · 1 MiB / 2 MiB)` items (llm-d counts 2 MiB of
//!   embeddings per image): 2048 items by default. `cacheSizeInMB` is accepted as an alias
//!   (llm-d's own sample config spells it so; see Limitations).
//! - **Inputs:** the request's multimodal items ([`SchedulingRequest::media`], one content
//!   hash per image, audio or video part, found once at ingress), the primary pick of the
//!   scheduling result (the decode pick, or the single pick).
//! - **Outputs:** after every successful `schedule`, the request's items are put into the
//!   primary pick's LRU (most recently used; the oldest item is evicted past the capacity).
//!   [`MmCache::matched`] answers how many of a request's distinct items an endpoint's LRU
//!   holds, without touching their recency. Endpoints are keyed by their load cell (a name
//!   that leaves discovery and comes back starts empty); LRUs of endpoints no longer in the
//!   snapshot are dropped when a newer snapshot is seen (llm-d: every 2 minutes).
//! - **Limitations:** approximate — it learns only from this router's picks, not from the
//!   engines' own evictions or restarts. As in llm-d, only the primary (decode) pick is
//!   credited: in a P/D split the prefill endpoint, whose engine ran the encoder, is not,
//!   and encode endpoints never are. llm-d takes the items from the token producer's
//!   `MultiModalFeatures` (so it needs a tokenizer); pdgate hashes the request's media parts
//!   itself (vLLM-style `mm_hash` of the URL or audio data; `pdgate_api::media`), so
//!   the hashes are pdgate's, not the engine's. llm-d decodes its parameters leniently and so
//!   ignores `cacheSizeInMB` (its sample then runs with 4096); pdgate decodes strictly and
//!   reads it as `cacheSizeInMBPerServer`, the size the sample's author wrote. llm-d treats
//!   a negative size as the default; pdgate refuses it. The encoder-cache metrics of llm-d
//!   (`llm_d_epp_encoder_cache_*`) are not exported.
//!   Source: llm-d `pkg/epp/framework/plugins/requestcontrol/dataproducer/multimodal/
//!   {producer.go,prerequest.go}`.
//!
//! [`SchedulingRequest::media`]: crate::request::SchedulingRequest::media

use crate::endpoint::{EndpointState, Snapshot};
use crate::plugin::PreRequest;
use crate::plugin_build::{decode, effective, BuildCtx, Built, PluginError, PluginType, Stage};
use crate::request::{RequestCtx, SchedulingResult};
use lru::LruCache;
use parking_lot::RwLock;
use serde::{Deserialize, Serialize};
use serde_yaml_ng::Value;
use std::collections::HashMap;
use std::num::NonZeroUsize;
use std::sync::Arc;

/// Registry entry.
pub const TYPE: PluginType = PluginType {
    name: "mm-embeddings-cache-producer",
    stage: Stage::Producer,
    build,
};

/// Default of `cacheSizeInMBPerServer` (MiB per endpoint).
pub const DEFAULT_CACHE_SIZE_MB: i64 = 4096;

/// Largest `cacheSizeInMBPerServer` accepted (MiB per endpoint: 1 TiB, 524288 items).
pub const MAX_CACHE_SIZE_MB: i64 = 1 << 20;

/// Encoder output counted per item (bytes; llm-d's estimate for one image).
pub const BYTES_PER_ITEM: i64 = 2 * 1024 * 1024;

/// Parameters (llm-d names and defaults).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Params {
    /// MiB of encoder cache per endpoint; 0 = [`DEFAULT_CACHE_SIZE_MB`].
    #[serde(rename = "cacheSizeInMBPerServer", alias = "cacheSizeInMB")]
    pub cache_size_in_mb_per_server: i64,
}

impl Default for Params {
    fn default() -> Self {
        Params {
            cache_size_in_mb_per_server: DEFAULT_CACHE_SIZE_MB,
        }
    }
}

/// Items per endpoint LRU for a cache of `mb` MiB (0 = the default size): at least 1.
pub fn capacity_for_mb(mb: i64) -> NonZeroUsize {
    let mb = if mb == 0 { DEFAULT_CACHE_SIZE_MB } else { mb };
    let items = mb.saturating_mul(1024 * 1024) / BYTES_PER_ITEM;
    NonZeroUsize::new(usize::try_from(items).unwrap_or(1).max(1)).unwrap_or(NonZeroUsize::MIN)
}

type Lru = LruCache<u64, (), foldhash::fast::RandomState>;

/// The per-endpoint LRUs of multimodal item hashes, shared by the producer (writes) and its
/// scorers (reads).
#[derive(Debug)]
pub struct MmCache {
    capacity: NonZeroUsize,
    inner: RwLock<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    /// Endpoint load-cell uid → its LRU (item hashes are client content: a seeded hasher).
    lrus: HashMap<u64, Lru, foldhash::fast::RandomState>,
    /// Version of the newest snapshot the LRUs were pruned against.
    version: u64,
}

impl MmCache {
    /// An empty cache of `capacity` items per endpoint.
    pub fn new(capacity: NonZeroUsize) -> Self {
        MmCache {
            capacity,
            inner: RwLock::new(Inner::default()),
        }
    }

    /// Items held per endpoint at most.
    pub fn capacity(&self) -> usize {
        self.capacity.get()
    }

    /// How many of `items` (distinct hashes) `endpoint`'s LRU holds; recency is unchanged.
    pub fn matched(&self, items: &[u64], endpoint: &EndpointState) -> usize {
        let inner = self.inner.read();
        match inner.lrus.get(&endpoint.load.uid()) {
            Some(lru) => items.iter().filter(|h| lru.contains(*h)).count(),
            None => 0,
        }
    }

    /// [`Self::matched`] for each of `endpoints`, into `out` (one read lock for all).
    pub fn matched_each(
        &self,
        items: &[u64],
        endpoints: &[&Arc<EndpointState>],
        out: &mut [usize],
    ) {
        let inner = self.inner.read();
        for (o, e) in out.iter_mut().zip(endpoints) {
            *o = match inner.lrus.get(&e.load.uid()) {
                Some(lru) => items.iter().filter(|h| lru.contains(*h)).count(),
                None => 0,
            };
        }
    }

    /// Items currently held for `endpoint`.
    pub fn len(&self, endpoint: &EndpointState) -> usize {
        let inner = self.inner.read();
        inner
            .lrus
            .get(&endpoint.load.uid())
            .map_or(0, LruCache::len)
    }

    /// True when no endpoint holds any item.
    pub fn is_empty(&self) -> bool {
        self.inner.read().lrus.values().all(LruCache::is_empty)
    }

    /// Puts `items` into `endpoint`'s LRU, in order (the last is the most recent). First
    /// drops the LRUs of endpoints absent from `snapshot` when it is newer than any seen.
    /// An endpoint that left discovery (retired) is not credited.
    pub fn record(&self, snapshot: &Snapshot, items: &[u64], endpoint: &EndpointState) {
        if items.is_empty() || endpoint.load.is_retired() {
            return;
        }
        let mut inner = self.inner.write();
        if snapshot.version > inner.version && !snapshot.endpoints.is_empty() {
            inner.version = snapshot.version;
            let live: Vec<u64> = snapshot.endpoints.iter().map(|e| e.load.uid()).collect();
            inner.lrus.retain(|uid, _| live.contains(uid));
        }
        let capacity = self.capacity;
        let lru = inner.lrus.entry(endpoint.load.uid()).or_insert_with(|| {
            // Unbounded then resized: no table of `capacity` slots is allocated up front.
            let mut l = LruCache::unbounded_with_hasher(foldhash::fast::RandomState::default());
            l.resize(capacity);
            l
        });
        for h in items {
            lru.put(*h, ());
        }
    }
}

/// The producer: records each request's items on its primary pick.
#[derive(Debug)]
pub struct MmEmbeddingsCacheProducer {
    cache: Arc<MmCache>,
}

impl MmEmbeddingsCacheProducer {
    /// The cache it fills.
    pub fn cache(&self) -> &Arc<MmCache> {
        &self.cache
    }
}

impl PreRequest for MmEmbeddingsCacheProducer {
    fn pre_request(&self, ctx: &RequestCtx<'_>, result: &SchedulingResult) {
        self.cache
            .record(ctx.snapshot(), ctx.req.media, &result.decode.endpoint);
    }
}

fn build(params: Option<&Value>, _: &mut BuildCtx<'_>) -> Result<Built, PluginError> {
    let p: Params = decode(params)?;
    let mb = p.cache_size_in_mb_per_server;
    if !(0..=MAX_CACHE_SIZE_MB).contains(&mb) {
        return Err(PluginError::invalid(
            "cacheSizeInMBPerServer",
            format!("must be between 0 (the default, {DEFAULT_CACHE_SIZE_MB}) and {MAX_CACHE_SIZE_MB} MiB, got {mb}"),
        ));
    }
    let cache = Arc::new(MmCache::new(capacity_for_mb(mb)));
    let producer = Arc::new(MmEmbeddingsCacheProducer {
        cache: cache.clone(),
    });
    let p = Params {
        cache_size_in_mb_per_server: if mb == 0 { DEFAULT_CACHE_SIZE_MB } else { mb },
    };
    Ok(Built {
        pre_request: Some(producer),
        shared: Some(cache),
        params: effective(&p),
        ..Built::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::testutil::ep;

    fn built(params: &str) -> Result<Built, PluginError> {
        let v: Value = serde_yaml_ng::from_str(params).unwrap();
        let mut ctx = BuildCtx {
            built: &[],
            profiles: &[],
            next_slot: 0,
        };
        build(Some(&v), &mut ctx)
    }

    fn cache_of(b: &Built) -> Arc<MmCache> {
        b.shared.clone().unwrap().downcast::<MmCache>().unwrap()
    }

    #[test]
    fn capacity_is_two_mib_per_item() {
        assert_eq!(capacity_for_mb(4096).get(), 2048);
        assert_eq!(capacity_for_mb(0).get(), 2048);
        assert_eq!(capacity_for_mb(2048).get(), 1024);
        assert_eq!(capacity_for_mb(3).get(), 1);
        assert_eq!(capacity_for_mb(1).get(), 1);
        assert_eq!(capacity_for_mb(MAX_CACHE_SIZE_MB).get(), 524_288);
        assert_eq!(cache_of(&built("{}").unwrap()).capacity(), 2048);
        let b = built("cacheSizeInMB: 2048").unwrap();
        assert_eq!(cache_of(&b).capacity(), 1024);
        assert_eq!(
            serde_yaml_ng::to_string(&b.params).unwrap(),
            "cacheSizeInMBPerServer: 2048\n"
        );
        let b = built("cacheSizeInMBPerServer: 0").unwrap();
        assert_eq!(
            serde_yaml_ng::to_string(&b.params).unwrap(),
            "cacheSizeInMBPerServer: 4096\n"
        );
    }

    #[test]
    fn bad_parameters_name_the_field() {
        for bad in [-1, MAX_CACHE_SIZE_MB + 1] {
            let e = built(&format!("cacheSizeInMBPerServer: {bad}"))
                .err()
                .expect("refused");
            assert_eq!(e.path.as_deref(), Some("cacheSizeInMBPerServer"));
            assert_eq!(
                e.message,
                format!("must be between 0 (the default, 4096) and 1048576 MiB, got {bad}")
            );
        }
        let e = built("cacheSizeInMBPerServer: big").err().expect("refused");
        assert_eq!(e.path.as_deref(), Some("cacheSizeInMBPerServer"));
        let e = built("cacheSize: 1").err().expect("refused");
        assert_eq!(e.key.as_deref(), Some("cacheSize"));
    }

    #[test]
    fn lru_per_endpoint_evicts_the_oldest() {
        let (a, b) = (ep("a", None), ep("b", None));
        let snap = Snapshot {
            endpoints: vec![a.clone(), b.clone()],
            version: 1,
        };
        let c = MmCache::new(NonZeroUsize::new(2).unwrap());
        c.record(&snap, &[1, 2], &a);
        assert_eq!(
            (c.matched(&[1, 2, 3], &a), c.matched(&[1, 2, 3], &b)),
            (2, 0)
        );
        // Reading does not refresh: 1 is still the oldest and goes when 3 comes.
        assert_eq!(c.matched(&[1], &a), 1);
        c.record(&snap, &[3], &a);
        assert_eq!(c.matched(&[1, 2, 3], &a), 2);
        assert_eq!(c.matched(&[1], &a), 0);
        // A re-put item becomes the most recent: 2, then 4 evicts 3.
        c.record(&snap, &[2, 4], &a);
        assert_eq!(c.matched(&[2, 3, 4], &a), 2);
        assert_eq!(c.matched(&[3], &a), 0);
        assert_eq!(c.len(&a), 2);
        let mut out = [9; 2];
        c.matched_each(&[2, 4, 5], &[&a, &b], &mut out);
        assert_eq!(out, [2, 0]);
    }

    #[test]
    fn departed_and_retired_endpoints_are_dropped() {
        let (a, b) = (ep("a", None), ep("b", None));
        let both = Snapshot {
            endpoints: vec![a.clone(), b.clone()],
            version: 3,
        };
        let c = MmCache::new(NonZeroUsize::new(8).unwrap());
        c.record(&both, &[1], &a);
        c.record(&both, &[1], &b);
        // An older snapshot prunes nothing; a newer one without `b` drops its LRU.
        let old = Snapshot {
            endpoints: vec![a.clone()],
            version: 2,
        };
        c.record(&old, &[2], &a);
        assert_eq!(c.len(&b), 1);
        let newer = Snapshot {
            endpoints: vec![a.clone()],
            version: 4,
        };
        c.record(&newer, &[3], &a);
        assert_eq!((c.len(&a), c.len(&b)), (3, 0));
        a.load.retire();
        c.record(&newer, &[4], &a);
        assert_eq!(c.len(&a), 3);
        assert!(!c.is_empty());
    }
}
