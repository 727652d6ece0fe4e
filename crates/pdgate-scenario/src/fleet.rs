//! An in-process P/D fleet: simulator workers and a router, all on 127.0.0.1 ephemeral ports.
//! Used by `pdgate demo` and the end-to-end tests.

use pdgate_scheduler::{Endpoint, Scheduler};
use pdgate_server::{serve_on, EndpointSource, ServeOptions, ServerHandle};
use pdgate_sim::{spawn_fleet, SimConfig, WorkerHandle, WorkerSpec};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// Shape of a local fleet.
#[derive(Debug, Clone)]
pub struct FleetSpec {
    /// Prefill workers (role `prefill`).
    pub prefill: usize,
    /// Decode workers (role `decode`).
    pub decode: usize,
    /// Encode workers (role `encode`), 0 by default.
    pub encode: usize,
    /// Revision label given to every worker, if any.
    pub revision: Option<String>,
    /// Engine settings of every worker.
    pub sim: SimConfig,
    /// Engine metrics scrape interval of the router.
    pub scrape_interval: Duration,
    /// Router request body limit, bytes.
    pub max_body_bytes: usize,
    /// Who the router trusts to send coordinator headers (default: nobody); a test that
    /// uses the fleet's router as a per-role router behind a coordinator sets it.
    pub trust: pdgate_core::trust::TrustedCallers,
}

impl FleetSpec {
    /// `prefill` + `decode` workers, no revision, simulator `speedup`, 50 ms scrapes, the
    /// router's default body limit.
    pub fn new(prefill: usize, decode: usize, speedup: f64) -> Self {
        FleetSpec {
            prefill,
            decode,
            encode: 0,
            revision: None,
            sim: SimConfig {
                speedup,
                ..SimConfig::default()
            },
            scrape_interval: Duration::from_millis(50),
            max_body_bytes: pdgate_server::app::DEFAULT_MAX_BODY_BYTES,
            trust: Default::default(),
        }
    }
}

/// A running local fleet; everything stops when it is dropped.
pub struct LocalFleet {
    /// The simulator workers: prefill, then decode, then encode.
    pub workers: Vec<WorkerHandle>,
    /// The router.
    pub router: ServerHandle,
}

impl LocalFleet {
    /// Base URL of the router, `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.router.addr)
    }

    /// Sum of in-flight bookings over every endpoint of the router.
    pub fn in_flight(&self) -> u32 {
        self.router.state.in_flight_total()
    }
}

/// Worker specs: `prefill-0..`, then `decode-0..`, then `encode-0..`, labeled with
/// `llm-d.ai/role` (and the revision label when given).
pub fn worker_specs(spec: &FleetSpec) -> Vec<WorkerSpec> {
    let mk = |role: &str, i: usize| {
        let mut labels = BTreeMap::new();
        labels.insert(pdgate_api::labels::ROLE.to_string(), role.to_string());
        if let Some(r) = &spec.revision {
            labels.insert(pdgate_api::labels::DS_REVISION.to_string(), r.clone());
        }
        WorkerSpec {
            name: format!("{role}-{i}"),
            role: role.to_string(),
            revision: spec.revision.clone(),
            labels,
        }
    };
    (0..spec.prefill)
        .map(|i| mk("prefill", i))
        .chain((0..spec.decode).map(|i| mk("decode", i)))
        .chain((0..spec.encode).map(|i| mk("encode", i)))
        .collect()
}

/// A router on 127.0.0.1:0 scheduling with `config_yaml` over a fixed endpoint list, with
/// the defaults of [`ServeOptions::new`] changed by `tune`.
///
/// Errors: the config does not load, or the listener cannot be bound.
pub async fn router_with(
    endpoints: Vec<Endpoint>,
    config_yaml: &str,
    tune: impl FnOnce(&mut ServeOptions),
) -> anyhow::Result<ServerHandle> {
    let scheduler = Scheduler::from_yaml(config_yaml, "fleet config")?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let mut opts = ServeOptions::new(Arc::new(scheduler), EndpointSource::Static(endpoints));
    tune(&mut opts);
    Ok(serve_on(listener, opts).await?)
}

/// Starts the workers and a router scheduling with `config_yaml` in front of them.
pub async fn start(spec: &FleetSpec, config_yaml: &str) -> anyhow::Result<LocalFleet> {
    let specs = worker_specs(spec);
    let workers = spawn_fleet(specs.clone(), spec.sim.clone(), "127.0.0.1", 0).await?;
    let endpoints = specs
        .iter()
        .zip(&workers)
        .map(|(s, w)| Endpoint::new(s.name.clone(), w.addr().to_string(), s.labels.clone()))
        .collect();
    let router = router_with(endpoints, config_yaml, |opts| {
        opts.scrape_interval = spec.scrape_interval;
        opts.max_body_bytes = spec.max_body_bytes;
        opts.trust = spec.trust.clone();
    })
    .await?;
    let fleet = LocalFleet { workers, router };
    fleet.wait_for_models().await;
    Ok(fleet)
}

impl LocalFleet {
    /// Waits (up to 5 s) until the router has scraped every endpoint's model list, so that a first
    /// request is not judged against an empty model set.
    pub async fn wait_for_models(&self) {
        wait_for_models(&self.router).await;
    }
}

/// Waits (up to 5 s) until `router` has scraped every endpoint's model list; returns either
/// way (a router whose endpoints never answer is left to fail on its first request).
pub async fn wait_for_models(router: &ServerHandle) {
    for _ in 0..500 {
        let snap = router.state.registry.snapshot();
        if snap.endpoints.iter().all(|e| e.load.models().is_some()) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
