//! `label-selector-filter` — keeps endpoints whose labels match a Kubernetes label selector.
//!
//! - **Type:** `label-selector-filter`
//! - **Extension points:** Filter
//! - **Parameters:** a Kubernetes `LabelSelector` (llm-d decodes `metav1.LabelSelector`):
//!   `matchLabels` (map key → value, default `{}`) and `matchExpressions` (list of
//!   `{key, operator, values}`, default `[]`; `operator` is `In`, `NotIn`, `Exists` or
//!   `DoesNotExist`, case-sensitive).
//! - **Inputs:** the endpoint's labels.
//! - **Outputs:** candidates matching every `matchLabels` pair and every expression
//!   (AND): `In` — label present with a listed value; `NotIn` — label absent or its value not
//!   listed; `Exists` — label present; `DoesNotExist` — label absent. An empty selector
//!   keeps every candidate.
//! - **Limitations:** validated like Kubernetes at load time: label keys are qualified names
//!   (`[prefix/]name`), values ≤ 63 characters of `[A-Za-z0-9._-]`; `In`/`NotIn` need at
//!   least one value, `Exists`/`DoesNotExist` none. An unknown operator is a config error
//!   naming `matchExpressions[i].operator`.

use crate::plugin::{Candidates, Filter};
use crate::plugin_build::{decode, effective, BuildCtx, Built, PluginError, PluginType, Stage};
use crate::request::RequestCtx;
use serde::{Deserialize, Serialize};
use serde_yaml_ng::Value;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Registry entry.
pub const TYPE: PluginType = PluginType {
    name: "label-selector-filter",
    stage: Stage::Consumer,
    build,
};

/// A Kubernetes label selector (`metav1.LabelSelector`); the parameters of this filter.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct LabelSelector {
    /// Labels that must be present with exactly these values.
    pub match_labels: BTreeMap<String, String>,
    /// Requirements that must all hold.
    pub match_expressions: Vec<Requirement>,
}

/// One `matchExpressions` entry.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Requirement {
    /// Label key.
    pub key: String,
    /// How the label is compared.
    pub operator: Operator,
    /// Values for `In` / `NotIn` (must be empty for `Exists` / `DoesNotExist`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<String>,
}

/// Label selector operators (Kubernetes spelling).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
pub enum Operator {
    /// Label present with one of the values.
    In,
    /// Label absent, or its value is none of the values.
    NotIn,
    /// Label present, any value.
    Exists,
    /// Label absent.
    DoesNotExist,
}

impl LabelSelector {
    /// True when `labels` satisfy every pair and every requirement.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.match_labels
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v))
            && self.match_expressions.iter().all(|r| {
                let value = labels.get(&r.key);
                match r.operator {
                    Operator::In => value.is_some_and(|v| r.values.contains(v)),
                    Operator::NotIn => value.is_none_or(|v| !r.values.contains(v)),
                    Operator::Exists => value.is_some(),
                    Operator::DoesNotExist => value.is_none(),
                }
            })
    }

    /// Checks keys, values and operator arity like Kubernetes' `LabelSelectorAsSelector`.
    ///
    /// Errors name the field: `matchLabels` or `matchExpressions[i].key` / `.values`.
    pub fn validate(&self) -> Result<(), PluginError> {
        for (k, v) in &self.match_labels {
            check_key(k).map_err(|m| PluginError::invalid("matchLabels", m))?;
            check_value(v)
                .map_err(|m| PluginError::invalid("matchLabels", format!("label `{k}`: {m}")))?;
        }
        for (i, r) in self.match_expressions.iter().enumerate() {
            let field = |f: &str| format!("matchExpressions[{i}].{f}");
            check_key(&r.key).map_err(|m| PluginError::invalid(&field("key"), m))?;
            match r.operator {
                Operator::In | Operator::NotIn if r.values.is_empty() => {
                    return Err(PluginError::invalid(
                        &field("values"),
                        format!("operator {:?} needs at least one value", r.operator),
                    ))
                }
                Operator::Exists | Operator::DoesNotExist if !r.values.is_empty() => {
                    return Err(PluginError::invalid(
                        &field("values"),
                        format!("operator {:?} takes no values", r.operator),
                    ))
                }
                _ => {}
            }
            for v in &r.values {
                check_value(v).map_err(|m| PluginError::invalid(&field("values"), m))?;
            }
        }
        Ok(())
    }
}

/// `[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?`, at most 63 characters.
fn is_name(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

/// A DNS-1123 subdomain: lowercase alphanumerics, `-` and `.`, at most 253 characters.
fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253
        && s.split('.').all(|part| {
            let b = part.as_bytes();
            !b.is_empty()
                && b[0].is_ascii_alphanumeric()
                && b[b.len() - 1].is_ascii_alphanumeric()
                && b.iter()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        })
}

