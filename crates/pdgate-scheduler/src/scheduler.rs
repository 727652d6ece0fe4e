//! [`Scheduler`]: the loaded config and the per-request entry points.

use crate::booking::Booking;
use crate::config::{self, Hooks, Loaded};
use crate::endpoint::{EndpointState, Snapshot};
use crate::error::{ConfigError, Rejection};
use crate::pins::RequestPins;
use crate::plugin::{
    conditional_verdict, phase_of_profile, Candidates, PluginMetric, ProfileHandler, ProfileRunner,
    ResponseCtx,
};
use crate::plugin_build::PluginType;
use crate::prefix::{PreciseIndex, PrefixSource};
use crate::profile::Profile;
use crate::request::{Pick, Rejected, RequestCtx, SchedulingRequest, SchedulingResult};
use pdgate_api::Phase;
use std::sync::Arc;

/// The endpoint picker: screeners, profiles, profile handler, hooks. `Send + Sync`; share it
/// as `Arc<Scheduler>`. Mutable state (prefix index, round-robin counters) is internal.
pub struct Scheduler {
    profiles: Vec<Profile>,
    handler: Arc<dyn ProfileHandler>,
    hooks: Hooks,
    indexes: Vec<(String, PrefixSource)>,
    effective_yaml: String,
    flow: crate::flow::FlowSettings,
    token_producer: Option<Arc<crate::token_params::TokenProducerParams>>,
    data_layer: Arc<crate::config::DataLayer>,
}

impl Scheduler {
    /// Loads an llm-d `EndpointPickerConfig` (YAML text), injecting llm-d's defaults.
    /// `source` names the file in errors.
    ///
    /// Errors: [`ConfigError`] naming the file, line, plugin and field (unknown plugin type,
    /// unknown or mistyped parameter, bad `pluginRef`, missing handler, …).
    pub fn from_yaml(yaml: &str, source: &str) -> Result<Scheduler, ConfigError> {
        Self::from_yaml_with_plugins(yaml, source, &[])
    }

    /// [`Self::from_yaml`] with extra plugin types registered by the embedding program
    /// (llm-d lets out-of-tree plugins register the same way); they are looked up before the
    /// built-in types, so an extra type may also replace a built-in one.
    ///
    /// Errors: as [`Self::from_yaml`].
    pub fn from_yaml_with_plugins(
        yaml: &str,
        source: &str,
        extra: &[PluginType],
    ) -> Result<Scheduler, ConfigError> {
        let Loaded {
            profiles,
            handler,
            hooks,
            indexes,
            effective_yaml,
            flow,
            token_producer,
            data_layer,
        } = config::load(yaml, source, extra)?;
        Ok(Scheduler {
            profiles,
            handler,
            hooks,
            indexes,
            effective_yaml,
            flow,
            token_producer,
            data_layer,
        })
    }

    /// The `token-producer` parameters, when the config has one: the front ends tokenize
    /// prompts with them before [`Self::schedule`] (the scheduler does no IO).
    pub fn token_producer(&self) -> Option<&crate::token_params::TokenProducerParams> {
        self.token_producer.as_deref()
    }

    /// What the engine scraper reads and how often (`dataLayer`: metrics path, port and
    /// period, the engine-type → metric-name mapping, the model-list path and period).
    pub fn data_layer(&self) -> &Arc<crate::config::DataLayer> {
        &self.data_layer
    }

