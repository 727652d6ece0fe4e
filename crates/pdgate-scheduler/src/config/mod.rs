//! Loading an llm-d `EndpointPickerConfig`: strict parsing, llm-d default injection, plugin
//! construction, profile resolution and the effective config.
//!
//! Defaults injected as llm-d does: a plugin's `name` defaults to its `type`; a config using
//! `prefix-cache-scorer` or `prefix-based-pd-decider` without an `approx-prefix-cache-producer`
//! gets one with default parameters; no profiles → one `default` profile referencing every
//! filter, scorer and picker; a profile without a picker gets `max-score-picker`; one profile
//! and no handler → `single-profile-handler`; a ref's `weight` defaults to 1.

mod effective;
mod lines;
mod raw;

use crate::error::{ConfigError, PluginRef};
use crate::plugin::{PreRequest, ProfileHandler};
use crate::prefix::PrefixIndex;
use crate::profile::Profile;
use crate::registry::{self, BuildCtx, Built, PluginError, Stage};
use effective::{Effective, EffectivePlugin, EffectiveProfile, EffectiveRef};
use raw::{RawPluginRef, RawProfile};
use serde_yaml_ng::Value;
use std::ops::Range;
use std::sync::Arc;

/// A loaded config, ready for the [`crate::Scheduler`].
pub struct Loaded {
    /// Profiles in config order.
    pub profiles: Vec<Profile>,
    /// The profile handler.
    pub handler: Arc<dyn ProfileHandler>,
    /// PreRequest hooks in build order.
    pub pre_requests: Vec<Arc<dyn PreRequest>>,
    /// Prefix indexes by slot.
    pub indexes: Vec<Arc<PrefixIndex>>,
    /// The effective config as YAML.
    pub effective_yaml: String,
}

struct Decl {
    name: String,
    plugin_type: String,
    stage: Stage,
    params: Option<Value>,
    item: Option<Range<usize>>,
}

struct Loader<'a> {
    yaml: &'a str,
    source: &'a str,
    decls: Vec<Decl>,
    built: Vec<(String, String, Built)>,
}

