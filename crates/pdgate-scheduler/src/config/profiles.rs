//! Scheduling profiles: the default profile, reference resolution, the injected picker.

use super::effective::{EffectiveProfile, EffectiveRef};
use super::lines;
use super::loader::Loader;
use super::raw::{RawPluginRef, RawProfile};
use crate::profile::Profile;

/// The profiles of a config, resolved. `names` holds every distinct profile name (also of
/// profiles that failed), for the handler; `profiles` only the complete ones.
#[derive(Default)]
pub(super) struct Resolved {
    /// Distinct profile names, in config order.
    pub names: Vec<String>,
    /// Built profiles.
    pub profiles: Vec<Profile>,
    /// Their effective form.
    pub effective: Vec<EffectiveProfile>,
}

impl Loader<'_> {
    /// llm-d's default when no profile is configured: one `default` profile referencing every
    /// filter, scorer and picker.
    pub fn default_profile(&self) -> RawProfile {
        let refs = self
            .built
            .iter()
            .filter(|(_, _, b)| b.filter.is_some() || b.scorer.is_some() || b.picker.is_some())
            .map(|(n, _, _)| RawPluginRef {
                plugin_ref: n.clone(),
                weight: None,
            });
        RawProfile {
            name: "default".into(),
            plugins: refs.collect(),
            broken: false,
        }
    }

    /// Resolves every profile, recording each problem.
    pub fn profiles(&mut self, raw: &[RawProfile]) -> Resolved {
        let items = lines::seq_items(self.yaml, "schedulingProfiles");
        let mut out = Resolved::default();
        for (i, rp) in raw.iter().enumerate() {
            let item = items.get(i);
            if rp.broken {
                // Reported already; keep its name for the handler.
                if !rp.name.is_empty() && !out.names.contains(&rp.name) {
                    out.names.push(rp.name.clone());
                }
                continue;
            }
            if rp.name.trim().is_empty() {
                let msg = "a scheduling profile has an empty name".to_string();
                self.report(item.map(|r| r.start + 1), None, msg);
                continue;
            }
            if out.names.contains(&rp.name) {
                let msg = format!("duplicate scheduling profile `{}`", rp.name);
                self.report(item.map(|r| r.start + 1), None, msg);
                continue;
            }
            out.names.push(rp.name.clone());
            if let Some((profile, eff)) = self.profile(rp, item) {
                out.profiles.push(profile);
                out.effective.push(eff);
            }
        }
        out
    }

    /// The `max-score-picker` instance, declared and built if there is none yet.
    fn ensure_max_score_picker(&mut self) -> Option<String> {
        let t = crate::plugins::max_score_picker::TYPE.name;
        if let Some((n, _, _)) = self.built.iter().find(|(_, ty, _)| ty == t) {
            return Some(n.clone());
        }
        if !self.declare(t.into(), t.into(), None, None) {
            return None;
        }
        self.build(self.decls.len() - 1, &[]).then(|| t.into())
    }

    /// One profile; `None` when it cannot be built (its problems are recorded, or it refers
    /// to a plugin that failed, which was reported already).
    fn profile(
        &mut self,
        rp: &RawProfile,
        item: Option<&std::ops::Range<usize>>,
    ) -> Option<(Profile, EffectiveProfile)> {
        let (mut filters, mut scorers, mut picker) = (Vec::new(), Vec::new(), None);
        let mut refs = Vec::new();
        let mut complete = true;
        for (i, r) in rp.plugins.iter().enumerate() {
            let nth = rp.plugins[..i]
                .iter()
                .filter(|p| p.plugin_ref == r.plugin_ref)
                .count();
            let line = item.and_then(|it| {
                lines::find_key_value_nth(self.yaml, it, "pluginRef", &r.plugin_ref, nth)
            });
            let ctx = |m: String| format!("scheduling profile `{}`: {m}", rp.name);
            if refs
                .iter()
                .any(|e: &EffectiveRef| e.plugin_ref == r.plugin_ref)
            {
                let msg = format!("pluginRef `{}` is listed twice", r.plugin_ref);
                self.report(line, None, ctx(msg));
                complete = false;
                continue;
            }
            if self.failed.contains(&r.plugin_ref) {
                complete = false;
                continue;
            }
            let Some((name, ty, b)) = self.find_built(&r.plugin_ref) else {
                let msg = match self.decls.iter().find(|d| d.name == r.plugin_ref) {
                    Some(d) => format!(
                        "plugin `{}` (type `{}`) is not a filter, scorer or picker",
                        d.name, d.plugin_type
                    ),
                    None => format!("pluginRef `{}` names no plugin", r.plugin_ref),
                };
                self.report(line, None, ctx(msg));
                complete = false;
                continue;
            };
            let msg = if b.filter.is_none() && b.scorer.is_none() && b.picker.is_none() {
                Some(format!(
                    "plugin `{name}` (type `{ty}`) is not a filter, scorer or picker"
                ))
            } else if !r.weight.unwrap_or(1.0).is_finite() || r.weight.unwrap_or(1.0) < 0.0 {
                Some(format!("weight of `{name}` must be a number ≥ 0"))
            } else {
                match (&picker, &b.picker) {
                    (Some((first, _)), Some(_)) => {
                        Some(format!("more than one picker (`{first}`, `{name}`)"))
                    }
                    _ => None,
                }
            };
            if let Some(msg) = msg {
                self.report(line, None, ctx(msg));
                complete = false;
                continue;
            }
            let weight = r.weight.unwrap_or(1.0);
            if let Some(f) = &b.filter {
                filters.push(f.clone());
            }
            if let Some(s) = &b.scorer {
                scorers.push((s.clone(), weight));
            }
            if let Some(p) = &b.picker {
                picker = Some((name.clone(), p.clone()));
            }
            refs.push(EffectiveRef {
                plugin_ref: name.clone(),
                weight: b.scorer.as_ref().map(|_| weight),
            });
        }
        let picker = match picker {
            Some((_, p)) => p,
            // The missing picker may be the failed plugin: inject nothing.
            None if !complete => return None,
            None => {
                let name = self.ensure_max_score_picker()?;
                refs.push(EffectiveRef {
                    plugin_ref: name.clone(),
                    weight: None,
                });
                let (_, _, b) = self.find_built(&name).expect("ensured");
                b.picker.clone().expect("max-score-picker is a picker")
            }
        };
        let profile = Profile {
            name: rp.name.clone(),
            filters,
            scorers,
            picker,
        };
        let eff = EffectiveProfile {
            name: rp.name.clone(),
            plugins: refs,
        };
        Some((profile, eff))
    }
}
