//! `mm-embeddings-cache-scorer` — prefers endpoints that already encoded the request's
//! images, audio and video.
//!
//! - **Type:** `mm-embeddings-cache-scorer`
//! - **Extension points:** Scorer (llm-d category Affinity)
//! - **Parameters:** `producerName` (name of an `mm-embeddings-cache-producer`; default
//!   [`DEFAULT_PRODUCER`], which the config loader creates with default parameters when no
//!   plugin of that name is declared, as llm-d auto-creates its default producer).
//! - **Inputs:** the request's multimodal items ([`SchedulingRequest::media`]), made
//!   distinct; the producer's per-endpoint LRUs.
//! - **Outputs:** per candidate, `matched / items`: the distinct items its LRU holds over
//!   the request's distinct items (every item counts 1, as in llm-d). A request without
//!   items, or an endpoint with no LRU yet, scores 0.
//! - **Limitations:** as accurate as the producer's record (the router's own primary picks;
//!   see `mm_embeddings_cache_producer`). A `producerName` that names no plugin, or a plugin
//!   of another type, is refused at load.
//!   Source: llm-d `pkg/epp/framework/plugins/scheduling/scorer/mmcacheaffinity/scorer.go`.
//!
//! [`SchedulingRequest::media`]: crate::request::SchedulingRequest::media

use crate::endpoint::EndpointState;
use crate::plugin::Scorer;
use crate::plugin_build::{decode, effective, BuildCtx, Built, PluginError, PluginType, Stage};
use crate::plugins::mm_embeddings_cache_producer::{self as producer, MmCache};
use crate::request::RequestCtx;
use serde::{Deserialize, Serialize};
use serde_yaml_ng::Value;
use smallvec::SmallVec;
use std::sync::Arc;

/// Registry entry.
pub const TYPE: PluginType = PluginType {
    name: "mm-embeddings-cache-scorer",
    stage: Stage::Consumer,
    build,
};

/// Default of `producerName`: the producer's type, llm-d's default producer name.
pub const DEFAULT_PRODUCER: &str = producer::TYPE.name;

/// Parameters (llm-d names).
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct Params {
    /// The producer to read; `None` (or empty) = [`DEFAULT_PRODUCER`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub producer_name: Option<String>,
}

impl Params {
    /// The producer's name, the default filled in.
    pub fn producer(&self) -> &str {
        match self.producer_name.as_deref() {
            None | Some("") => DEFAULT_PRODUCER,
            Some(n) => n,
        }
    }
}

/// Whether a scorer declared with `params` reads the default producer (the config loader
/// then creates it when no plugin of that name is declared). Unreadable parameters count as
/// the default: the scorer's own factory reports them.
pub fn reads_default_producer(params: Option<&Value>) -> bool {
    decode::<Params>(params).map_or(true, |p| p.producer() == DEFAULT_PRODUCER)
}

/// The scorer.
#[derive(Debug)]
pub struct MmEmbeddingsCacheScorer {
    cache: Arc<MmCache>,
}

impl MmEmbeddingsCacheScorer {
    /// A scorer reading `cache`.
    pub fn new(cache: Arc<MmCache>) -> Self {
        MmEmbeddingsCacheScorer { cache }
    }
}

impl Scorer for MmEmbeddingsCacheScorer {
    fn score(&self, ctx: &RequestCtx<'_>, candidates: &[&Arc<EndpointState>], out: &mut [f64]) {
        if ctx.req.media.is_empty() {
            return;
        }
        let mut items: SmallVec<[u64; 8]> = SmallVec::from_slice(ctx.req.media);
        items.sort_unstable();
        items.dedup();
        let mut matched: SmallVec<[usize; 16]> = SmallVec::from_elem(0, candidates.len());
        self.cache.matched_each(&items, candidates, &mut matched);
        let per_item = 1.0 / items.len() as f64;
        for (o, m) in out.iter_mut().zip(&matched) {
            *o = *m as f64 * per_item;
        }
    }
}

fn build(params: Option<&Value>, ctx: &mut BuildCtx<'_>) -> Result<Built, PluginError> {
    let p: Params = decode(params)?;
    let name = p.producer();
    let found = ctx.built.iter().find(|(n, _, _)| n == name);
    let cache = match found {
        None => {
            return Err(PluginError::missing(
                "producerName",
                name,
                format!("no plugin named `{name}`"),
            ))
        }
        Some((_, t, b)) => b
            .shared
            .clone()
            .filter(|_| t == producer::TYPE.name)
            .and_then(|s| s.downcast::<MmCache>().ok())
            .ok_or_else(|| {
                PluginError::invalid(
                    "producerName",
                    format!(
                        "plugin `{name}` is a `{t}`, not an `{}`",
                        producer::TYPE.name
                    ),
                )
            })?,
    };
    Ok(Built {
        scorer: Some(Arc::new(MmEmbeddingsCacheScorer::new(cache))),
        params: effective(&p),
        ..Built::default()
    })
}

#[cfg(test)]
#[path = "mm_embeddings_cache_scorer_tests.rs"]
mod tests;