/// Loads `yaml`; `source` names the file in errors.
///
/// Errors: [`ConfigError`] (see [`crate::Scheduler::from_yaml`]).
pub fn load(yaml: &str, source: &str) -> Result<Loaded, ConfigError> {
    let raw = raw::parse(yaml, source)?;
    let mut ld = Loader {
        yaml,
        source,
        decls: Vec::new(),
        built: Vec::new(),
    };
    let items = lines::seq_items(yaml, "plugins");
    for (i, p) in raw.plugins.into_iter().enumerate() {
        let name = p.name.unwrap_or_else(|| p.plugin_type.clone());
        ld.declare(name, p.plugin_type, p.parameters, items.get(i).cloned())?;
    }
    let needs_producer = ld.decls.iter().any(|d| {
        d.plugin_type == "prefix-cache-scorer" || d.plugin_type == "prefix-based-pd-decider"
    });
    let producer = crate::plugins::approx_prefix_cache_producer::TYPE.name;
    if needs_producer && !ld.decls.iter().any(|d| d.plugin_type == producer) {
        ld.declare(producer.into(), producer.into(), None, None)?;
        let injected = ld.decls.pop().expect("just declared");
        ld.decls.insert(0, injected);
    }
    for stage in [Stage::Producer, Stage::Consumer] {
        for i in 0..ld.decls.len() {
            if ld.decls[i].stage == stage {
                ld.build(i, &[])?;
            }
        }
    }
    let raw_profiles = if raw.scheduling_profiles.is_empty() {
        let refs = ld
            .built
            .iter()
            .filter(|(_, _, b)| b.filter.is_some() || b.scorer.is_some() || b.picker.is_some())
            .map(|(n, _, _)| RawPluginRef {
                plugin_ref: n.clone(),
                weight: None,
            });
        vec![RawProfile {
            name: "default".into(),
            plugins: refs.collect(),
        }]
    } else {
        raw.scheduling_profiles
    };
    let profile_items = lines::seq_items(yaml, "schedulingProfiles");
    let mut profiles = Vec::new();
    let mut eff_profiles = Vec::new();
    for (i, rp) in raw_profiles.iter().enumerate() {
        let item = profile_items.get(i);
        if profiles.iter().any(|p: &Profile| p.name == rp.name) {
            return Err(ld.err(
                item.map(|r| r.start + 1),
                None,
                format!("duplicate scheduling profile `{}`", rp.name),
            ));
        }
        let (profile, eff) = ld.profile(rp, item)?;
        profiles.push(profile);
        eff_profiles.push(eff);
    }
    let names: Vec<String> = profiles.iter().map(|p| p.name.clone()).collect();
    let handlers: Vec<usize> = (0..ld.decls.len())
        .filter(|i| ld.decls[*i].stage == Stage::Handler)
        .collect();
    let handler_index = match handlers.as_slice() {
        [] if names.len() == 1 => {
            let t = crate::plugins::single_profile_handler::TYPE.name;
            ld.declare(t.into(), t.into(), None, None)?;
            ld.decls.len() - 1
        }
        [] => {
            let msg = format!(
                "no profile handler: {} scheduling profiles need one (e.g. `disagg-profile-handler`)",
                names.len()
            );
            return Err(ld.err(None, None, msg));
        }
        [one] => *one,
        many => {
            let list: Vec<String> = many
                .iter()
                .map(|i| format!("`{}`", ld.decls[*i].name))
                .collect();
            return Err(ld.err(
                None,
                None,
                format!("more than one profile handler: {}", list.join(", ")),
            ));
        }
    };
    ld.build(handler_index, &names)?;
    let handler = ld
        .built
        .last()
        .and_then(|(_, _, b)| b.handler.clone())
        .expect("handler stage builds a handler");
    let effective = Effective {
        api_version: raw::API_VERSIONS[0],
        kind: raw::KIND,
        plugins: ld
            .decls
            .iter()
            .filter_map(|d| {
                let (_, _, b) = ld.built.iter().find(|(n, _, _)| *n == d.name)?;
                Some(EffectivePlugin {
                    name: d.name.clone(),
                    plugin_type: d.plugin_type.clone(),
                    parameters: b.params.clone(),
                })
            })
            .collect(),
        scheduling_profiles: eff_profiles,
    };
    Ok(Loaded {
        profiles,
        handler,
        pre_requests: ld
            .built
            .iter()
            .filter_map(|(_, _, b)| b.pre_request.clone())
            .collect(),
        indexes: ld
            .built
            .iter()
            .filter_map(|(_, _, b)| b.index.clone())
            .collect(),
        effective_yaml: effective.to_yaml(),
    })
}

