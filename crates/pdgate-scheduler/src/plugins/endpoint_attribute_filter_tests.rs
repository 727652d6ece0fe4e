//! Unit tests of `endpoint_attribute_filter.rs`.

use super::*;
use crate::plugins::testutil::{ep, with_ctx};
use pdgate_api::PromptInput;

fn yaml(s: &str) -> Value {
    serde_yaml_ng::from_str(s).unwrap()
}

fn build_err(params: &str) -> PluginError {
    let mut ctx = BuildCtx {
        built: &[],
        profiles: &[],
        next_slot: 0,
    };
    match build(Some(&yaml(params)), &mut ctx) {
        Err(e) => e,
        Ok(_) => panic!("accepted: {params}"),
    }
}

fn built(params: &str) -> Built {
    let mut ctx = BuildCtx {
        built: &[],
        profiles: &[],
        next_slot: 0,
    };
    build(Some(&yaml(params)), &mut ctx).unwrap_or_else(|e| panic!("{e:?}"))
}

/// Names of the candidates `params` keeps out of four endpoints: `a` waiting 2, running 1,
/// KV 0.25; `b` waiting 5.7 (read as 5), running 3, KV 0.9; `c` waiting 9, KV unknown;
/// `d` never scraped.
fn kept(params: &str) -> Vec<String> {
    let eps = [ep("a", None), ep("b", None), ep("c", None), ep("d", None)];
    eps[0].load.set_scraped(Some(1.0), Some(2.0), Some(0.25));
    eps[1].load.set_scraped(Some(3.0), Some(5.7), Some(0.9));
    eps[2].load.set_scraped(None, Some(9.0), None);
    let b = built(params);
    let f = b.filter.unwrap();
    let mut c: Candidates<'_> = eps.iter().collect();
    with_ctx(&PromptInput::Tokens(vec![]), |ctx| f.filter(ctx, &mut c));
    c.iter().map(|e| e.endpoint.name.clone()).collect()
}

const ALGO: &str = "algorithm: {type: threshold, threshold: {operator: ";

#[test]
fn threshold_operators_on_each_attribute_with_missing_passing_by_default() {
    let q = |op: &str, v: &str| {
        kept(&format!(
            "attribute: WaitingQueueSize\n{ALGO}{op}, value: {v}}}}}"
        ))
    };
    // a=2, b=5 (5.7 truncated), c=9, d missing (passes).
    assert_eq!(q("LessThan", "5"), ["a", "d"]);
    assert_eq!(q("LessThanOrEqual", "5"), ["a", "b", "d"]);
    assert_eq!(q("GreaterThan", "5"), ["c", "d"]);
    assert_eq!(q("GreaterThanOrEqual", "5"), ["b", "c", "d"]);
    assert_eq!(q("Equal", "5"), ["b", "d"]);
    assert_eq!(q("NotEqual", "5"), ["a", "c", "d"]);
    // KV: a=0.25, b=0.9, c and d missing.
    let kv = kept(&format!(
            "attribute: KVCacheUsagePercent\nproducer: core-metrics-extractor\n{ALGO}LessThanOrEqual, value: 0.8}}}}"
        ));
    assert_eq!(kv, ["a", "c", "d"]);
    // Running: a=1, b=3, c and d missing; onMissing Fail drops them.
    let run = kept(&format!(
        "attribute: RunningRequestsSize\nonMissing: Fail\n{ALGO}GreaterThan, value: 1}}}}"
    ));
    assert_eq!(run, ["b"]);
    let empty_is_pass = kept(&format!(
        "attribute: RunningRequestsSize\nonMissing: \"\"\n{ALGO}GreaterThan, value: 1}}}}"
    ));
    assert_eq!(empty_is_pass, ["b", "c", "d"]);
}

#[test]
fn fallback_on_empty_keeps_everyone_only_when_nothing_passes() {
    let none =
        format!("attribute: WaitingQueueSize\nonMissing: Fail\n{ALGO}GreaterThan, value: 100}}}}");
    assert!(kept(&none).is_empty());
    let fallback = format!("{none}\nfallbackOnEmpty: true");
    assert_eq!(kept(&fallback), ["a", "b", "c", "d"]);
    let some = format!(
            "attribute: WaitingQueueSize\nonMissing: Fail\nfallbackOnEmpty: true\n{ALGO}LessThan, value: 3}}}}"
        );
    assert_eq!(kept(&some), ["a"]);
}

