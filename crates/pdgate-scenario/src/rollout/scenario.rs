//! Running the rollout: simulators, the two per-role routers reading their endpoints from
//! one publisher (the endpoints file or pods, [`super::publish`]), the coordinator, then per
//! step: publish the step's list, wait until both routers hold it, send the step's traffic;
//! a trickle of long requests runs throughout.

use super::plan;
use super::prompts::PromptGen;
use super::publish::{self, Publisher};
use super::report::{Observed, Outcome, Probes, StepTiming};
use super::RolloutConfig;
use crate::fleet;
use pdgate_bench::{replay, ReplayConfig, RequestRecord, WorkItem, WorkPrompt};
use pdgate_scheduler::{Endpoint, DEFAULT_CONFIG_YAML};
use pdgate_server::app::PhaseRouters;
use pdgate_server::ServerHandle;
use pdgate_sim::{SimConfig, WorkerHandle, WorkerSpec};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The built-in P/D config plus a `disaggregatedset-rollout-screener` (max-role, required
/// roles prefill and decode, scoped to the `demo` set).
pub fn router_config() -> String {
    let entry = format!(
        "\nplugins:\n- type: disaggregatedset-rollout-screener\n  name: rollout-screener\n  parameters:\n    scope:\n      labelSelector: \"{}={}\"\n    revisionGating:\n      mode: max-role\n      requiredRoles: [prefill, decode]\n",
        pdgate_api::labels::DS_NAME,
        plan::SET_NAME
    );
    DEFAULT_CONFIG_YAML.replacen("\nplugins:\n", &entry, 1)
}

/// Layout (b), running.
struct Layout {
    workers: Vec<WorkerHandle>,
    prefill_router: ServerHandle,
    decode_router: ServerHandle,
    coordinator: ServerHandle,
    publisher: Box<dyn Publisher>,
}

impl Layout {
    fn url(&self) -> String {
        format!("http://{}", self.coordinator.addr)
    }

    fn probes(&self) -> Probes {
        let c = &self.coordinator.state.metrics.conditional_decode;
        Probes {
            served: c.with_label_values(&["served"]).get(),
            deferred: c.with_label_values(&["deferred"]).get(),
            error: c.with_label_values(&["error"]).get(),
        }
    }
}

/// `(name, ready, terminating)` of every endpoint, sorted.
type Signature = Vec<(String, bool, bool)>;

fn signature_of(router: &ServerHandle) -> Signature {
    let mut s: Signature = router
        .state
        .registry
        .snapshot()
        .endpoints
        .iter()
        .map(|e| {
            let ep = &e.endpoint;
            (ep.name.clone(), ep.ready, ep.terminating)
        })
        .collect();
    s.sort();
    s
}

fn expected_signature(endpoints: Vec<Endpoint>) -> Signature {
    let mut s: Signature = endpoints
        .into_iter()
        .map(|e| (e.name, e.ready, e.terminating))
        .collect();
    s.sort();
    s
}

async fn start(cfg: &RolloutConfig, dir: &Path) -> anyhow::Result<Layout> {
    let pods = plan::pods();
    let specs: Vec<WorkerSpec> = pods
        .iter()
        .map(|p| WorkerSpec {
            name: p.name(),
            role: p.role.to_string(),
            revision: Some(p.revision.to_string()),
            labels: p.labels(),
        })
        .collect();
    let sim = SimConfig {
        speedup: cfg.speedup,
        ..SimConfig::default()
    };
    let workers = publish::spawn_workers(cfg.discovery, specs, sim).await?;
    let addrs = workers
        .iter()
        .map(|w| (w.name().to_string(), w.addr()))
        .collect();
    let publisher = publish::publisher(cfg.discovery, dir, cfg.poll, addrs).await?;
    let yaml = router_config();
    // The routers trust the coordinator by a shared token, as across a network (any caller
    // on loopback without it is an ordinary client).
    let trust = pdgate_core::trust::TrustedCallers::new(Vec::new(), Some(&session_token()))
        .expect("a generated token is valid");
    let role_router = || -> anyhow::Result<_> {
        let trust = trust.clone();
        let source = publisher.source()?;
        Ok(fleet::router_with(Vec::new(), &yaml, move |o| {
            o.endpoints = source;
            o.scrape_interval = Duration::from_millis(50);
            o.trust = trust;
        }))
    };
    let prefill_router = role_router()?.await?;
    let decode_router = role_router()?.await?;
    let routers = PhaseRouters::new(
        &prefill_router.addr.to_string(),
        &decode_router.addr.to_string(),
        true,
    );
    let coordinator = fleet::router_with(Vec::new(), DEFAULT_CONFIG_YAML, |o| {
        o.routers = Some(routers);
        o.trust = trust.clone();
    })
    .await?;
    Ok(Layout {
        workers,
        prefill_router,
        decode_router,
        coordinator,
        publisher,
    })
}

fn ms_since(t0: Instant) -> f64 {
    t0.elapsed().as_secs_f64() * 1_000.0
}

/// Both routers' signatures.
fn signatures(l: &Layout) -> [Signature; 2] {
    [
        signature_of(&l.prefill_router),
        signature_of(&l.decode_router),
    ]
}

/// Polls both routers (every ms, up to `timeout`) until each holds `want`; `before` is what
/// each held when the step was published. Fills in the moment each first held something
/// else (a step published as several pod updates passes through intermediate lists) and
/// the moment each held `want` (ms since `t0`), `None` for a router that did not in time.
async fn wait_applied(
    l: &Layout,
    before: &[Signature; 2],
    want: &Signature,
    t0: Instant,
    timeout: Duration,
    timing: &mut StepTiming,
) {
    let deadline = Instant::now() + timeout;
    loop {
        for (i, now) in signatures(l).iter().enumerate() {
            if timing.changed[i].is_none() && (now != &before[i] || now == want) {
                timing.changed[i] = Some(ms_since(t0));
            }
            if timing.applied[i].is_none() && now == want {
                timing.applied[i] = Some(ms_since(t0));
            }
        }
        if timing.applied.iter().all(Option::is_some) || Instant::now() >= deadline {
            return;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

fn item(prompt: Vec<u32>, max_tokens: u32) -> WorkItem {
    WorkItem {
        at_ms: 0,
        prompt: WorkPrompt::Tokens(prompt),
        max_tokens,
        conversation: None,
    }
}

fn outcome(r: RequestRecord, trickle: bool, sent_ms: f64, answered_ms: f64) -> Outcome {
    Outcome {
        trickle,
        step: 0,
        sent_ms,
        answered_ms,
        ok: r.ok,
        status: r.status,
        error: r.error,
        prefill_revision: r.served.prefill_revision,
        decode_revision: r.served.decode_revision,
        pd_mode: r.served.pd_mode,
    }
}

/// Stops the trickle loops when dropped (also when the scenario fails half-way).
struct StopOnDrop(Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

/// One trickle loop: one long request at a time through the coordinator, `gap` apart, until
/// `stop`.
async fn trickle(
    url: String,
    cfg: RolloutConfig,
    seed: u64,
    t0: Instant,
    stop: Arc<AtomicBool>,
) -> anyhow::Result<Vec<Outcome>> {
    let mut gen = PromptGen::new(seed);
    let mut rc = ReplayConfig::new(url, pdgate_sim::config::DEFAULT_MODEL);
    rc.speedup = 0.0;
    rc.concurrency = 1;
    let mut out = Vec::new();
    while !stop.load(Ordering::Acquire) {
        let sent = ms_since(t0);
        let rep = replay(&rc, vec![item(gen.next_prompt(), cfg.trickle_max_tokens)]).await?;
        let answered = ms_since(t0);
        out.extend(
            rep.records
                .into_iter()
                .map(|r| outcome(r, true, sent, answered)),
        );
        tokio::time::sleep(cfg.trickle_gap).await;
    }
    Ok(out)
}

/// Runs the scenario in `dir` and returns what was observed.
pub async fn observe(cfg: &RolloutConfig, dir: &Path) -> anyhow::Result<Observed> {
    anyhow::ensure!(!cfg.steps.is_empty(), "the rollout has no steps");
    let mut l = start(cfg, dir).await?;
    let listings = plan::listings(&cfg.steps);
    let t0 = Instant::now();
    let stop = StopOnDrop(Arc::new(AtomicBool::new(false)));
    let mut trickles = Vec::new();
    let mut gen = PromptGen::new(cfg.seed);
    let mut rc = ReplayConfig::new(l.url(), pdgate_sim::config::DEFAULT_MODEL);
    rc.speedup = 0.0;
    rc.concurrency = cfg.concurrency;
    let mut timings = Vec::with_capacity(cfg.steps.len());
    let mut probes = Vec::with_capacity(cfg.steps.len());
    let mut outcomes = Vec::new();
    let mut last_probes = l.probes();
    for (k, (step, listing)) in cfg.steps.iter().zip(&listings).enumerate() {
        let now = l.probes();
        if k > 0 {
            probes.push(now.since(&last_probes));
        }
        last_probes = now;
        let before = signatures(&l);
        let mut timing = StepTiming {
            write_ms: ms_since(t0),
            ..StepTiming::default()
        };
        let want = expected_signature(l.publisher.publish(listing)?);
        wait_applied(&l, &before, &want, t0, cfg.apply_timeout, &mut timing).await;
        timings.push(timing);
        if k == 0 {
            // The trickle starts once the first list is in place (before it, no endpoint is
            // known at all).
            for i in 0..cfg.trickle_loops {
                trickles.push(tokio::spawn(trickle(
                    l.url(),
                    cfg.clone(),
                    cfg.seed ^ (0x7121_c4e0 + i as u64),
                    t0,
                    stop.0.clone(),
                )));
            }
        }
        let n = plan::requests_for(
            cfg.requests_per_step,
            step.expected_b_share(),
            cfg.share_tolerance,
        );
        let work: Vec<WorkItem> = (0..n)
            .map(|_| item(gen.next_prompt(), cfg.max_tokens))
            .collect();
        let sent = ms_since(t0);
        let rep = replay(&rc, work).await?;
        let answered = ms_since(t0);
        outcomes.extend(rep.records.into_iter().map(|r| Outcome {
            step: k,
            ..outcome(r, false, sent, answered)
        }));
        let end = timing.write_ms + cfg.min_step.as_secs_f64() * 1_000.0;
        if end > answered {
            tokio::time::sleep(Duration::from_secs_f64((end - answered) / 1_000.0)).await;
        }
    }
    drop(stop);
    for t in trickles {
        outcomes.extend(t.await??);
    }
    probes.push(l.probes().since(&last_probes));
    let mut handoff_rejections = BTreeMap::new();
    for w in &l.workers {
        for (reason, n) in w.stats().handoff_rejections {
            *handoff_rejections.entry(reason).or_insert(0) += n;
        }
    }
    Ok(Observed {
        discovery: cfg.discovery,
        steps: cfg.steps.clone(),
        timings,
        probes,
        outcomes,
        handoff_rejections,
        end_ms: ms_since(t0),
    })
}

/// A fresh directory under the system temp dir for the endpoints file.
pub fn temp_dir() -> anyhow::Result<PathBuf> {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    let dir = std::env::temp_dir().join(format!("pdgate-rollout-{}-{nanos}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

/// A random token for one scenario run (32 hex digits).
fn session_token() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}