    /// Flow control and admission as configured (`featureGates`, `flowControl`, the
    /// saturation detector).
    pub fn flow(&self) -> &crate::flow::FlowSettings {
        &self.flow
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

    /// Schedules one request over `snapshot` (design.md §2 step 3).
    ///
    /// Candidates are the schedulable endpoints serving the model, narrowed once by the
    /// screeners in config order. With `req.profile` set (header-selected), runs only that
    /// profile; the pick's phase is `Prefill`/`Decode`/`Encode` for profiles of those names,
    /// else `Aggregated`. Otherwise — or always, when the handler selects by header
    /// (`header-profile-handler`) — the profile handler decides. A conditional-decode probe
    /// (`req.conditional`) is served by its decode pick only when the handler's decider keeps
    /// it there. Every pick is booked (in-flight +1, and its prompt tokens: those not cached on
    /// it still to prefill, except on a `Decode` pick, and all of them active) at pick time;
    /// PreRequest hooks then see the result. With `req.priority` given, the admitters run
    /// on the screened candidates first.
    ///
    /// Errors ([`Rejected`]): [`Rejection::NoEndpoints`], [`Rejection::NoEndpointForModel`],
    /// [`Rejection::Screened`] (503); [`Rejection::Saturated`], [`Rejection::NotAdmitted`]
    /// (429);
    /// [`Rejection::UnknownProfile`] (400); [`Rejection::DecodeDeferred`] (412). A rejection
    /// produced after screening carries the headers of the `RequestRejected` hooks.
    pub fn schedule(
        &self,
        req: &SchedulingRequest<'_>,
        snapshot: &Snapshot,
    ) -> Result<SchedulingResult, Rejected> {
        let pins = match req.hints {
            Some(h) => RequestPins::of(h, snapshot).map_err(|e| Rejection::Pin {
                kind: e.fault(),
                reason: e.reason(),
                message: e.to_string(),
            })?,
            None => RequestPins::default(),
        };
        let mut base: Candidates<'_> = snapshot
            .endpoints
            .iter()
            .filter(|e| e.endpoint.schedulable())
            .collect();
        if let Some(avoid) = req.avoid.filter(|_| !base.is_empty()) {
            base.retain(|e| !avoid(&e.endpoint));
            if base.is_empty() {
                return Err(Rejection::Screened {
                    reason: "every endpoint serving the request is unavailable \
                             (failed or circuit open)"
                        .into(),
                }
                .into());
            }
        }
        // A pin fixes the revision for the whole request (design.md §5.3).
        if let Some(rev) = &pins.revision {
            base.retain(|e| e.endpoint.revision() == Some(rev.as_str()));
        }
        let ctx = RequestCtx::with_snapshot(req, self.indexes.len(), snapshot).with_pins(pins);
        if base.is_empty() {
            return Err(Rejection::NoEndpoints.into());
        }
        let key = crate::endpoint::ModelKey::of(req.model);
        base.retain(|e| e.load.serves_key(req.model, key));
        if base.is_empty() {
            return Err(Rejection::NoEndpointForModel {
                model: req.model.to_string(),
            }
            .into());
        }
        for (name, screener) in &self.hooks.screeners {
            if let Err(reason) = screener.screen(&ctx, &mut base) {
                return Err(Rejection::Screened { reason }.into());
            }
            if base.is_empty() {
                let reason = format!("screener `{name}` left no endpoint");
                return Err(Rejection::Screened { reason }.into());
            }
        }
        // Admitters (llm-d: after the screeners, before scheduling), once per client request.
        let admitted = match req.priority {
            Some(priority) => self.admit(&ctx, priority, &base),
            None => Ok(()),
        };
        admitted
            .and_then(|()| self.schedule_screened(&ctx, &base))
            .map_err(|reason| {
                let mut headers = Vec::new();
                for hook in &self.hooks.rejected {
                    hook.request_rejected(&ctx, &reason, &mut headers);
                }
                Rejected { reason, headers }
            })
    }

    /// Runs the admitters in config order; the first refusal wins.
    fn admit(
        &self,
        ctx: &RequestCtx<'_>,
        priority: i32,
        base: &[&Arc<EndpointState>],
    ) -> Result<(), Rejection> {
        for (name, admitter) in &self.hooks.admitters {
            admitter
                .admit(ctx, priority, base)
                .map_err(|reason| Rejection::NotAdmitted {
                    plugin: name.clone(),
                    reason,
                })?;
        }
        Ok(())
    }

    fn schedule_screened(
        &self,
        ctx: &RequestCtx<'_>,
        base: &[&Arc<EndpointState>],
    ) -> Result<SchedulingResult, Rejection> {
        let runner = Runner { sched: self, base };
        let req = ctx.req;
        let mut result = match req.profile {
            Some(header) if !self.handler.selects_by_header() => {
                let (name, phase) = self.profile_of_header(header);
                let mut pick = runner.run(ctx, name, phase)?;
                pick.phase = phase;
                if req.conditional && matches!(pick.phase, Phase::Decode | Phase::Aggregated) {
                    let decision = self.handler.conditional_decode(ctx, &pick.endpoint);
                    conditional_verdict(decision, &pick.endpoint.endpoint.name)?;
                }
                SchedulingResult {
                    prefill: None,
                    decode: pick,
                    prefill_unavailable: None,
                }
            }
            _ => self.handler.handle(ctx, &runner)?,
        };
        // Hash the prompt for every producer now: response hooks record these blocks later.
        for (_, index) in &self.indexes {
            ctx.block_hashes(index);
        }
        // Cached tokens per pick (first producer), then the token booking the cost scorer
        // reads: a decode leg's prompt was prefilled elsewhere (its KV comes by transfer).
        let prompt = ctx.prompt_tokens();
        let index = self.indexes.first().map(|(_, ix)| ix);
        let book = |p: &mut Pick| {
            if let Some(index) = index {
                p.cached_tokens =
                    (ctx.prefix_match(index, &p.endpoint) * index.block_tokens()).min(prompt);
            }
            let prefill = match p.phase {
                Phase::Decode => 0,
                _ => prompt - p.cached_tokens,
            };
            p.guard.book_tokens(prefill, prompt);
        };
        book(&mut result.decode);
        result.prefill.as_mut().map(book);
        for hook in &self.hooks.pre_requests {
            hook.pre_request(ctx, &result);
        }
        Ok(result)
    }

    /// Current values of the plugins' own metrics (e.g. revision shares over `snapshot`), for
    /// the server's `/metrics`; a series absent here is absent from the exposition.
    pub fn plugin_metrics(&self, snapshot: &Snapshot) -> Vec<PluginMetric> {
        let mut out = Vec::new();
        for m in &self.hooks.metrics {
            m.collect(snapshot, &mut out);
        }
        out
    }

    /// Blocks of the prefix index (the first producer's) credited to `endpoint`; 0 without
    /// a producer.
    pub fn prefix_blocks_held(&self, endpoint: &str) -> usize {
        self.indexes
            .first()
            .map_or(0, |(_, i)| i.blocks_held(endpoint))
    }

    /// Forgets the prefix-index credit of `endpoint` in every index (its engine restarted
    /// and lost its cache, or it left). Returns whether any index had an entry for it.
    pub fn forget_endpoint(&self, endpoint: &str) -> bool {
        self.indexes
            .iter()
            .fold(false, |any, (_, ix)| ix.forget(endpoint) | any)
    }

    /// Forgets, in every prefix index, the endpoints for which `keep` is false (those that
    /// left discovery); returns how many (endpoint, index) entries were dropped.
    pub fn retain_endpoints(&self, keep: impl Fn(&str) -> bool) -> usize {
        self.indexes.iter().map(|(_, ix)| ix.retain(&keep)).sum()
    }

    /// Size of the prefix indexes, summed over the producers (zero without one).
    pub fn prefix_stats(&self) -> crate::prefix::PrefixStats {
        (self.indexes.iter())
            .map(|(_, ix)| ix.stats())
            .fold(Default::default(), |a, b| a + b)
    }

    /// The precise prefix indexes (`precise-prefix-cache-producer`), each with its
    /// producer's name and events config, for the server to subscribe to the engines' KV
    /// events and feed them: [`PreciseIndex::apply`] per event batch of an endpoint,
    /// [`PreciseIndex::clear_endpoint`] when its stream restarts or it leaves.
    pub fn kv_event_indexes(&self) -> Vec<KvEventIndex> {
        (self.indexes.iter())
            .filter_map(|(name, ix)| {
                Some(KvEventIndex {
                    producer: name.clone(),
                    index: ix.precise()?.clone(),
                })
            })
            .collect()
    }

    /// Offers the engines' KV block size (`vllm:cache_config_info{block_size}`, tokens) to
    /// every approximate index with `autoTune` on; returns whether any changed its block
    /// size (and forgot what it had learnt), for the server's log line and metric.
    pub fn adopt_engine_block_size(&self, block_tokens: usize) -> bool {
        (self.indexes.iter())
            .filter_map(|(_, ix)| ix.approx())
            .fold(false, |any, ix| ix.adopt_block_size(block_tokens) | any)
    }

    /// Runs the `ResponseHeader` hooks for `pick`'s phase response head (`status`), and
    /// returns the `(name, value)` headers they stamp on that response (lowercase names).
    /// Call it once per phase response, before the coordinator captures headers.
    pub fn response_received(&self, pick: &Pick, status: u16) -> Vec<(String, String)> {
        let mut out = Vec::new();
        let ctx = ResponseCtx {
            endpoint: &pick.endpoint,
            phase: pick.phase,
            status,
            state: pick.guard.state(),
        };
        for hook in &self.hooks.response_headers {
            hook.response_header(&ctx, &mut out);
        }
        out
    }
}

/// A precise prefix index and the producer it belongs to ([`Scheduler::kv_event_indexes`]).
#[derive(Debug, Clone)]
pub struct KvEventIndex {
    /// The producer plugin's name.
    pub producer: String,
    /// Its index; [`PreciseIndex::events`] is its `kvEventsConfig`.
    pub index: Arc<PreciseIndex>,
}

impl Scheduler {
    /// The profile that runs `phase` (phases follow the profile handler's roles, e.g. a
    /// disagg handler's `profiles.prefill: p`), when the config defines it.
    pub fn profile_for(&self, phase: Phase) -> Option<&str> {
        let name = self.handler.profile_for(phase)?;
        self.profiles.iter().any(|p| p.name == name).then_some(name)
    }

