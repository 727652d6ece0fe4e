//! The `featureGates` and `flowControl` sections of an EndpointPickerConfig, decoded
//! strictly (llm-d-router `apix/config/v1alpha1`, `flowcontrol/{controller,registry}/config.go`).
//!
//! ```yaml
//! featureGates: [flowControl]          # or "flowControl=false"
//! flowControl:
//!   maxBytes: 10Gi                     # global cap on queued bytes (0/absent: none)
//!   maxRequests: 1k                    # global cap on queued requests (0/absent: none)
//!   defaultRequestTTL: 60s             # queue wait while the pool has endpoints (0s: none)
//!   noEndpointRequestTTL: 60s          # … while it has none (absent: defaultRequestTTL)
//!   defaultPriorityBand: {maxBytes: 1G, maxRequests: 5000}
//!   defaultNegativePriorityBand: {maxRequests: 50}
//!   priorityBands:
//!   - {priority: 100, maxRequests: 500, fairnessPolicyRef: round-robin-fairness-policy,
//!      orderingPolicyRef: fcfs-ordering-policy, defaultRequestTTL: 5s}
//!   usageLimitPolicyPluginRef: static-usage-limit-policy
//!   bandSelectionPolicyPluginRef: strict-band-selection-policy
//!   saturationDetector: {pluginRef: utilization-detector}
//!   enableEviction: false              # true: dispatched sheddable requests may be evicted
//! ```
//!
//! A band's own `defaultRequestTTL` replaces the global one while the pool has endpoints;
//! `noEndpointRequestTTL` stays global (llm-d `apix/config/v1` `PriorityBandConfig`).
//!
//! Bands: each listed band, priority 0 always, and any other priority a request carries
//! (from `--inference-objective`) built from `defaultNegativePriorityBand` (priority < 0, when
//! set) or `defaultPriorityBand`. A band's `maxBytes` defaults to 1,000,000,000 bytes and
//! `maxRequests` to 5,000 (0 means the default), fairness to `global-strict-fairness-policy`,
//! ordering to `fcfs-ordering-policy`. `enableEviction: true` turns on in-flight eviction
//! ([`super::eviction`]).

use super::config_raw::RawBand;
pub use super::config_raw::{RawFlowControl, RawSections};
use super::detector::UtilizationDetector;
pub use super::plugins::Declared;
use super::policy::{Fairness, FlowPolicy, UsageLimit};
use super::quantity::Quantity;
use super::saturation::SaturationDetector;
pub use super::settings::{
    BandConfig, FlowControlConfig, FlowSettings, DEFAULT_BAND_MAX_BYTES, DEFAULT_BAND_MAX_REQUESTS,
    DEFAULT_REQUEST_TTL,
};
use std::sync::Arc;

/// The feature gate that turns flow control on (`featureGates: [flowControl]`).
pub const FEATURE_GATE: &str = "flowControl";

/// A resolution error: the field (dotted) and the message.
pub type FieldError = (String, String);

/// Reads `featureGates`: `Ok(gate on)`.
///
/// Errors: an unknown gate or a bad `=bool`, naming it.
pub fn gate(gates: &[String]) -> Result<bool, FieldError> {
    let mut on = false;
    for g in gates {
        let (name, value) = match g.split_once('=') {
            Some((n, v)) => (n.trim(), Some(v.trim().to_ascii_lowercase())),
            None => (g.trim(), None),
        };
        if name != FEATURE_GATE {
            return Err((
                "featureGates".into(),
                format!(
                    "feature gate `{name}` is unknown or unsupported (pdgate knows `{}`)",
                    FEATURE_GATE
                ),
            ));
        }
        on = match value.as_deref() {
            None | Some("true") | Some("t") | Some("1") => true,
            Some("false") | Some("f") | Some("0") => false,
            Some(v) => {
                return Err((
                    "featureGates".into(),
                    format!("feature gate `{g}`: `{v}` is not a boolean"),
                ))
            }
        };
    }
    Ok(on)
}

