//! Errors: [`ConfigError`] (and the full list, [`ConfigErrors`]) at load time, [`Rejection`]
//! at schedule time.

use std::fmt;

/// Where a configuration error sits: the plugin entry it concerns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginRef {
    /// Plugin name (defaults to its type).
    pub name: String,
    /// Plugin type, e.g. `queue-scorer`.
    pub plugin_type: String,
}

/// An `EndpointPickerConfig` that cannot be loaded.
///
/// Display: `<source>: line L: plugin `name` (type `t`): <message>`; the line and plugin parts
/// are left out when unknown or not about one plugin (e.g. a profile error names the profile in
/// the message). Lines are 1-based, from serde_yaml_ng's location or from the plugin entry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ConfigError {
    /// The file name given to [`crate::Scheduler::from_yaml`].
    pub source_name: String,
    /// 1-based YAML line, when known.
    pub line: Option<usize>,
    /// The plugin entry at fault, when the error is about one.
    pub plugin: Option<PluginRef>,
    /// What is wrong, e.g. "unknown field `x`, expected one of `a`, `b`".
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: ", self.source_name)?;
        if let Some(line) = self.line {
            write!(f, "line {line}: ")?;
        }
        if let Some(p) = &self.plugin {
            write!(f, "plugin `{}` (type `{}`): ", p.name, p.plugin_type)?;
        }
        // serde's Rust type names never reach the user (`pdgate_api::serde_text`).
        f.write_str(&pdgate_api::serde_text::plain_expectation(&self.message))
    }
}

/// Every problem found in an `EndpointPickerConfig`, in file order (errors without a line
/// last); never empty. See [`crate::config::load_all`] and [`crate::config::check`].
///
/// Display: one [`ConfigError`] per line, no trailing newline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl ConfigErrors {
    /// The first error (what [`crate::Scheduler::from_yaml`] reports).
    pub fn into_first(self) -> ConfigError {
        self.0
            .into_iter()
            .next()
            .expect("ConfigErrors is never empty")
    }
}

impl From<ConfigError> for ConfigErrors {
    fn from(e: ConfigError) -> Self {
        ConfigErrors(vec![e])
    }
}

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}

/// Why a request got no endpoint. The server maps variants to statuses (design.md §5.5).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Rejection {
    /// The snapshot holds no schedulable (Ready, not terminating) endpoint → 503.
    #[error("no schedulable endpoints")]
    NoEndpoints,
    /// Endpoints are schedulable, but none of them serves the requested model → 503.
    #[error("no schedulable endpoint serves model `{model}`")]
    NoEndpointForModel {
        /// The requested model.
        model: String,
    },
    /// The profile's filters left no candidate → 429 with `x-llm-d-request-dropped-reason`.
    #[error("scheduling profile `{profile}`: filters left no endpoint")]
    Saturated {
        /// The profile whose filters emptied the candidate set.
        profile: String,
    },
    /// An admitter plugin refused the request (e.g. `probabilistic-admitter` shedding a
    /// sheddable request under load) → 429; the message names the plugin.
    #[error("request not admitted by `{plugin}`: {reason}")]
    NotAdmitted {
        /// The admitter's plugin name.
        plugin: String,
        /// Why, in the admitter's words.
        reason: String,
    },
    /// A header named a profile the config does not define → 400.
    #[error("unknown scheduling profile `{0}`")]
    UnknownProfile(String),
    /// A screener left no candidate or refused the request (no covered revision, pinned
    /// endpoint not Ready, …) → 503 with the reason.
    #[error("{reason}")]
    Screened {
        /// Why, naming the screener's cause.
        reason: String,
    },
    /// A client pin cannot be honoured: unknown endpoint, wrong role, unknown DP rank, a DP
    /// rank without an endpoint (400), or the pinned endpoint is not Ready (503); or pins of
    /// two phases name endpoints of different revisions (400). The message names the header
    /// or field (design.md §5.3).
    #[error("{message}")]
    Pin {
        /// Whether the pin itself is wrong or what it names cannot serve now.
        kind: PinFault,
        /// Stable reason for metrics (`unknown_endpoint`, `wrong_role`, `not_ready`, …).
        reason: &'static str,
        /// What is wrong, naming the header or field.
        message: String,
    },
    /// A conditional-decode probe (`Prefer: if-available`) whose decode endpoint lacks the
    /// prefix, or whose prefix data is unreadable → 412; the coordinator goes on with
    /// prefill then decode (design.md §4).
    #[error("conditional decode deferred: {reason}")]
    DecodeDeferred {
        /// Why the decode endpoint will not serve it alone.
        reason: String,
    },
}

/// What is wrong with a pin: the front maps it to its status (400 for [`PinFault::Invalid`],
/// 503 for [`PinFault::Unavailable`]); the scheduler names no HTTP status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PinFault {
    /// The pin names nothing that could ever serve it (unknown endpoint or rank, wrong
    /// role): the client's mistake.
    Invalid,
    /// The pinned endpoint or revision exists but cannot serve now (not Ready, no endpoint
    /// of its revision for the phase).
    Unavailable,
}