#[test]
fn effective_params_fill_the_producer_and_defaults() {
    let b = built(&format!("attribute: WaitingQueueSize\n{ALGO}LessThan}}}}"));
    let want = yaml(
            "attribute: WaitingQueueSize\nproducer: core-metrics-extractor\nonMissing: Pass\n\
             fallbackOnEmpty: false\nalgorithm: {type: threshold, threshold: {operator: LessThan, value: 0.0}}",
        );
    assert_eq!(b.params, want);
}

#[test]
fn bad_parameters_name_the_field() {
    let e = build_err(&format!(
        "attribute: GPUUtilization\nproducer: dcgm-extractor\n{ALGO}LessThan}}}}"
    ));
    assert_eq!(e.path.as_deref(), Some("attribute"));
    assert_eq!(e.missing.as_deref(), Some("dcgm-extractor"));
    assert!(
        e.message
            .starts_with("`GPUUtilization/dcgm-extractor` is a GPU hardware counter"),
        "{}",
        e.message
    );
    assert!(
        e.message.contains("no hardware-counter producer"),
        "{}",
        e.message
    );
    let e = build_err(&format!("attribute: GPUUtilization\n{ALGO}LessThan}}}}"));
    assert_eq!((e.path.as_deref(), e.missing), (Some("attribute"), None));
    assert!(
        e.message
            .starts_with("`GPUUtilization/core-metrics-extractor` is a GPU hardware"),
        "{}",
        e.message
    );
    let e = build_err(&format!(
        "attribute: custom.queue_depth\n{ALGO}LessThan}}}}"
    ));
    assert_eq!(e.path.as_deref(), Some("attribute"));
    assert!(e
        .message
        .contains("`custom.queue_depth` is not an attribute pdgate supplies"));
    let e = build_err(&format!(
        "attribute: WaitingQueueSize/core-metrics-extractor\n{ALGO}LessThan}}}}"
    ));
    assert_eq!(e.path.as_deref(), Some("attribute"));
    assert!(
        e.message
            .contains("write `attribute: WaitingQueueSize` and `producer: core-metrics-extractor`"),
        "{}",
        e.message
    );
    let e = build_err(&format!(
        "attribute: WaitingQueueSize\nproducer: \"\"\n{ALGO}LessThan}}}}"
    ));
    assert_eq!(e.path.as_deref(), Some("producer"));
    assert!(e.message.contains("producer-agnostic"), "{}", e.message);
    let e = build_err(&format!(
        "attribute: WaitingQueueSize\nproducer: other\n{ALGO}LessThan}}}}"
    ));
    assert_eq!(
        (e.path.as_deref(), e.missing.as_deref()),
        (Some("producer"), Some("other"))
    );
    let e = build_err(&format!("attribute: \"\"\n{ALGO}LessThan}}}}"));
    assert_eq!(
        (e.path.as_deref(), e.message.as_str()),
        (Some("attribute"), "must not be empty")
    );
    let e = build_err("attribute: WaitingQueueSize\nalgorithm: {type: threshold}");
    assert_eq!(e.path.as_deref(), Some("algorithm.threshold"));
    let e = build_err("attribute: WaitingQueueSize\nalgorithm: {type: topK}");
    assert_eq!(e.path.as_deref(), Some("algorithm.topK"));
    let e = build_err("attribute: WaitingQueueSize\nalgorithm: {type: best}");
    assert_eq!(e.path.as_deref(), Some("algorithm.type"));
    assert!(
        e.message
            .contains("expected one of `threshold`, `range`, `topK`, `percentile`"),
        "{}",
        e.message
    );
    for (algo, field) in [
        (
            "{type: range, range: {min: 5, max: 1}}",
            "algorithm.range.min",
        ),
        (
            "{type: range, range: {min: 1, max: .inf}}",
            "algorithm.range.max",
        ),
        ("{type: topK, topK: {k: 0}}", "algorithm.topK.k"),
        (
            "{type: percentile, percentile: {percentile: 101}}",
            "algorithm.percentile.percentile",
        ),
        (
            "{type: percentile, percentile: {percentile: .nan}}",
            "algorithm.percentile.percentile",
        ),
        ("{type: percentile}", "algorithm.percentile"),
        ("{type: range}", "algorithm.range"),
    ] {
        let e = build_err(&format!("attribute: WaitingQueueSize\nalgorithm: {algo}"));
        assert_eq!(e.path.as_deref(), Some(field), "{algo}: {}", e.message);
    }
    let e = build_err(&format!("attribute: WaitingQueueSize\n{ALGO}Below}}}}"));
    assert_eq!(e.path.as_deref(), Some("algorithm.threshold.operator"));
    let e = build_err(&format!(
        "attribute: WaitingQueueSize\n{ALGO}LessThan, value: .nan}}}}"
    ));
    assert_eq!(e.path.as_deref(), Some("algorithm.threshold.value"));
    let e = build_err(&format!(
        "attribute: WaitingQueueSize\nonMissing: Drop\n{ALGO}LessThan}}}}"
    ));
    assert_eq!(e.path.as_deref(), Some("onMissing"));
    let e = build_err(&format!(
        "attribute: WaitingQueueSize\nbogus: 1\n{ALGO}LessThan}}}}"
    ));
    assert_eq!(e.key.as_deref(), Some("bogus"));
    let e = build_err(&format!("{ALGO}LessThan}}}}"));
    assert!(
        e.message.contains("missing field `attribute`"),
        "{}",
        e.message
    );
    let e = build_err("attribute: WaitingQueueSize");
    assert!(
        e.message.contains("missing field `algorithm`"),
        "{}",
        e.message
    );
}

