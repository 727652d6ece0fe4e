//! `by-label` — deprecated alias of `label-selector-filter`, with llm-d's historic parameters.
//!
//! - **Type:** `by-label` (deprecated; use `label-selector-filter`)
//! - **Extension points:** Filter
//! - **Parameters:** the selector of `label-selector-filter` (`matchLabels` `{}`,
//!   `matchExpressions` `[]`) plus llm-d's historic `by-label` parameters: `label` (label
//!   key, unset by default), `validValues` (default `[]`), `allowsNoLabel` (default false).
//!   `validValues`/`allowsNoLabel` need `label`.
//! - **Inputs:** the endpoint's labels.
//! - **Outputs:** candidates matching the selector and, when `label` is set, whose `label`
//!   value is one of `validValues`, or which lack `label` while `allowsNoLabel` is true
//!   (llm-d ByLabel: a missing label reads as the empty string, so `validValues: [""]` also
//!   keeps endpoints without it).
//! - **Limitations:** without parameters it keeps every candidate (an empty selector), where
//!   llm-d's historic filter with no `label` kept none.

use super::label_selector_filter::{LabelSelector, Requirement};
use crate::plugin::{Candidates, Filter};
use crate::plugin_build::{decode, effective, BuildCtx, Built, PluginError, PluginType, Stage};
use crate::request::RequestCtx;
use serde::{Deserialize, Serialize};
use serde_yaml_ng::Value;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Registry entry.
pub const TYPE: PluginType = PluginType {
    name: "by-label",
    stage: Stage::Consumer,
    build,
};

/// Parameters: a label selector plus the historic single-label rule.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct Params {
    /// Labels that must be present with exactly these values.
    pub match_labels: BTreeMap<String, String>,
    /// Requirements that must all hold.
    pub match_expressions: Vec<Requirement>,
    /// Historic: the label key checked against `validValues`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// Historic: accepted values of `label`.
    #[serde(skip_serializing_if = "skip_legacy")]
    pub valid_values: Vec<String>,
    /// Historic: keep endpoints without `label`.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub allows_no_label: bool,
}

fn skip_legacy(v: &[String]) -> bool {
    v.is_empty()
}

/// The historic single-label rule.
#[derive(Debug, Clone, PartialEq)]
pub struct LegacyRule {
    /// Label key.
    pub label: String,
    /// Accepted values.
    pub valid_values: Vec<String>,
    /// Keep endpoints without the label.
    pub allows_no_label: bool,
}

/// The filter.
#[derive(Debug)]
pub struct ByLabelFilter {
    selector: LabelSelector,
    legacy: Option<LegacyRule>,
}

impl ByLabelFilter {
    /// A filter from a validated selector and an optional historic rule.
    pub fn new(selector: LabelSelector, legacy: Option<LegacyRule>) -> Self {
        ByLabelFilter { selector, legacy }
    }
}

impl Filter for ByLabelFilter {
    fn filter(&self, _ctx: &RequestCtx<'_>, candidates: &mut Candidates<'_>) {
        candidates.retain(|e| {
            let labels = &e.endpoint.labels;
            self.selector.matches(labels)
                && self.legacy.as_ref().is_none_or(|r| {
                    let value = labels.get(&r.label);
                    let v = value.map_or("", String::as_str);
                    r.valid_values.iter().any(|x| x == v) || (value.is_none() && r.allows_no_label)
                })
        });
    }
}

fn build(params: Option<&Value>, _: &mut BuildCtx<'_>) -> Result<Built, PluginError> {
    let p: Params = decode(params)?;
    let selector = LabelSelector {
        match_labels: p.match_labels.clone(),
        match_expressions: p.match_expressions.clone(),
    };
    selector.validate()?;
    let legacy = match &p.label {
        Some(label) => {
            // Same key rules as a selector key.
            let probe = LabelSelector {
                match_labels: [(label.clone(), String::new())].into(),
                match_expressions: vec![],
            };
            probe
                .validate()
                .map_err(|e| PluginError::invalid("label", e.message))?;
            Some(LegacyRule {
                label: label.clone(),
                valid_values: p.valid_values.clone(),
                allows_no_label: p.allows_no_label,
            })
        }
        None if !p.valid_values.is_empty() || p.allows_no_label => {
            let set = if p.valid_values.is_empty() {
                "allowsNoLabel"
            } else {
                "validValues"
            };
            return Err(PluginError {
                key: Some(set.into()),
                ..PluginError::invalid(
                    "label",
                    "required when `validValues` or `allowsNoLabel` is set",
                )
            });
        }
        None => None,
    };
    Ok(Built {
        params: effective(&p),
        filter: Some(Arc::new(ByLabelFilter::new(selector, legacy))),
        ..Built::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::testutil::{ep_labels, with_ctx};
    use pdgate_api::PromptInput;

    fn run(f: ByLabelFilter) -> Vec<String> {
        let eps = [
            ep_labels("p", &[("role", "prefill"), ("zone", "a")]),
            ep_labels("d", &[("role", "decode"), ("zone", "b")]),
            ep_labels("n", &[("zone", "a")]),
        ];
        let mut c: Candidates<'_> = eps.iter().collect();
        with_ctx(&PromptInput::Tokens(vec![]), |ctx| f.filter(ctx, &mut c));
        c.iter().map(|e| e.endpoint.name.clone()).collect()
    }

    fn rule(values: &[&str], allows_no_label: bool) -> Option<LegacyRule> {
        Some(LegacyRule {
            label: "role".into(),
            valid_values: values.iter().map(|v| v.to_string()).collect(),
            allows_no_label,
        })
    }

    #[test]
    fn historic_label_rule_and_selector() {
        let any = LabelSelector::default;
        assert_eq!(run(ByLabelFilter::new(any(), None)), ["p", "d", "n"]);
        assert_eq!(
            run(ByLabelFilter::new(any(), rule(&["decode"], false))),
            ["d"]
        );
        assert_eq!(
            run(ByLabelFilter::new(any(), rule(&["decode"], true))),
            ["d", "n"]
        );
        assert_eq!(run(ByLabelFilter::new(any(), rule(&[""], false))), ["n"]);
        let zone_a = LabelSelector {
            match_labels: [("zone".to_string(), "a".to_string())].into(),
            match_expressions: vec![],
        };
        assert_eq!(
            run(ByLabelFilter::new(
                zone_a,
                rule(&["prefill", "decode"], true)
            )),
            ["p", "n"]
        );
    }
}
