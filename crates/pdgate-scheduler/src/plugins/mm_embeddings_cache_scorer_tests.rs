//! Unit tests of `mm_embeddings_cache_scorer.rs`.

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
