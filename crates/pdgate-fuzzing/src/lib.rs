//! One function per fuzz target (issue 10 item 7): each feeds arbitrary bytes to a parser of
//! untrusted input and asserts what must hold whatever the bytes. `fuzz/` (cargo-fuzz,
//! nightly) calls them from libFuzzer; `tests/corpus.rs` replays `fuzz/seeds/<target>/` and
//! `fuzz/regressions/<target>/` through them on stable, so every input ever found stays a test.
//!
//! A panic is the failure: parsers must answer errors, never panic.

use bytes::Bytes;
use pdgate_api::{hints::RoutingHints, media::media_items, prefer, ApiKind, InferenceRequest};
use pdgate_coordinator::{owned, phase_body, KvConnector};
use pdgate_core::owned_filter::OwnedFilter;
use pdgate_scheduler::plugins::label_selector_filter::LabelSelector;
use pdgate_scheduler::Scheduler;
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// A target's check: panics when something that must hold does not.
pub type Check = fn(&[u8]);

/// Every target: its name (the directory under `fuzz/corpus/` and `fuzz/seeds/`) and its
/// check.
pub const TARGETS: &[(&str, Check)] = &[
    ("request_body", request_body),
    ("hint_headers", hint_headers),
    ("prefer", prefer_values),
    ("label_selector", label_selector),
    ("epp_config", epp_config),
    ("endpoints_file", endpoints_file),
    ("prometheus", prometheus),
    ("sse", sse),
];

fn object(b: &[u8]) -> Map<String, Value> {
    serde_json::from_slice(b).expect("a leg body is a JSON object")
}

/// A client body through everything that reads it — the tree-free parse, media listing, body
/// hints, the router-owned strip, the leg bodies (each must be a JSON object with the fields
/// the contract sets) — and the same bytes as an engine answer through the answer strip.
pub fn request_body(data: &[u8]) {
    for kind in ApiKind::ALL {
        let Ok(mut req) = InferenceRequest::parse(kind, data) else {
            continue;
        };
        let _ = media_items(&req.body);
        let _ = RoutingHints::parse(|_| None, &req.body);
        owned::strip_request(&mut req);
        assert!(!owned::ROUTER_OWNED_FIELDS
            .iter()
            .any(|f| req.body.contains_key(f)));
        for kv in [KvConnector::Nixl, KvConnector::SharedStorage] {
            let p = object(&phase_body::prefill_bytes(&req, &[], kv));
            assert_eq!(p.get("stream"), Some(&Value::Bool(false)));
            // The first token limit of the API is 1, where the API keeps it.
            let limits = match kind.leg_params_object() {
                None => Some(&p),
                Some(parent) => p.get(parent).and_then(Value::as_object),
            };
            let first = kind.token_limit_fields()[0];
            if let Some(limits) = limits {
                assert_eq!(limits.get(first), Some(&Value::from(1)));
            }
            object(&phase_body::decode_bytes(&req, Map::new(), kv));
        }
        object(&phase_body::aggregated_bytes(&req, &[Value::from(1)]));
    }
    if let Some(clean) = owned::strip_json(data) {
        let o = object(&clean);
        assert!(!owned::ROUTER_OWNED_FIELDS
            .iter()
            .any(|f| o.contains_key(*f)));
    }
}

/// Routing-hint headers, as `name: value` lines.
pub fn hint_headers(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let pairs: Vec<(&str, &str)> = text.lines().filter_map(|l| l.split_once(':')).collect();
    let body = pdgate_api::RawObject::parse(Bytes::from_static(b"{}")).expect("{} is an object");
    let _ = RoutingHints::parse(
        |n| {
            pairs
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(n))
                .map(|(_, v)| *v)
        },
        &body,
    );
}

/// `Prefer` values (RFC 7240), one per line; the quick test agrees with the parse.
pub fn prefer_values(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let values: Vec<&str> = text.split('\n').collect();
    let parsed = prefer::parse_prefer(values.iter().copied());
    let any = prefer::prefers(values.iter().copied(), prefer::IF_AVAILABLE);
    assert_eq!(any, parsed.iter().any(|p| p.name == prefer::IF_AVAILABLE));
}

/// A label selector (YAML), validated, then matched against fixed labels.
pub fn label_selector(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(sel) = serde_yaml_ng::from_str::<LabelSelector>(text) else {
        return;
    };
    if sel.validate().is_ok() {
        let labels = BTreeMap::from([
            ("llm-d.ai/role".to_string(), "decode".to_string()),
            ("app".to_string(), "vllm".to_string()),
        ]);
        let _ = sel.matches(&labels);
    }
}

/// An EndpointPickerConfig, loaded and checked; both readers agree on its validity.
pub fn epp_config(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let loaded = Scheduler::from_yaml(text, "fuzz");
    let checked = pdgate_scheduler::config::check(text, "fuzz");
    assert_eq!(loaded.is_ok(), checked.is_ok(), "{text:?}");
}

/// An endpoints file (YAML), and the same text as an `--endpoint` flag.
pub fn endpoints_file(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let _ = pdgate_fleet::endpoints_file::parse_endpoints_yaml(text, "fuzz");
    let _ = pdgate_fleet::endpoints_file::parse_endpoint_flag(text);
}

/// An engine's `/metrics` text and `/v1/models` body, as the scraper reads them.
pub fn prometheus(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = pdgate_fleet::scrape::parse_engine_metrics(text);
    }
    let _ = pdgate_fleet::scrape::parse_model_cards(data);
}

/// An engine's SSE stream through the router-owned-field filter, cut into chunks where the
/// first byte says; a stream that names no such field comes out byte for byte.
pub fn sse(data: &[u8]) {
    let Some((&step, stream)) = data.split_first() else {
        return;
    };
    let step = usize::from(step).max(1);
    let mut filter = OwnedFilter::default();
    let mut out = Vec::new();
    for chunk in stream.chunks(step) {
        match filter.push(Bytes::copy_from_slice(chunk)) {
            Ok(b) => out.extend_from_slice(&b),
            Err(_) => return,
        }
    }
    out.extend_from_slice(&filter.finish());
    if !owned::mentions(stream) {
        assert_eq!(out, stream);
    }
    for line in stream.split_inclusive(|&b| b == b'\n') {
        let _ = owned::strip_sse_line(line);
    }
}
