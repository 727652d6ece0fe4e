//! The metadata half of the endpoint-picker protocol (Gateway API Inference Extension,
//! `docs/proposals/004-endpoint-picker-protocol`, v1.0):
//!
//! - request, data plane → EPP: the subset hint, filter metadata
//!   `envoy.lb.subset_hint` / `x-gateway-destination-endpoint-subset`, a list of `ip:port`
//!   strings (a comma-separated string is accepted too);
//! - answer, EPP → data plane: dynamic metadata `envoy.lb` / `x-gateway-destination-endpoint`
//!   = `ip:port[,ip:port...]` (the pick first, then the fallbacks), the same value as the
//!   header of that name;
//! - response, data plane → EPP: `envoy.lb` / `x-gateway-destination-endpoint-served` = the
//!   `ip:port` that served (the data plane may have fallen back).

use envoy_types::pb::envoy::config::core::v3::Metadata;
use envoy_types::pb::google::protobuf::{value::Kind, Struct, Value};
use std::collections::BTreeSet;

/// Namespace of the destination and served entries.
pub const LB_NAMESPACE: &str = "envoy.lb";
/// Namespace of the subset hint.
pub const SUBSET_NAMESPACE: &str = "envoy.lb.subset_hint";
/// Header and metadata key of the destination.
pub const DESTINATION: &str = "x-gateway-destination-endpoint";
/// Metadata key of the subset hint.
pub const SUBSET: &str = "x-gateway-destination-endpoint-subset";
/// Metadata key (and response header) of the endpoint that served.
pub const SERVED: &str = "x-gateway-destination-endpoint-served";

/// The subset hint of a request: `Ok(None)` when the data plane sent none (every endpoint of
/// the pool may be picked); `Ok(Some(set))` restricts candidates to those `ip:port`s (an empty
/// set matches nothing).
///
/// Errors: the hint is neither a string nor a list of strings (a number, a nested list, …):
/// a message saying what it is.
pub fn subset_hint(meta: Option<&Metadata>) -> Result<Option<BTreeSet<String>>, String> {
    let Some(value) = meta
        .and_then(|m| m.filter_metadata.get(SUBSET_NAMESPACE))
        .and_then(|s| s.fields.get(SUBSET))
    else {
        return Ok(None);
    };
    let mut out = BTreeSet::new();
    let not_strings = "must be a string or a list of strings (ip:port)";
    match &value.kind {
        Some(Kind::ListValue(list)) => {
            for v in &list.values {
                match &v.kind {
                    Some(Kind::StringValue(s)) => add_list(&mut out, s),
                    _ => return Err(format!("an item {not_strings}")),
                }
            }
        }
        Some(Kind::StringValue(s)) => add_list(&mut out, s),
        _ => return Err(not_strings.to_string()),
    }
    Ok(Some(out))
}

fn add_list(out: &mut BTreeSet<String>, s: &str) {
    out.extend(
        s.split(',')
            .map(str::trim)
            .filter(|a| !a.is_empty())
            .map(str::to_string),
    );
}

/// The `ip:port` the data plane reports as having served (`envoy.lb` /
/// `x-gateway-destination-endpoint-served`), if present: the first of a list.
pub fn served(meta: Option<&Metadata>) -> Option<String> {
    let value = meta?
        .filter_metadata
        .get(LB_NAMESPACE)?
        .fields
        .get(SERVED)?;
    match &value.kind {
        Some(Kind::StringValue(s)) => first_address(s),
        Some(Kind::ListValue(l)) => l.values.iter().find_map(|v| match &v.kind {
            Some(Kind::StringValue(s)) => first_address(s),
            _ => None,
        }),
        _ => None,
    }
}

/// The first non-empty item of a comma-separated list of addresses.
pub fn first_address(s: &str) -> Option<String> {
    s.split(',')
        .map(str::trim)
        .find(|a| !a.is_empty())
        .map(str::to_string)
}

/// The dynamic metadata of an answer: `{"envoy.lb": {"x-gateway-destination-endpoint":
/// destinations}}` (`destinations` as in the header: `ip:port[,ip:port...]`).
pub fn destination_metadata(destinations: &str) -> Struct {
    let inner = Struct {
        fields: [(DESTINATION.to_string(), string(destinations))].into(),
    };
    Struct {
        fields: [(
            LB_NAMESPACE.to_string(),
            Value {
                kind: Some(Kind::StructValue(inner)),
            },
        )]
        .into(),
    }
}

fn string(s: &str) -> Value {
    Value {
        kind: Some(Kind::StringValue(s.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use envoy_types::pb::google::protobuf::ListValue;

    fn meta(ns: &str, key: &str, value: Value) -> Metadata {
        Metadata {
            filter_metadata: [(
                ns.to_string(),
                Struct {
                    fields: [(key.to_string(), value)].into(),
                },
            )]
            .into(),
            ..Default::default()
        }
    }

    #[test]
    fn subset_as_list_or_comma_string_and_absent_means_unrestricted() {
        let list = Value {
            kind: Some(Kind::ListValue(ListValue {
                values: vec![string("10.0.0.1:8000"), string("10.0.0.2:8000")],
            })),
        };
        let m = meta(SUBSET_NAMESPACE, SUBSET, list);
        let want: BTreeSet<String> = ["10.0.0.1:8000", "10.0.0.2:8000"].map(String::from).into();
        assert_eq!(subset_hint(Some(&m)), Ok(Some(want.clone())));
        let m = meta(
            SUBSET_NAMESPACE,
            SUBSET,
            string("10.0.0.1:8000, 10.0.0.2:8000"),
        );
        assert_eq!(subset_hint(Some(&m)), Ok(Some(want)));
        let empty = meta(SUBSET_NAMESPACE, SUBSET, string(""));
        assert_eq!(subset_hint(Some(&empty)), Ok(Some(BTreeSet::new())));
        assert_eq!(subset_hint(None), Ok(None));
        let other = meta(LB_NAMESPACE, SUBSET, string("10.0.0.1:8000"));
        assert_eq!(subset_hint(Some(&other)), Ok(None));
    }

    /// Malformed hints (found by an adversarial try) are errors, never "matches nothing".
    #[test]
    fn a_hint_that_is_not_strings_is_an_error() {
        let number = Value {
            kind: Some(Kind::NumberValue(5.0)),
        };
        let list = |values: Vec<Value>| Value {
            kind: Some(Kind::ListValue(ListValue { values })),
        };
        let nested = list(vec![list(vec![string("10.0.0.1:8000")])]);
        let mixed = list(vec![string("10.0.0.1:8000"), number.clone()]);
        for bad in [number, nested, mixed] {
            let m = meta(SUBSET_NAMESPACE, SUBSET, bad);
            let e = subset_hint(Some(&m)).unwrap_err();
            assert!(e.contains("list of strings"), "{e}");
        }
    }

    #[test]
    fn served_and_destination_round_trip() {
        let m = meta(LB_NAMESPACE, SERVED, string("10.0.0.3:8000"));
        assert_eq!(served(Some(&m)).as_deref(), Some("10.0.0.3:8000"));
        assert_eq!(served(None), None);
        let d = destination_metadata("10.0.0.1:8000,10.0.0.2:8000");
        let Some(Kind::StructValue(inner)) = &d.fields[LB_NAMESPACE].kind else {
            panic!("envoy.lb is not a struct: {d:?}")
        };
        assert_eq!(
            inner.fields[DESTINATION].kind,
            Some(Kind::StringValue("10.0.0.1:8000,10.0.0.2:8000".into()))
        );
    }
}
