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

/// The subset hint of a request: `None` when the data plane sent none (every endpoint of the
/// pool may be picked); `Some(set)` restricts candidates to those `ip:port`s (an empty set
/// matches nothing).
pub fn subset_hint(meta: Option<&Metadata>) -> Option<BTreeSet<String>> {
    let value = meta?
        .filter_metadata
        .get(SUBSET_NAMESPACE)?
        .fields
        .get(SUBSET)?;
    let mut out = BTreeSet::new();
    match &value.kind {
        Some(Kind::ListValue(list)) => {
            for v in &list.values {
                if let Some(Kind::StringValue(s)) = &v.kind {
                    add_list(&mut out, s);
                }
            }
        }
        Some(Kind::StringValue(s)) => add_list(&mut out, s),
        _ => {}
    }
    Some(out)
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
        assert_eq!(subset_hint(Some(&m)), Some(want.clone()));
        let m = meta(
            SUBSET_NAMESPACE,
            SUBSET,
            string("10.0.0.1:8000, 10.0.0.2:8000"),
        );
        assert_eq!(subset_hint(Some(&m)), Some(want));
        let empty = meta(SUBSET_NAMESPACE, SUBSET, string(""));
        assert_eq!(subset_hint(Some(&empty)), Some(BTreeSet::new()));
        assert_eq!(subset_hint(None), None);
        let other = meta(LB_NAMESPACE, SUBSET, string("10.0.0.1:8000"));
        assert_eq!(subset_hint(Some(&other)), None);
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