    /// The phase of a pick made by the profile `name` alone (header-selected): the phase
    /// whose role the handler gives it, else `Aggregated`.
    pub fn phase_of_profile(&self, name: &str) -> Phase {
        [Phase::Prefill, Phase::Decode, Phase::Encode]
            .into_iter()
            .find(|&ph| self.handler.profile_for(ph) == Some(name))
            .unwrap_or(Phase::Aggregated)
    }

    /// The profile and phase a profile header asks for: a profile of that name, else the
    /// profile of the role it names (`prefill`, `decode`, `encode`: a coordinator names the
    /// phase, the router's config names its profiles).
    fn profile_of_header<'h>(&'h self, header: &'h str) -> (&'h str, Phase) {
        if self.profiles.iter().any(|p| p.name == header) {
            return (header, self.phase_of_profile(header));
        }
        let role = phase_of_profile(header);
        match self.handler.profile_for(role) {
            Some(name) if role != Phase::Aggregated => (name, role),
            _ => (header, Phase::Aggregated),
        }
    }
}

struct Runner<'a> {
    sched: &'a Scheduler,
    base: &'a [&'a Arc<EndpointState>],
}

impl ProfileRunner for Runner<'_> {
    fn has_profile(&self, name: &str) -> bool {
        self.sched.profiles.iter().any(|p| p.name == name)
    }

    fn run(&self, ctx: &RequestCtx<'_>, name: &str, phase: Phase) -> Result<Pick, Rejection> {
        let profile = self
            .sched
            .profiles
            .iter()
            .find(|p| p.name == name)
            .ok_or_else(|| Rejection::UnknownProfile(name.to_string()))?;
        // A pinned phase takes its validated endpoint: no filters, scorers or picker.
        let session = ctx
            .req
            .session
            .and_then(|s| s.get(phase))
            .and_then(|name| self.base.iter().find(|e| e.endpoint.name == name))
            .filter(|e| profile.admits(ctx, e));
        let pinned = ctx.pins().get(phase);
        let endpoint = match (pinned, session) {
            (Some(pinned), _) => pinned,
            (None, Some(bound)) => *bound,
            (None, None) => {
                profile
                    .run(ctx, self.base)
                    .map_err(|e| match (e, &ctx.pins().revision) {
                        // A pin fixed the revision and it has no endpoint for this phase (design.md
                        // §5.3): unavailable, not saturated.
                        (Rejection::Saturated { profile }, Some(rev)) => Rejection::Pin {
                            kind: crate::error::PinFault::Unavailable,
                            reason: "pinned_revision_incomplete",
                            message: format!(
                        "the pinned endpoint's revision `{rev}` has no endpoint for scheduling \
                         profile `{profile}`"
                    ),
                        },
                        (e, _) => e,
                    })?
            }
        };
        Ok(Pick {
            guard: Booking::new(
                endpoint,
                ctx.state().clone(),
                self.sched.hooks.abandoned.clone(),
            ),
            endpoint: endpoint.clone(),
            phase: Phase::Aggregated,
            profile: profile.name.clone(),
            pinned: pinned.is_some(),
            cached_tokens: 0,
        })
    }
}

/// `Scheduler` is shared across tokio tasks as `Arc<Scheduler>`.
const _: fn() = || {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<Scheduler>();
};
