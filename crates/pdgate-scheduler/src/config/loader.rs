//! The loader's state: declared plugins, built plugins and the errors found so far.
//!
//! Errors are collected, not returned: a plugin entry that cannot be declared (unsupported
//! type, duplicate name) is skipped; a plugin whose parameters are rejected is reported and
//! replaced, for the rest of the load only, by a stand-in built with default parameters, so
//! that plugins and profiles referring to it check as if it were fine (the stand-ins never
//! reach a [`super::Loaded`]: any error fails the load); so does a malformed entry (reported
//! by the parser) of a supported type. A plugin that has no stand-in is `failed`: references
//! to it report nothing more (no cascades).

use super::lines;
use crate::error::{ConfigError, PluginRef};
use crate::registry::{self, BuildCtx, Built, PluginError, Stage};
use serde_yaml_ng::Value;
use std::ops::Range;

/// One declared plugin entry (or an injected default).
pub(super) struct Decl {
    /// Instance name.
    pub name: String,
    /// Plugin type.
    pub plugin_type: String,
    /// Build stage of its type.
    pub stage: Stage,
    /// Parameters as written.
    pub params: Option<Value>,
    /// A malformed entry standing in with default parameters: its problem was reported
    /// already, its build errors are not.
    pub quiet: bool,
    /// Lines of its `plugins:` item (0-based, end exclusive); `None` when injected.
    pub item: Option<Range<usize>>,
}

/// Loader state.
pub(super) struct Loader<'a> {
    /// The YAML text, for line lookups.
    pub yaml: &'a str,
    /// File name in errors.
    pub source: &'a str,
    /// Plugin types registered by the embedding program.
    pub extra: &'a [registry::PluginType],
    /// Declared plugins, in declaration order.
    pub decls: Vec<Decl>,
    /// `(name, type, plugin)` in build order (stand-ins included).
    pub built: Vec<(String, String, Built)>,
    /// Names of plugins that could not be built at all (unsupported type, or even the
    /// default-parameter stand-in failed).
    pub failed: Vec<String>,
    /// Whether a plugin that failed to declare looks like a profile handler (its type ends
    /// with `-handler`): then a missing handler is not reported again.
    pub handler_unknown: bool,
    /// Errors found so far.
    pub errors: Vec<ConfigError>,
}

impl<'a> Loader<'a> {
    /// An empty loader.
    pub fn new(yaml: &'a str, source: &'a str, extra: &'a [registry::PluginType]) -> Self {
        Loader {
            yaml,
            source,
            extra,
            decls: Vec::new(),
            built: Vec::new(),
            failed: Vec::new(),
            handler_unknown: false,
            errors: Vec::new(),
        }
    }

    fn lookup(&self, type_name: &str) -> Option<&registry::PluginType> {
        self.extra
            .iter()
            .find(|t| t.name == type_name)
            .or_else(|| registry::lookup(type_name))
    }

    /// An error at `line` (1-based), about `plugin` when given.
    pub fn err(&self, line: Option<usize>, plugin: Option<&Decl>, message: String) -> ConfigError {
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

    /// Records an error.
    pub fn report(&mut self, line: Option<usize>, plugin: Option<&Decl>, message: String) {
        let e = self.err(line, plugin, message);
        self.errors.push(e);
    }

    /// Whether a plugin (declared or failed) already uses `name`.
    pub fn is_declared(&self, name: &str) -> bool {
        self.decls.iter().any(|d| d.name == name) || self.failed.iter().any(|f| f == name)
    }

    /// A malformed plugin entry (reported already) named `name` of type `plugin_type` (both
    /// possibly empty): a supported type stands in with default parameters, so that
    /// references to it and llm-d's defaults (the injected producer) behave; anything else
    /// is [`Self::skip`]ped.
    pub fn declare_malformed(&mut self, name: String, plugin_type: String) {
        let stage = self.lookup(&plugin_type).map(|t| t.stage);
        match stage {
            Some(stage) if !name.is_empty() && !self.is_declared(&name) => self.decls.push(Decl {
                name,
                plugin_type,
                stage,
                params: None,
                item: None,
                quiet: true,
            }),
            _ => self.skip(name, &plugin_type),
        }
    }

    /// Marks the plugin entry `name` (of type `plugin_type`, possibly empty) as failed
    /// without building it; its error was reported already.
    pub fn skip(&mut self, name: String, plugin_type: &str) {
        self.handler_unknown |= plugin_type.ends_with("-handler");
        if !name.is_empty() && !self.is_declared(&name) {
            self.failed.push(name);
        }
    }

    /// Declares a plugin; on an unsupported type or a duplicate name, records the error and
    /// returns `false`.
    pub fn declare(
        &mut self,
        name: String,
        plugin_type: String,
        params: Option<Value>,
        item: Option<Range<usize>>,
    ) -> bool {
        let line = item.as_ref().map(|r| r.start + 1);
        let mut decl = Decl {
            name,
            plugin_type,
            stage: Stage::Consumer,
            params,
            item,
            quiet: false,
        };
        let Some(stage) = self.lookup(&decl.plugin_type).map(|t| t.stage) else {
            let msg = match registry::refusal(&decl.plugin_type) {
                Some(why) => format!("unsupported plugin type `{}` ({why})", decl.plugin_type),
                None => format!("unsupported plugin type `{}`", decl.plugin_type),
            };
            self.report(line, Some(&decl), msg);
            self.skip(decl.name, &decl.plugin_type);
            return false;
        };
        if self.is_declared(&decl.name) {
            let msg = format!("duplicate plugin name `{}`", decl.name);
            self.report(line, Some(&decl), msg);
            return false;
        }
        decl.stage = stage;
        self.decls.push(decl);
        true
    }

    /// Builds declared plugin `i`; `profiles` are the profile names (for handlers). On a
    /// parameter error, records it (unless it only names a failed plugin), builds a stand-in
    /// with default parameters (except for handlers, which nothing refers to) and returns
    /// `false`.
    pub fn build(&mut self, i: usize, profiles: &[String]) -> bool {
        let d = &self.decls[i];
        let t = self
            .lookup(&d.plugin_type)
            .expect("declared types are registered");
        let (factory, stage) = (t.build, t.stage);
        let build = |params: Option<&Value>| {
            let mut ctx = BuildCtx {
                built: &self.built,
                profiles,
                next_slot: self.built.iter().filter(|b| b.2.index.is_some()).count(),
            };
            factory(params, &mut ctx)
        };
        let (built, ok) = match build(d.params.as_ref()) {
            Ok(b) => (Some(b), true),
            Err(e) => {
                let stand_in = match stage {
                    Stage::Handler => None,
                    _ => build(None).ok(),
                };
                // A dependent of a plugin that already failed: that failure was reported.
                let cascade = e.missing.as_ref().is_some_and(|m| self.failed.contains(m));
                if !cascade && !d.quiet {
                    let e = self.plugin_err(d, e);
                    self.errors.push(e);
                }
                (stand_in, false)
            }
        };
        let d = &self.decls[i];
        match built {
            Some(b) => self.built.push((d.name.clone(), d.plugin_type.clone(), b)),
            None => self.failed.push(d.name.clone()),
        }
        ok
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

    /// The built plugin named `name`.
    pub fn find_built(&self, name: &str) -> Option<&(String, String, Built)> {
        self.built.iter().find(|(n, _, _)| n == name)
    }
}
