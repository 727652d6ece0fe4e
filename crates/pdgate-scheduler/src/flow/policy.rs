//! What a flow-control policy plugin resolves to ([`FlowPolicy`]): a band's fairness and
//! ordering policies and the pool's usage-limit policy; and which priorities are sheddable
//! ([`sheddable`]). The plugins that build the policies are in [`super::plugins`]; the flow
//! controller ([`super::queues`], [`super::usage_limit`]) reads them. Below the plugins: it
//! imports only the policies' own arithmetic ([`super::priority_holdback`],
//! [`super::program_aware`], [`super::soft_reflective_ceiling`]).

use super::priority_holdback::Holdback;
use super::program_aware::Las;

/// True for a sheddable priority (llm-d: `priority < 0`).
pub fn sheddable(priority: i32) -> bool {
    priority < 0
}

/// How a band picks the flow to serve next.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum Fairness {
    /// `global-strict-fairness-policy`.
    #[default]
    GlobalStrict,
    /// `round-robin-fairness-policy`.
    RoundRobin,
    /// `program-aware-fairness` with its settings.
    ProgramAware(Las),
}

/// How a flow orders its items.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Ordering {
    /// `fcfs-ordering-policy`.
    #[default]
    Fcfs,
    /// `edf-ordering-policy`.
    Edf,
    /// `slo-deadline-ordering-policy`.
    SloDeadline,
}

/// What a flow-control policy plugin is.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum FlowPolicy {
    /// A fairness policy.
    Fairness(Fairness),
    /// An ordering policy.
    Ordering(Ordering),
    /// A usage-limit policy: the per-band dispatch ceilings ([`super::usage_limit`]).
    UsageLimit(UsageLimit),
    /// A band-selection policy (`strict-band-selection-policy`: highest priority first).
    BandSelection,
}

/// A resolved usage-limit policy (`flowControl.usageLimitPolicyPluginRef`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum UsageLimit {
    /// `static-usage-limit-policy`: every band's ceiling is this threshold (saturation units,
    /// default 1.0).
    Static(f64),
    /// `soft-reflective-ceiling-policy` ([`super::soft_reflective_ceiling`]): graduated,
    /// rank-based ceilings that alternate open/closed once reached; the top band never gated
    /// below saturation 1.0.
    SoftReflectiveCeiling,
    /// `priority-holdback-policy` ([`super::priority_holdback`]): fixed ceilings spread
    /// linearly from `maxCeiling` (top band) to `minCeiling` (bottom band).
    PriorityHoldback(Holdback),
}

impl Default for UsageLimit {
    /// `static-usage-limit-policy` at 1.0: no gating below full saturation.
    fn default() -> Self {
        UsageLimit::Static(1.0)
    }
}

impl UsageLimit {
    /// Writes one ceiling per band into `ceilings` (saturation units; `priorities` highest
    /// first, `ceilings` the same length and pre-filled with 1.0). `tick` is the policy's
    /// dispatch-spreading counter (only `soft-reflective-ceiling-policy` reads and advances
    /// it).
    pub fn compute(
        &self,
        saturation: f64,
        priorities: &[i32],
        ceilings: &mut [f64],
        tick: &mut u64,
    ) {
        match *self {
            UsageLimit::Static(t) => ceilings.iter_mut().for_each(|c| *c = t),
            UsageLimit::SoftReflectiveCeiling => {
                super::soft_reflective_ceiling::compute(saturation, ceilings, tick)
            }
            UsageLimit::PriorityHoldback(h) => h.compute(priorities, ceilings),
        }
    }
}