fn check_key(k: &str) -> Result<(), String> {
    let ok = match k.split_once('/') {
        Some((prefix, name)) => is_dns_subdomain(prefix) && is_name(name),
        None => is_name(k),
    };
    if ok {
        Ok(())
    } else {
        Err(format!(
            "`{k}` is not a valid label key ([prefix/]name, name ≤ 63 characters of [A-Za-z0-9._-])"
        ))
    }
}

fn check_value(v: &str) -> Result<(), String> {
    if v.is_empty() || is_name(v) {
        Ok(())
    } else {
        Err(format!(
            "`{v}` is not a valid label value (≤ 63 characters of [A-Za-z0-9._-], alphanumeric at both ends)"
        ))
    }
}

/// The filter.
#[derive(Debug)]
pub struct LabelSelectorFilter {
    selector: LabelSelector,
}

impl LabelSelectorFilter {
    /// A filter for a validated selector.
    pub fn new(selector: LabelSelector) -> Self {
        LabelSelectorFilter { selector }
    }
}

impl Filter for LabelSelectorFilter {
    fn filter(&self, _ctx: &RequestCtx<'_>, candidates: &mut Candidates<'_>) {
        candidates.retain(|e| self.selector.matches(&e.endpoint.labels));
    }
}

fn build(params: Option<&Value>, _: &mut BuildCtx<'_>) -> Result<Built, PluginError> {
    let p: LabelSelector = decode(params)?;
    p.validate()?;
    Ok(Built {
        params: effective(&p),
        filter: Some(Arc::new(LabelSelectorFilter::new(p))),
        ..Built::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::testutil::{ep_labels, with_ctx};
    use pdgate_api::PromptInput;

    fn run(selector: LabelSelector) -> Vec<String> {
        let eps = [
            ep_labels("a", &[("tier", "gold"), ("gpu", "h100")]),
            ep_labels("b", &[("tier", "silver"), ("gpu", "a100")]),
            ep_labels("c", &[("gpu", "h100")]),
            ep_labels("d", &[]),
        ];
        let mut c: Candidates<'_> = eps.iter().collect();
        with_ctx(&PromptInput::Tokens(vec![]), |ctx| {
            LabelSelectorFilter::new(selector).filter(ctx, &mut c)
        });
        c.iter().map(|e| e.endpoint.name.clone()).collect()
    }

    fn expr(key: &str, operator: Operator, values: &[&str]) -> Requirement {
        Requirement {
            key: key.into(),
            operator,
            values: values.iter().map(|v| v.to_string()).collect(),
        }
    }

    fn exprs(e: Vec<Requirement>) -> LabelSelector {
        LabelSelector {
            match_labels: BTreeMap::new(),
            match_expressions: e,
        }
    }

    #[test]
    fn kubernetes_selector_semantics() {
        assert_eq!(run(LabelSelector::default()), ["a", "b", "c", "d"]);
        let labels = LabelSelector {
            match_labels: [("gpu".to_string(), "h100".to_string())].into(),
            match_expressions: vec![],
        };
        assert_eq!(run(labels.clone()), ["a", "c"]);
        assert_eq!(
            run(exprs(vec![expr("tier", Operator::In, &["gold", "bronze"])])),
            ["a"]
        );
        assert_eq!(
            run(exprs(vec![expr("tier", Operator::NotIn, &["gold"])])),
            ["b", "c", "d"]
        );
        assert_eq!(
            run(exprs(vec![expr("tier", Operator::Exists, &[])])),
            ["a", "b"]
        );
        assert_eq!(
            run(exprs(vec![expr("tier", Operator::DoesNotExist, &[])])),
            ["c", "d"]
        );
        // matchLabels AND matchExpressions.
        let both = LabelSelector {
            match_expressions: vec![expr("tier", Operator::DoesNotExist, &[])],
            ..labels
        };
        assert_eq!(run(both), ["c"]);
    }

    #[test]
    fn validation_names_the_field() {
        let e = exprs(vec![
            expr("tier", Operator::Exists, &[]),
            expr("tier", Operator::In, &[]),
        ])
        .validate()
        .unwrap_err();
        assert_eq!(e.path.as_deref(), Some("matchExpressions[1].values"));
        assert_eq!(e.message, "operator In needs at least one value");
        let e = exprs(vec![expr("tier", Operator::DoesNotExist, &["x"])])
            .validate()
            .unwrap_err();
        assert_eq!(e.message, "operator DoesNotExist takes no values");
        let e = exprs(vec![expr("bad key", Operator::Exists, &[])])
            .validate()
            .unwrap_err();
        assert_eq!(e.path.as_deref(), Some("matchExpressions[0].key"));
        assert!(check_key("llm-d.ai/role").is_ok() && check_key("Bad.Prefix/x").is_err());
        assert!(check_value("").is_ok() && check_value("-x").is_err());
        assert!(check_value(&"v".repeat(64)).is_err());
    }
}