/// `range`, `topK` and `percentile` (llm-d's README), on the four endpoints of [`kept`]:
/// waiting a=2, b=5, c=9, d missing.
#[test]
fn range_top_k_and_percentile_keep_the_hand_computed_endpoints() {
    let q = |algo: &str| kept(&format!("attribute: WaitingQueueSize\nalgorithm: {algo}"));
    let fail = |algo: &str| {
        kept(&format!(
            "attribute: WaitingQueueSize\nonMissing: Fail\nalgorithm: {algo}"
        ))
    };
    // Inclusive bounds; d passes as missing.
    assert_eq!(q("{type: range, range: {min: 2, max: 5}}"), ["a", "b", "d"]);
    assert_eq!(fail("{type: range, range: {min: 3, max: 9}}"), ["b", "c"]);
    // Highest two of 2, 5, 9: c and b, kept in candidate order; lowest one: a.
    assert_eq!(fail("{type: topK, topK: {k: 2}}"), ["b", "c"]);
    assert_eq!(
        fail("{type: topK, topK: {k: 1, higherIsBetter: false}}"),
        ["a"]
    );
    // K over the count keeps every endpoint with the attribute; d by onMissing Pass.
    assert_eq!(q("{type: topK, topK: {k: 10}}"), ["a", "b", "c", "d"]);
    // Sorted 2, 5, 9 (N = 3): P50 → ceil(1.5) = 2nd = 5; P25 → ceil(0.75) = 1st = 2;
    // P100 → 3rd = 9; P0 → the 1st.
    assert_eq!(
        fail("{type: percentile, percentile: {percentile: 50}}"),
        ["b", "c"]
    );
    assert_eq!(
        fail("{type: percentile, percentile: {percentile: 25, higherIsBetter: false}}"),
        ["a"]
    );
    assert_eq!(
        fail("{type: percentile, percentile: {percentile: 100}}"),
        ["c"]
    );
    assert_eq!(
        fail("{type: percentile, percentile: {percentile: 0}}"),
        ["a", "b", "c"]
    );
}

#[test]
fn rules_on_ties_and_on_no_values() {
    let v = [Some(3.0), Some(1.0), Some(3.0), None];
    // Ties keep candidate order: the first 3.0 wins the single top slot.
    assert_eq!(
        Rule::TopK(1, true).keep(&v, false),
        [true, false, false, false]
    );
    assert_eq!(
        Rule::TopK(2, true).keep(&v, true),
        [true, false, true, true]
    );
    // No endpoint has the attribute: only onMissing decides.
    let none = [None, None];
    assert_eq!(
        Rule::Percentile(50.0, true).keep(&none, false),
        [false, false]
    );
    assert_eq!(Rule::TopK(1, true).keep(&none, true), [true, true]);
    assert_eq!(Rule::Range(1.0, 1.0).keep(&[Some(1.0)], false), [true]);
}
