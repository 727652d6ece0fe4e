//! Flow-control policy plugins (declared in `plugins:` and named by a band's
//! `fairnessPolicyRef` / `orderingPolicyRef` or by `usageLimitPolicyPluginRef`). Source:
//! llm-d-router `framework/plugins/flowcontrol/{fairness,ordering,usagelimits}`.
//!
//! - `global-strict-fairness-policy` (default): the band is one queue — the best head of all
//!   its flows by the band's ordering goes first.
//! - `round-robin-fairness-policy`: flows take turns (sorted by fairness id, starting after
//!   the last one served).
//! - `program-aware-fairness`: the flow (program) with the least attained service lately
//!   goes first, its head's wait as a minor term ([`super::program_aware`]).
//! - `fcfs-ordering-policy` (default): earliest enqueue first.
//! - `edf-ordering-policy`: earliest deadline (enqueue + TTL) first; no TTL → last.
//! - `slo-deadline-ordering-policy`: earliest `received + x-llm-d-slo-ttft-ms` (alias
//!   `x-slo-ttft-ms`) first; a missing or bad header → last.
//! - `static-usage-limit-policy` {threshold 1.0}: dispatch stops while saturation ≥ threshold.
//! - `soft-reflective-ceiling-policy`: lower bands held back first as saturation rises, gated
//!   bands alternating open/closed ([`super::soft_reflective_ceiling`]).
//! - `priority-holdback-policy` {minCeiling, maxCeiling 1.0, shape, domain}: fixed ceilings
//!   spread from the top band to the bottom one ([`super::priority_holdback`]).
//! - `strict-band-selection-policy` (default of `bandSelectionPolicyPluginRef`): bands get
//!   their turn from the highest priority down — the only band order pdgate has.
//!
//! This module holds the registry entry of every policy (the saturation detectors' are in
//! [`super::detector`]); what they build, [`FlowPolicy`], is defined in [`super::policy`]
//! (below the plugins) and re-exported here.

use super::priority_holdback::HoldbackParams;
use super::program_aware::ProgramAwareParams;
use crate::flow::policy::UsageLimit;
pub use crate::flow::policy::{Fairness, FlowPolicy, Ordering};
use crate::plugin_build::{
    decode, effective, BuildCtx, Built, NoParams, PluginError, PluginType, Stage,
};
use serde::{Deserialize, Serialize};
use serde_yaml_ng::Value;

macro_rules! policy {
    ($konst:ident, $name:literal, $fn:ident, $policy:expr) => {
        #[doc = concat!("Registry entry of `", $name, "`.")]
        pub const $konst: PluginType = PluginType {
            name: $name,
            stage: Stage::Consumer,
            build: $fn,
        };
        fn $fn(params: Option<&Value>, _: &mut BuildCtx<'_>) -> Result<Built, PluginError> {
            decode::<NoParams>(params)?;
            Ok(Built {
                flow_policy: Some($policy),
                ..Built::default()
            })
        }
    };
}

policy!(
    GLOBAL_STRICT,
    "global-strict-fairness-policy",
    build_global_strict,
    FlowPolicy::Fairness(Fairness::GlobalStrict)
);
policy!(
    ROUND_ROBIN,
    "round-robin-fairness-policy",
    build_round_robin,
    FlowPolicy::Fairness(Fairness::RoundRobin)
);
policy!(
    FCFS,
    "fcfs-ordering-policy",
    build_fcfs,
    FlowPolicy::Ordering(Ordering::Fcfs)
);
policy!(
    EDF,
    "edf-ordering-policy",
    build_edf,
    FlowPolicy::Ordering(Ordering::Edf)
);
policy!(
    SLO_DEADLINE,
    "slo-deadline-ordering-policy",
    build_slo,
    FlowPolicy::Ordering(Ordering::SloDeadline)
);
policy!(
    SOFT_REFLECTIVE_CEILING,
    "soft-reflective-ceiling-policy",
    build_soft_reflective,
    FlowPolicy::UsageLimit(UsageLimit::SoftReflectiveCeiling)
);
policy!(
    STRICT_BAND_SELECTION,
    "strict-band-selection-policy",
    build_strict_bands,
    FlowPolicy::BandSelection
);

/// `static-usage-limit-policy` parameters.
#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct UsageLimitParams {
    #[serde(default = "one")]
    threshold: f64,
}

fn one() -> f64 {
    1.0
}

/// Registry entry of `static-usage-limit-policy`.
pub const STATIC_USAGE_LIMIT: PluginType = PluginType {
    name: "static-usage-limit-policy",
    stage: Stage::Consumer,
    build: build_usage_limit,
};

