//! The `featureGates` and `flowControl` sections as written, decoded strictly; resolved into
//! settings by [`super::config::resolve`].

use super::duration::GoDuration;
use super::quantity::Quantity;
use serde::Deserialize;

/// The two sections as written (the rest of the document is read elsewhere).
#[derive(Debug, Default, Deserialize)]
pub struct RawSections {
    /// `featureGates`.
    #[serde(rename = "featureGates", default)]
    pub feature_gates: Vec<String>,
    /// `flowControl`.
    #[serde(rename = "flowControl")]
    pub flow_control: Option<RawFlowControl>,
    /// The deprecated top-level `saturationDetector` (`{pluginRef}`, or GAIE v1.3's
    /// utilization thresholds).
    #[serde(rename = "saturationDetector")]
    pub saturation_detector: Option<serde_yaml_ng::Value>,
}

/// `flowControl` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawFlowControl {
    pub(super) max_bytes: Option<Quantity>,
    pub(super) max_requests: Option<Quantity>,
    #[serde(rename = "defaultRequestTTL")]
    pub(super) default_request_ttl: Option<GoDuration>,
    #[serde(rename = "noEndpointRequestTTL")]
    pub(super) no_endpoint_request_ttl: Option<GoDuration>,
    pub(super) default_priority_band: Option<RawBand>,
    pub(super) default_negative_priority_band: Option<RawBand>,
    #[serde(default)]
    pub(super) priority_bands: Vec<RawBand>,
    pub(super) usage_limit_policy_plugin_ref: Option<String>,
    pub(super) band_selection_policy_plugin_ref: Option<String>,
    pub(super) saturation_detector: Option<RawRef>,
    pub(super) enable_eviction: Option<bool>,
    /// llm-d v1's alpha endpoint gate: refused, named.
    pub(super) endpoint_gate_plugin_ref: Option<String>,
}

/// A band as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawBand {
    pub(super) priority: Option<i32>,
    pub(super) max_bytes: Option<Quantity>,
    pub(super) max_requests: Option<Quantity>,
    #[serde(rename = "defaultRequestTTL")]
    pub(super) default_request_ttl: Option<GoDuration>,
    pub(super) fairness_policy_ref: Option<String>,
    pub(super) ordering_policy_ref: Option<String>,
}

/// `{pluginRef}`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawRef {
    pub(super) plugin_ref: Option<String>,
}