/// Resolves the sections against the declared plugins (`lookup(name)`).
///
/// Errors: the first problem, with the dotted field it is about: a reference to an undefined
/// plugin or to one of the wrong kind, a duplicate band.
pub fn resolve(
    raw: RawSections,
    lookup: &dyn Fn(&str) -> Option<Declared>,
) -> Result<FlowSettings, FieldError> {
    let gate = gate(&raw.feature_gates)?;
    let section_given = raw.flow_control.is_some();
    // A flow-control plugin named by its type works without a `plugins:` entry (defaults).
    let lookup = |name: &str| lookup(name).or_else(|| Declared::by_type(name));
    let mut warnings = Vec::new();
    let fc = raw.flow_control.unwrap_or_default();
    let fc_usage_ref = fc.usage_limit_policy_plugin_ref.clone();
    if fc.endpoint_gate_plugin_ref.is_some() {
        return Err((
            "flowControl.endpointGatePluginRef".into(),
            "the endpoint gate (alpha in llm-d) is not supported by pdgate; remove it".into(),
        ));
    }
    // The detector: flowControl.saturationDetector, else the deprecated top-level one.
    let mut detector_ref = fc
        .saturation_detector
        .as_ref()
        .and_then(|r| r.plugin_ref.clone());
    let mut detector: Option<Arc<dyn SaturationDetector>> = None;
    if detector_ref.is_none() {
        if let Some(v) = &raw.saturation_detector {
            match v.get("pluginRef") {
                Some(r) => detector_ref = r.as_str().map(str::to_string),
                None => {
                    let params = crate::plugin_params::decode(Some(v)).map_err(|e| {
                        (
                            format!("saturationDetector.{}", e.path.unwrap_or_default()),
                            e.message,
                        )
                    })?;
                    detector = Some(Arc::new(UtilizationDetector::new(params)));
                }
            }
        }
    }
    let detector_ref = detector_ref.filter(|r| !r.is_empty());
    let written_ref = match (&detector, &detector_ref) {
        (Some(_), _) => None, // GAIE v1.3 thresholds: the top-level section stays as written
        (None, Some(r)) => Some(r.clone()),
        (None, None) => Some(super::detector::UTILIZATION.name.to_string()),
    };
    let detector = match (detector, detector_ref) {
        (Some(d), _) => d,
        (None, Some(name)) => match lookup(&name) {
            Some(Declared::Detector(d)) => d,
            Some(_) => {
                return Err((
                    "flowControl.saturationDetector.pluginRef".into(),
                    format!("plugin `{name}` is not a saturation detector"),
                ))
            }
            None => {
                return Err((
                    "flowControl.saturationDetector.pluginRef".into(),
                    format!("saturation detector references undefined plugin `{name}`"),
                ))
            }
        },
        (None, None) => match lookup(super::detector::UTILIZATION.name) {
            Some(Declared::Detector(d)) => d,
            _ => Arc::new(UtilizationDetector::default()),
        },
    };
    let policy = |field: &str, name: &Option<String>| -> Result<Option<FlowPolicy>, FieldError> {
        let Some(name) = name else { return Ok(None) };
        match lookup(name) {
            Some(Declared::Policy(p)) => Ok(Some(p)),
            Some(_) => Err((
                field.into(),
                format!("plugin `{name}` is not a flow-control policy"),
            )),
            None if super::plugins::UNSUPPORTED_TYPES.contains(&name.as_str()) => Err((
                field.into(),
                format!(
                    "unsupported plugin type `{name}` ({})",
                    crate::registry::refusal(name)
                        .unwrap_or("an llm-d flow-control policy pdgate does not implement")
                ),
            )),
            None if super::plugins::TYPES.iter().any(|t| t.name == name) => Err((
                field.into(),
                format!(
                    "plugin type `{name}` has required parameters: declare it under `plugins:` \
                     with them and refer to it by its name"
                ),
            )),
            None => Err((field.into(), format!("plugin `{name}` not found"))),
        }
    };
    let usage_limit = match policy(
        "flowControl.usageLimitPolicyPluginRef",
        &fc.usage_limit_policy_plugin_ref,
    )? {
        None => UsageLimit::default(),
        Some(FlowPolicy::UsageLimit(limit)) => limit,
        Some(_) => {
            return Err((
                "flowControl.usageLimitPolicyPluginRef".into(),
                "the plugin is not a usage-limit policy (e.g. `static-usage-limit-policy`)".into(),
            ))
        }
    };
    let band_ref = "flowControl.bandSelectionPolicyPluginRef";
    match policy(band_ref, &fc.band_selection_policy_plugin_ref)? {
        None | Some(FlowPolicy::BandSelection) => {}
        Some(_) => {
            return Err((
                band_ref.into(),
                "the plugin is not a band-selection policy (e.g. `strict-band-selection-policy`)"
                    .into(),
            ))
        }
    }
    // The name each program-aware setting was referred to by (the effective config's refs).
    let program_aware = std::cell::RefCell::new(Vec::new());
    let band = |field: &str, raw: &RawBand, base: BandConfig| -> Result<BandConfig, FieldError> {
        let fairness = match policy(
            &format!("{field}.fairnessPolicyRef"),
            &raw.fairness_policy_ref,
        )? {
            None => base.fairness,
            Some(FlowPolicy::Fairness(f)) => {
                if let (Fairness::ProgramAware(las), Some(name)) = (f, &raw.fairness_policy_ref) {
                    let mut seen = program_aware.borrow_mut();
                    if !seen.iter().any(|(l, _)| *l == las) {
                        seen.push((las, name.clone()));
                    }
                }
                f
            }
            Some(_) => {
                return Err((
                    format!("{field}.fairnessPolicyRef"),
                    "the plugin is not a fairness policy".into(),
                ))
            }
        };
        let ordering = match policy(
            &format!("{field}.orderingPolicyRef"),
            &raw.ordering_policy_ref,
        )? {
            None => base.ordering,
            Some(FlowPolicy::Ordering(o)) => o,
            Some(_) => {
                return Err((
                    format!("{field}.orderingPolicyRef"),
                    "the plugin is not an ordering policy".into(),
                ))
            }
        };
        let or = |q: Option<Quantity>, d: u64| q.map(|q| q.0).filter(|v| *v > 0).unwrap_or(d);
        Ok(BandConfig {
            priority: raw.priority.unwrap_or(base.priority),
            max_bytes: or(raw.max_bytes, base.max_bytes),
            max_requests: or(raw.max_requests, base.max_requests),
            fairness,
            ordering,
            ttl: raw.default_request_ttl.map(|d| d.0).or(base.ttl),
        })
    };
    let base = FlowControlConfig::default().default_band;
    let default_band = match &fc.default_priority_band {
        Some(b) => BandConfig {
            priority: 0,
            ..band("flowControl.defaultPriorityBand", b, base)?
        },
        None => base,
    };
    let negative_band = match &fc.default_negative_priority_band {
        Some(b) => band("flowControl.defaultNegativePriorityBand", b, default_band)?,
        None => default_band,
    };
    let mut bands: Vec<BandConfig> = Vec::new();
    for (i, b) in fc.priority_bands.iter().enumerate() {
        let field = format!("flowControl.priorityBands[{i}]");
        let Some(p) = b.priority else {
            return Err((format!("{field}.priority"), "is required".into()));
        };
        let template = if p < 0 { negative_band } else { default_band };
        let built = band(
            &field,
            b,
            BandConfig {
                priority: p,
                ..template
            },
        )?;
        if bands.iter().any(|x| x.priority == p) {
            return Err((
                format!("{field}.priority"),
                format!("duplicate priority level {p}"),
            ));
        }
        bands.push(built);
    }
    if !bands.iter().any(|b| b.priority == 0) {
        bands.push(default_band);
    }
    bands.sort_by_key(|b| std::cmp::Reverse(b.priority));
    let default_ttl = fc.default_request_ttl.map_or(DEFAULT_REQUEST_TTL, |d| d.0);
    let control = FlowControlConfig {
        max_bytes: fc.max_bytes.map_or(0, |q| q.0),
        max_requests: fc.max_requests.map_or(0, |q| q.0),
        default_ttl,
        no_endpoint_ttl: fc.no_endpoint_request_ttl.map_or(default_ttl, |d| d.0),
        bands,
        default_band,
        negative_band,
        usage_limit,
        enable_eviction: fc.enable_eviction.unwrap_or(false),
    };
    let section_set = control != FlowControlConfig::default();
    if !gate && section_set {
        warnings.push(
            "the flowControl config section is set but the flowControl feature gate is \
             disabled; its settings (other than saturationDetector) are ignored"
                .into(),
        );
    }
    let effective = (gate || section_given).then(|| {
        super::effective::effective_section(
            &control,
            written_ref.as_deref(),
            fc_usage_ref
                .as_deref()
                .unwrap_or(super::plugins::STATIC_USAGE_LIMIT.name),
            &program_aware.borrow(),
        )
    });
    Ok(FlowSettings {
        gate,
        detector,
        control,
        warnings,
        effective,
    })
}

#[cfg(test)]
#[path = "config_tests.rs"]
mod tests;