fn build_usage_limit(params: Option<&Value>, _: &mut BuildCtx<'_>) -> Result<Built, PluginError> {
    let p: UsageLimitParams = decode(params)?;
    if !(p.threshold > 0.0 && p.threshold.is_finite()) {
        return Err(PluginError::invalid("threshold", "must be > 0"));
    }
    Ok(Built {
        flow_policy: Some(FlowPolicy::UsageLimit(UsageLimit::Static(p.threshold))),
        params: effective(&p),
        ..Built::default()
    })
}

/// Registry entry of `program-aware-fairness` ([`super::program_aware`]).
pub const PROGRAM_AWARE: PluginType = PluginType {
    name: "program-aware-fairness",
    stage: Stage::Consumer,
    build: build_program_aware,
};

fn build_program_aware(params: Option<&Value>, _: &mut BuildCtx<'_>) -> Result<Built, PluginError> {
    let p: ProgramAwareParams = decode(params)?;
    Ok(Built {
        flow_policy: Some(FlowPolicy::Fairness(Fairness::ProgramAware(p.las()?))),
        params: effective(&p),
        ..Built::default()
    })
}

/// Registry entry of `priority-holdback-policy` ([`super::priority_holdback`]).
pub const PRIORITY_HOLDBACK: PluginType = PluginType {
    name: "priority-holdback-policy",
    stage: Stage::Consumer,
    build: build_priority_holdback,
};

fn build_priority_holdback(
    params: Option<&Value>,
    _: &mut BuildCtx<'_>,
) -> Result<Built, PluginError> {
    let p: HoldbackParams = decode(params)?;
    let h = p.holdback()?;
    Ok(Built {
        flow_policy: Some(FlowPolicy::UsageLimit(UsageLimit::PriorityHoldback(h))),
        params: effective(&p),
        ..Built::default()
    })
}

/// llm-d flow-control policy types pdgate does not implement: named as such when a config
/// refers to one by its type (with a `plugins:` entry the registry refuses it the same way).
pub const UNSUPPORTED_TYPES: &[&str] = &[];

/// What the flow-control resolver knows about a plugin name.
pub enum Declared {
    /// A flow-control policy.
    Policy(FlowPolicy),
    /// A saturation detector.
    Detector(std::sync::Arc<dyn super::saturation::SaturationDetector>),
    /// Some other plugin.
    Other,
}

impl Declared {
    /// What `built` is, to the flow-control resolver.
    pub fn of(built: &Built) -> Declared {
        match (&built.saturation, built.flow_policy) {
            (Some(d), _) => Declared::Detector(d.clone()),
            (None, Some(p)) => Declared::Policy(p),
            (None, None) => Declared::Other,
        }
    }

    /// A flow-control plugin type built with its defaults, when `name` is one (a policy or
    /// detector named by its type needs no `plugins:` entry).
    pub fn by_type(name: &str) -> Option<Declared> {
        let t = TYPES.iter().find(|t| t.name == name)?;
        let mut ctx = BuildCtx {
            built: &[],
            profiles: &[],
            next_slot: 0,
        };
        Some(Declared::of(&(t.build)(None, &mut ctx).ok()?))
    }
}

/// Every flow-control plugin type (policies and detectors), for the registry.
pub static TYPES: &[PluginType] = &[
    GLOBAL_STRICT,
    ROUND_ROBIN,
    PROGRAM_AWARE,
    FCFS,
    EDF,
    SLO_DEADLINE,
    STATIC_USAGE_LIMIT,
    SOFT_REFLECTIVE_CEILING,
    PRIORITY_HOLDBACK,
    STRICT_BAND_SELECTION,
    super::detector::UTILIZATION,
    super::detector::CONCURRENCY,
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn soft_reflective_ceiling_builds_and_refuses_any_parameter() {
        let mut ctx = BuildCtx {
            built: &[],
            profiles: &[],
            next_slot: 0,
        };
        for ok in [None, Some(serde_yaml_ng::from_str::<Value>("{}").unwrap())] {
            let b = build_soft_reflective(ok.as_ref(), &mut ctx).unwrap();
            assert_eq!(
                b.flow_policy,
                Some(FlowPolicy::UsageLimit(UsageLimit::SoftReflectiveCeiling))
            );
        }
        let bad: Value = serde_yaml_ng::from_str("threshold: 0.5").unwrap();
        let err = build_soft_reflective(Some(&bad), &mut ctx)
            .err()
            .expect("refused");
        assert_eq!(err.key.as_deref(), Some("threshold"), "{err:?}");
        assert!(err.message.contains("unknown field `threshold`"), "{err:?}");
        assert!(matches!(
            Declared::by_type(SOFT_REFLECTIVE_CEILING.name),
            Some(Declared::Policy(FlowPolicy::UsageLimit(
                UsageLimit::SoftReflectiveCeiling
            )))
        ));
    }
}