impl Loader<'_> {
    fn err(&self, line: Option<usize>, plugin: Option<&Decl>, message: String) -> ConfigError {
        ConfigError {
            source_name: self.source.to_string(),
            line,
            plugin: plugin.map(|d| PluginRef {
                name: d.name.clone(),
                plugin_type: d.plugin_type.clone(),
            }),
            message,
        }
    }

    fn declare(
        &mut self,
        name: String,
        plugin_type: String,
        params: Option<Value>,
        item: Option<Range<usize>>,
    ) -> Result<(), ConfigError> {
        let line = item.as_ref().map(|r| r.start + 1);
        let mut decl = Decl {
            name,
            plugin_type,
            stage: Stage::Consumer,
            params,
            item,
        };
        let Some(t) = registry::lookup(&decl.plugin_type) else {
            let msg = format!("unsupported plugin type `{}`", decl.plugin_type);
            return Err(self.err(line, Some(&decl), msg));
        };
        if self.decls.iter().any(|d| d.name == decl.name) {
            let msg = format!("duplicate plugin name `{}`", decl.name);
            return Err(self.err(line, Some(&decl), msg));
        }
        decl.stage = t.stage;
        self.decls.push(decl);
        Ok(())
    }

    fn build(&mut self, i: usize, profiles: &[String]) -> Result<(), ConfigError> {
        let d = &self.decls[i];
        let t = registry::lookup(&d.plugin_type).expect("declared types are registered");
        let mut ctx = BuildCtx {
            built: &self.built,
            profiles,
            next_slot: self.built.iter().filter(|b| b.2.index.is_some()).count(),
        };
        let built = (t.build)(d.params.as_ref(), &mut ctx).map_err(|e| self.plugin_err(d, e))?;
        self.built
            .push((d.name.clone(), d.plugin_type.clone(), built));
        Ok(())
    }

    fn plugin_err(&self, d: &Decl, e: PluginError) -> ConfigError {
        let line = d.item.as_ref().map(|r| {
            e.key
                .as_ref()
                .and_then(|k| lines::find_path(self.yaml, r, &format!("parameters.{k}")))
                .unwrap_or(r.start + 1)
        });
        let message = match &e.path {
            Some(p) => format!("parameters.{p}: {}", e.message),
            None => format!("parameters: {}", e.message),
        };
        self.err(line, Some(d), message)
    }

    fn ensure_max_score_picker(&mut self) -> Result<String, ConfigError> {
        let t = crate::plugins::max_score_picker::TYPE.name;
        if let Some((n, _, _)) = self.built.iter().find(|(_, ty, _)| ty == t) {
            return Ok(n.clone());
        }
        self.declare(t.into(), t.into(), None, None)?;
        self.build(self.decls.len() - 1, &[])?;
        Ok(t.into())
    }

    fn profile(
        &mut self,
        rp: &RawProfile,
        item: Option<&Range<usize>>,
    ) -> Result<(Profile, EffectiveProfile), ConfigError> {
        let (mut filters, mut scorers, mut picker) = (Vec::new(), Vec::new(), None);
        let mut refs = Vec::new();
        for r in &rp.plugins {
            let line = item
                .and_then(|it| lines::find_key_value(self.yaml, it, "pluginRef", &r.plugin_ref));
            let ctx = |m: String| format!("scheduling profile `{}`: {m}", rp.name);
            let Some((name, ty, b)) = self.built.iter().find(|(n, _, _)| *n == r.plugin_ref) else {
                let msg = match self.decls.iter().find(|d| d.name == r.plugin_ref) {
                    Some(d) => format!(
                        "plugin `{}` (type `{}`) is not a filter, scorer or picker",
                        d.name, d.plugin_type
                    ),
                    None => format!("pluginRef `{}` names no plugin", r.plugin_ref),
                };
                return Err(self.err(line, None, ctx(msg)));
            };
            if b.filter.is_none() && b.scorer.is_none() && b.picker.is_none() {
                let msg =
                    format!("plugin `{name}` (type `{ty}`) is not a filter, scorer or picker");
                return Err(self.err(line, None, ctx(msg)));
            }
            let weight = r.weight.unwrap_or(1.0);
            if !weight.is_finite() || weight < 0.0 {
                return Err(self.err(
                    line,
                    None,
                    ctx(format!("weight of `{name}` must be a number ≥ 0")),
                ));
            }
            if let Some(f) = &b.filter {
                filters.push(f.clone());
            }
            if let Some(s) = &b.scorer {
                scorers.push((s.clone(), weight));
            }
            if let Some(p) = &b.picker {
                if let Some((first, _)) = &picker {
                    return Err(self.err(
                        line,
                        None,
                        ctx(format!("more than one picker (`{first}`, `{name}`)")),
                    ));
                }
                picker = Some((name.clone(), p.clone()));
            }
            refs.push(EffectiveRef {
                plugin_ref: name.clone(),
                weight: b.scorer.as_ref().map(|_| weight),
            });
        }
        let picker = match picker {
            Some((_, p)) => p,
            None => {
                let name = self.ensure_max_score_picker()?;
                refs.push(EffectiveRef {
                    plugin_ref: name.clone(),
                    weight: None,
                });
                let (_, _, b) = self
                    .built
                    .iter()
                    .find(|(n, _, _)| *n == name)
                    .expect("ensured");
                b.picker.clone().expect("max-score-picker is a picker")
            }
        };
        let profile = Profile {
            name: rp.name.clone(),
            filters,
            scorers,
            picker,
        };
        Ok((
            profile,
            EffectiveProfile {
                name: rp.name.clone(),
                plugins: refs,
            },
        ))
    }
}
