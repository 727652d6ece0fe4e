//! [`Scheduler`]: the loaded config and the per-request entry point.

use crate::config::{self, Loaded};
use crate::endpoint::{InFlightGuard, Snapshot};
use crate::error::{ConfigError, Rejection};
use crate::plugin::{PreRequest, ProfileHandler, ProfileRunner};
use crate::prefix::PrefixIndex;
use crate::profile::Profile;
use crate::request::{Pick, RequestCtx, SchedulingRequest, SchedulingResult};
use pdgate_api::Phase;
use std::sync::Arc;

/// The endpoint picker: profiles, profile handler, producers. `Send + Sync`; share it as
/// `Arc<Scheduler>`. Mutable state (prefix index, round-robin counters) is internal.
pub struct Scheduler {
    profiles: Vec<Profile>,
    handler: Arc<dyn ProfileHandler>,
    pre_requests: Vec<Arc<dyn PreRequest>>,
    indexes: Vec<Arc<PrefixIndex>>,
    effective_yaml: String,
}

impl Scheduler {
    /// Loads an llm-d `EndpointPickerConfig` (YAML text), injecting llm-d's defaults.
    /// `source` names the file in errors.
    ///
    /// Errors: [`ConfigError`] naming the file, line, plugin and field (unknown plugin type,
    /// unknown or mistyped parameter, bad `pluginRef`, missing handler, …).
    pub fn from_yaml(yaml: &str, source: &str) -> Result<Scheduler, ConfigError> {
        let Loaded {
            profiles,
            handler,
            pre_requests,
            indexes,
            effective_yaml,
        } = config::load(yaml, source)?;
        Ok(Scheduler {
            profiles,
            handler,
            pre_requests,
            indexes,
            effective_yaml,
        })
    }

    /// The effective config with llm-d defaults injected, as YAML (`serve --print-config`,
    /// `check-config`). Loading it again yields the same scheduler.
    pub fn effective_config_yaml(&self) -> String {
        self.effective_yaml.clone()
    }

    /// Names of the scheduling profiles, in config order.
    pub fn profile_names(&self) -> impl Iterator<Item = &str> {
        self.profiles.iter().map(|p| p.name.as_str())
    }

    /// Schedules one request over `snapshot`.
    ///
    /// With `req.profile` set (header-selected), runs only that profile; the pick's phase is
    /// `Prefill`/`Decode`/`Encode` for profiles of those names, else `Aggregated`. Otherwise —
    /// or always, when the handler selects by header (`header-profile-handler`) — the profile
    /// handler decides. Every pick is booked (in-flight +1) at pick time; the
    /// producers then record the picks in their prefix indexes.
    ///
    /// Errors: [`Rejection::NoEndpoints`] (no schedulable endpoint), [`Rejection::Saturated`]
    /// (a profile's filters left nothing), [`Rejection::UnknownProfile`] (header profile).
    pub fn schedule(
        &self,
        req: &SchedulingRequest<'_>,
        snapshot: &Snapshot,
    ) -> Result<SchedulingResult, Rejection> {
        let ctx = RequestCtx::new(req, self.indexes.len());
        let runner = Runner {
            sched: self,
            snapshot,
        };
        let mut result = match req.profile {
            Some(name) if !self.handler.selects_by_header() => {
                let mut pick = runner.run(&ctx, name)?;
                pick.phase = phase_of_profile(name);
                SchedulingResult {
                    prefill: None,
                    decode: pick,
                }
            }
            _ => self.handler.handle(&ctx, &runner)?,
        };
        if let Some(index) = self.indexes.first() {
            let prompt = ctx.prompt_tokens();
            let cached = |p: &mut Pick| {
                p.cached_tokens =
                    (ctx.prefix_match(index, &p.endpoint) * index.block_tokens()).min(prompt);
            };
            cached(&mut result.decode);
            result.prefill.as_mut().map(cached);
        }
        for hook in &self.pre_requests {
            hook.pre_request(&ctx, &result);
        }
        Ok(result)
    }
}

/// The phase of a pick made by the profile `name` alone (header-selected).
pub(crate) fn phase_of_profile(name: &str) -> Phase {
    match name {
        "prefill" => Phase::Prefill,
        "decode" => Phase::Decode,
        "encode" => Phase::Encode,
        _ => Phase::Aggregated,
    }
}

struct Runner<'a> {
    sched: &'a Scheduler,
    snapshot: &'a Snapshot,
}

impl ProfileRunner for Runner<'_> {
    fn has_profile(&self, name: &str) -> bool {
        self.sched.profiles.iter().any(|p| p.name == name)
    }

    fn run(&self, ctx: &RequestCtx<'_>, name: &str) -> Result<Pick, Rejection> {
        let profile = self
            .sched
            .profiles
            .iter()
            .find(|p| p.name == name)
            .ok_or_else(|| Rejection::UnknownProfile(name.to_string()))?;
        let endpoint = profile.run(ctx, self.snapshot)?;
        Ok(Pick {
            guard: InFlightGuard::book(&endpoint.load),
            endpoint: endpoint.clone(),
            phase: Phase::Aggregated,
            profile: profile.name.clone(),
            cached_tokens: 0,
        })
    }
}

/// `Scheduler` is shared across tokio tasks as `Arc<Scheduler>`.
const _: fn() = || {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<Scheduler>();
};
