//! The `flowControl` section as the effective config writes it: every default filled in,
//! policies by their type names (they have no parameters; `program-aware-fairness`, which
//! has, by the name the config used), the detector and usage limit by the names the config
//! used. Loading it again gives the same [`FlowControlConfig`].

use super::policy::{Fairness, Ordering};
use super::settings::{BandConfig, FlowControlConfig};

/// The resolved section as YAML, defaults written out; policies by their type names (they
/// have no parameters), a program-aware fairness by the name `program_aware` gives its
/// settings (the type name when absent), the detector and usage limit by the names the
/// config used.
pub(super) fn effective_section(
    c: &FlowControlConfig,
    detector: Option<&str>,
    usage: &str,
    program_aware: &[(super::program_aware::Las, String)],
) -> serde_yaml_ng::Value {
    use super::duration::format;
    use serde_yaml_ng::{Mapping, Value};
    let fairness = |f: Fairness| match f {
        Fairness::GlobalStrict => super::plugins::GLOBAL_STRICT.name,
        Fairness::RoundRobin => super::plugins::ROUND_ROBIN.name,
        Fairness::ProgramAware(las) => program_aware
            .iter()
            .find(|(l, _)| *l == las)
            .map_or(super::plugins::PROGRAM_AWARE.name, |(_, n)| n.as_str()),
    };
    let ordering = |o: Ordering| match o {
        Ordering::Fcfs => super::plugins::FCFS.name,
        Ordering::Edf => super::plugins::EDF.name,
        Ordering::SloDeadline => super::plugins::SLO_DEADLINE.name,
    };
    let band = |b: &BandConfig, with_priority: bool| {
        let mut m = Mapping::new();
        if with_priority {
            m.insert("priority".into(), Value::from(b.priority));
        }
        m.insert("maxBytes".into(), Value::from(b.max_bytes));
        m.insert("maxRequests".into(), Value::from(b.max_requests));
        m.insert("fairnessPolicyRef".into(), fairness(b.fairness).into());
        m.insert("orderingPolicyRef".into(), ordering(b.ordering).into());
        if let Some(t) = b.ttl {
            m.insert("defaultRequestTTL".into(), format(t).into());
        }
        Value::Mapping(m)
    };
    let mut m = Mapping::new();
    if c.max_bytes > 0 {
        m.insert("maxBytes".into(), Value::from(c.max_bytes));
    }
    if c.max_requests > 0 {
        m.insert("maxRequests".into(), Value::from(c.max_requests));
    }
    m.insert("defaultRequestTTL".into(), format(c.default_ttl).into());
    m.insert(
        "noEndpointRequestTTL".into(),
        format(c.no_endpoint_ttl).into(),
    );
    m.insert("defaultPriorityBand".into(), band(&c.default_band, false));
    m.insert(
        "defaultNegativePriorityBand".into(),
        band(&c.negative_band, false),
    );
    m.insert(
        "priorityBands".into(),
        Value::Sequence(c.bands.iter().map(|b| band(b, true)).collect()),
    );
    m.insert("usageLimitPolicyPluginRef".into(), usage.into());
    m.insert(
        "bandSelectionPolicyPluginRef".into(),
        super::plugins::STRICT_BAND_SELECTION.name.into(),
    );
    m.insert("enableEviction".into(), c.enable_eviction.into());
    if let Some(d) = detector {
        let mut r = Mapping::new();
        r.insert("pluginRef".into(), d.into());
        m.insert("saturationDetector".into(), Value::Mapping(r));
    }
    Value::Mapping(m)
}
