//! How a step's endpoint list reaches the two routers: the one thing that differs between
//! the rollout on the endpoints file and on Kubernetes discovery ([`Discovery`]). Everything
//! else — the steps, the traffic, the checks — is the same scenario.
//!
//! - [`Discovery::File`]: simulators on `127.0.0.1`, each on its own port; each step rewrites
//!   one endpoints YAML file that both routers poll ([`FilePublisher`]).
//! - [`Discovery::Kubernetes`]: simulators as pods, each on its own loopback address and one
//!   shared port; each step becomes pod updates in the stand-in API server, which both
//!   routers watch through kube-rs ([`super::kube::KubePublisher`]).

use super::plan::{Listing, Pod};
use pdgate_fleet::EndpointSource;
use pdgate_scheduler::Endpoint;
use pdgate_sim::{spawn_fleet, spawn_pod_fleet, SimConfig, WorkerHandle, WorkerSpec};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Where the routers get their endpoints from (`pdgate demo --rollout --discovery …`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Discovery {
    /// One endpoints YAML file, rewritten at each step and polled by both routers.
    #[default]
    File,
    /// An `InferencePool` and its pods in a stand-in Kubernetes API server, watched by both
    /// routers through kube-rs (list/watch); each step is a set of pod updates.
    Kubernetes,
}

impl Discovery {
    /// What one step publishes, for check names and the table's note ("file", "pod
    /// updates").
    pub fn step_change(self) -> &'static str {
        match self {
            Discovery::File => "file",
            Discovery::Kubernetes => "step's pod updates",
        }
    }

    /// The changes themselves, plural ("file changes", "pod updates").
    pub fn changes(self) -> &'static str {
        match self {
            Discovery::File => "file changes",
            Discovery::Kubernetes => "pod updates",
        }
    }

    /// What the routers are said to hold when they disagree ("files", "pod lists").
    pub fn lists(self) -> &'static str {
        match self {
            Discovery::File => "files",
            Discovery::Kubernetes => "pod lists",
        }
    }
}

/// Publishes each step's endpoint list where the routers read it.
pub trait Publisher: Send {
    /// The endpoint source of one router (called once for each).
    ///
    /// Errors: the source cannot be built (e.g. a watcher's client).
    fn source(&self) -> anyhow::Result<EndpointSource>;

    /// Publishes one step's listing; returns the endpoints (names, readiness, terminating)
    /// the routers must end up holding, as their discovery reads them.
    ///
    /// Errors: the listing names a pod without a simulator, or it cannot be written.
    fn publish(&mut self, listing: &[(Pod, Listing)]) -> anyhow::Result<Vec<Endpoint>>;
}

/// Starts the simulators as `discovery` needs them: for the file, each on `127.0.0.1` and
/// its own ephemeral port; for Kubernetes, as pods ([`spawn_pod_fleet`]).
///
/// Errors: a listener cannot be bound or a worker does not start.
pub async fn spawn_workers(
    discovery: Discovery,
    specs: Vec<WorkerSpec>,
    sim: SimConfig,
) -> anyhow::Result<Vec<WorkerHandle>> {
    match discovery {
        Discovery::File => spawn_fleet(specs, sim, "127.0.0.1", 0).await,
        Discovery::Kubernetes => Ok(spawn_pod_fleet(specs, sim).await?.0),
    }
}

/// The publisher of `discovery`, for simulators at `addrs` (by pod name); the file lives in
/// `dir`, polled every `poll`.
///
/// Errors: the file cannot be written, or the stand-in API server does not start.
pub async fn publisher(
    discovery: Discovery,
    dir: &Path,
    poll: Duration,
    addrs: BTreeMap<String, SocketAddr>,
) -> anyhow::Result<Box<dyn Publisher>> {
    Ok(match discovery {
        Discovery::File => Box::new(FilePublisher::new(dir, poll, addrs)?),
        Discovery::Kubernetes => Box::new(super::kube::KubePublisher::start(addrs).await?),
    })
}

/// The address of `name` in `addrs`.
///
/// Errors: no simulator of that name.
pub(crate) fn addr_of(
    addrs: &BTreeMap<String, SocketAddr>,
    name: &str,
) -> anyhow::Result<SocketAddr> {
    addrs
        .get(name)
        .copied()
        .ok_or_else(|| anyhow::anyhow!("pod {name} has no simulator"))
}

/// One endpoints file (pdgate-server discovery format), rewritten atomically at each step.
pub struct FilePublisher {
    file: PathBuf,
    poll: Duration,
    addrs: BTreeMap<String, SocketAddr>,
}

impl FilePublisher {
    /// Creates `dir/endpoints.yaml` with no endpoints.
    ///
    /// Errors: the file cannot be written.
    pub fn new(
        dir: &Path,
        poll: Duration,
        addrs: BTreeMap<String, SocketAddr>,
    ) -> anyhow::Result<Self> {
        let file = dir.join("endpoints.yaml");
        std::fs::write(&file, "endpoints: []\n")?;
        Ok(FilePublisher { file, poll, addrs })
    }
}

impl Publisher for FilePublisher {
    fn source(&self) -> anyhow::Result<EndpointSource> {
        Ok(EndpointSource::File {
            path: self.file.clone(),
            poll: self.poll,
        })
    }

    /// Writes the step's file atomically (the routers never read half a file).
    fn publish(&mut self, listing: &[(Pod, Listing)]) -> anyhow::Result<Vec<Endpoint>> {
        for (pod, _) in listing {
            addr_of(&self.addrs, &pod.name())?;
        }
        let yaml = super::plan::endpoints_yaml(listing, &|name| {
            self.addrs
                .get(name)
                .map(ToString::to_string)
                .unwrap_or_default()
        });
        let expected = pdgate_fleet::endpoints_file::parse_endpoints_yaml(&yaml, "rollout step")?;
        let tmp = self.file.with_extension("yaml.tmp");
        std::fs::write(&tmp, &yaml)?;
        std::fs::rename(&tmp, &self.file)?;
        Ok(expected)
    }
}
