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
use crate::plugins::mm_embeddings_cache_producer::{self as producer, MmCache};
use crate::registry::{decode, effective, BuildCtx, Built, PluginError, PluginType, Stage};
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
mod tests {
    use super::*;
    use crate::endpoint::Snapshot;
    use crate::plugins::testutil::ep;
    use crate::request::SchedulingRequest;
    use crate::Scheduler;
    use pdgate_api::PromptInput;
    use std::num::NonZeroUsize;

    fn score(cache: &Arc<MmCache>, media: &[u64], candidates: &[&Arc<EndpointState>]) -> Vec<f64> {
        let prompt = PromptInput::Text(String::new());
        let req = SchedulingRequest {
            media,
            ..SchedulingRequest::new("r", "m", &prompt)
        };
        let ctx = RequestCtx::new(&req, 0);
        let mut out = vec![0.0; candidates.len()];
        MmEmbeddingsCacheScorer::new(cache.clone()).score(&ctx, candidates, &mut out);
        out
    }

    #[test]
    fn fraction_of_distinct_items_held() {
        let (a, b, c) = (ep("a", None), ep("b", None), ep("c", None));
        let snap = Snapshot {
            endpoints: vec![a.clone(), b.clone(), c.clone()],
            version: 1,
        };
        let cache = Arc::new(MmCache::new(NonZeroUsize::new(16).unwrap()));
        cache.record(&snap, &[1, 2, 3, 4], &a);
        cache.record(&snap, &[2], &b);
        // Request items {1, 2, 5, 6}: a holds 1 and 2 → 2/4; b holds 2 → 1/4; c nothing.
        assert_eq!(
            score(&cache, &[1, 2, 5, 6], &[&a, &b, &c]),
            [0.5, 0.25, 0.0]
        );
        // Duplicates count once: {2, 7} → a 1/2, b 1/2.
        assert_eq!(score(&cache, &[2, 2, 7, 2], &[&a, &b, &c]), [0.5, 0.5, 0.0]);
        // Every item held → 1; no items → 0 everywhere.
        assert_eq!(score(&cache, &[4, 3], &[&a, &b]), [1.0, 0.0]);
        assert_eq!(score(&cache, &[], &[&a, &b]), [0.0, 0.0]);
    }

    fn config(scorer_params: &str, producer: &str) -> String {
        format!(
            "plugins:\n{producer}- type: mm-embeddings-cache-scorer\n  parameters: {scorer_params}\n\
             - type: queue-scorer\nschedulingProfiles:\n- name: default\n  plugins:\n  \
             - pluginRef: mm-embeddings-cache-scorer\n    weight: 4\n  - pluginRef: queue-scorer\n"
        )
    }

    /// Through the scheduler: the default producer is created, credits the primary pick, and
    /// the next request with the same image goes there although it is busier.
    #[test]
    fn a_repeated_image_follows_its_first_pick() {
        let s = Scheduler::from_yaml(&config("{}", ""), "mm.yaml").unwrap();
        let effective = s.effective_config_yaml();
        assert!(
            effective.contains("type: mm-embeddings-cache-producer"),
            "{effective}"
        );
        let (a, b) = (ep("a", None), ep("b", None));
        let snap = Snapshot {
            endpoints: vec![a.clone(), b.clone()],
            version: 1,
        };
        // b is busier: the first request (queue scorer only, no credit yet) goes to a.
        b.load.set_scraped(Some(2.0), Some(0.0), None);
        let prompt = PromptInput::Text("describe".into());
        let req = |media| SchedulingRequest {
            media,
            ..SchedulingRequest::new("r", "m", &prompt)
        };
        let first = s.schedule(&req(&[42]), &snap).unwrap();
        assert_eq!(first.decode.endpoint.endpoint.name, "a");
        // Now a is the busier one (3 queued against b's 2): a text request goes to b…
        a.load.set_scraped(Some(3.0), Some(0.0), None);
        let text = s.schedule(&req(&[]), &snap).unwrap();
        assert_eq!(text.decode.endpoint.endpoint.name, "b");
        // …but the same image scores a 4·1 + 0 = 4 against b's 0 + 4·0 + 1 = 1.
        let again = s.schedule(&req(&[42]), &snap).unwrap();
        assert_eq!(again.decode.endpoint.endpoint.name, "a");
    }

    #[test]
    fn the_producer_is_found_by_name_or_refused() {
        let named = "- type: mm-embeddings-cache-producer\n  name: mine\n";
        assert!(Scheduler::from_yaml(&config("{producerName: mine}", named), "a.yaml").is_ok());
        let e = Scheduler::from_yaml(&config("{producerName: other}", named), "b.yaml")
            .err()
            .expect("refused")
            .to_string();
        assert!(
            e.contains("producerName") && e.contains("no plugin named `other`"),
            "{e}"
        );
        let approx = "- type: approx-prefix-cache-producer\n";
        let e = Scheduler::from_yaml(
            &config("{producerName: approx-prefix-cache-producer}", approx),
            "c.yaml",
        )
        .err()
        .expect("refused")
        .to_string();
        assert!(
            e.contains("plugin `approx-prefix-cache-producer` is a `approx-prefix-cache-producer`, not an `mm-embeddings-cache-producer`"),
            "{e}"
        );
        let e = Scheduler::from_yaml(&config("{producer: x}", ""), "d.yaml")
            .err()
            .expect("refused")
            .to_string();
        assert!(e.contains("unknown field `producer`"), "{e}");
        assert!(reads_default_producer(None));
        let v: Value = serde_yaml_ng::from_str("producerName: mine").unwrap();
        assert!(!reads_default_producer(Some(&v)));
    }
}
