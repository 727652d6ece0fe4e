//! The discovery flags both front ends take (`pdgate serve`, `pdgate epp`), with llm-d's EPP
//! names for the Kubernetes ones, and the [`EndpointSource`] they name. Defaults are defined
//! here once.

use crate::endpoints_file::parse_endpoint_flag;
use crate::kube::{pool, Target};
use crate::EndpointSource;
use std::path::PathBuf;
use std::time::Duration;

/// How often the endpoints file is checked for changes.
pub const ENDPOINTS_FILE_POLL: Duration = Duration::from_millis(500);

/// Where endpoints come from: an endpoints file, `--endpoint` flags, an `InferencePool`, or a
/// pod label selector.
#[derive(Debug, Clone, clap::Args)]
pub struct DiscoveryArgs {
    /// Endpoints file (YAML), re-read when it changes.
    #[arg(long, conflicts_with = "endpoint")]
    pub endpoints: Option<PathBuf>,
    /// An endpoint: `HOST:PORT[,name=N][,role=R][,revision=V][,prefix/key=value...]`.
    /// Repeatable.
    #[arg(long)]
    pub endpoint: Vec<String>,
    /// Kubernetes discovery: the `InferencePool` whose pods are the endpoints (llm-d's EPP
    /// flag). The cluster is found as kubectl finds it (`KUBECONFIG`, `~/.kube/config`, or the
    /// in-cluster service account).
    #[arg(long, conflicts_with_all = ["endpoints", "endpoint", "pod_selector"])]
    pub pool_name: Option<String>,
    /// Namespace of the pool and its pods (or of `--pod-selector`'s pods).
    #[arg(long, env = "NAMESPACE", default_value = "default")]
    pub pool_namespace: String,
    /// API group of the pool: `inference.networking.k8s.io` (v1) or
    /// `inference.networking.x-k8s.io` (v1alpha2).
    #[arg(long, default_value = pool::GROUP_V1)]
    pub pool_group: String,
    /// Kubernetes discovery without a pool: the pods matching this label selector (e.g.
    /// `app=vllm,llm-d.ai/inference-serving=true`), serving on `--pod-target-ports`.
    #[arg(long, conflicts_with_all = ["endpoints", "endpoint"])]
    pub pod_selector: Option<String>,
    /// Serving ports of each `--pod-selector` pod, comma-separated, in data-parallel rank
    /// order.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "8000",
        requires = "pod_selector"
    )]
    pub pod_target_ports: Vec<u16>,
}

impl DiscoveryArgs {
    /// The source these flags name; `None` when none was given.
    ///
    /// Errors: a bad `--endpoint`, an unknown `--pool-group`, an empty `--pod-selector`, a
    /// port 0.
    pub fn source(&self) -> anyhow::Result<Option<EndpointSource>> {
        if let Some(path) = &self.endpoints {
            return Ok(Some(EndpointSource::File {
                path: path.clone(),
                poll: ENDPOINTS_FILE_POLL,
            }));
        }
        if !self.endpoint.is_empty() {
            let eps = (self.endpoint.iter())
                .map(|f| parse_endpoint_flag(f))
                .collect::<Result<_, _>>()?;
            return Ok(Some(EndpointSource::Static(eps)));
        }
        if self.pool_name.is_some() || self.pod_selector.is_some() {
            return Ok(Some(EndpointSource::Kubernetes(self.kube_target()?)));
        }
        Ok(None)
    }

    /// The Kubernetes target of `--pool-name` or `--pod-selector`.
    ///
    /// Errors: an unknown `--pool-group`, an empty selector, a port 0.
    fn kube_target(&self) -> anyhow::Result<Target> {
        let namespace = self.pool_namespace.clone();
        if let Some(name) = &self.pool_name {
            pool::version_of(&self.pool_group).map_err(anyhow::Error::msg)?;
            return Ok(Target::Pool {
                name: name.clone(),
                namespace,
                group: self.pool_group.clone(),
            });
        }
        let selector = self.pod_selector.clone().unwrap_or_default();
        if selector.trim().is_empty() {
            anyhow::bail!("--pod-selector is empty (it would select every pod of the namespace)");
        }
        if self.pod_target_ports.contains(&0) {
            anyhow::bail!("--pod-target-ports: 0 is not a port");
        }
        Ok(Target::Selector {
            namespace,
            selector,
            ports: self.pod_target_ports.clone(),
        })
    }
}

/// The message when no discovery flag was given.
pub const NO_ENDPOINTS: &str =
    "no endpoints: pass --endpoints FILE, --endpoint ADDR, --pool-name POOL or \
     --pod-selector SELECTOR";
