//! Where endpoints come from: a static list (`--endpoint` flags), the endpoints file
//! ([`crate::endpoints_file`], re-read when it changes), Kubernetes (an `InferencePool` and
//! its pods: [`crate::kube`]) or any [`EndpointWatcher`]; [`start`] applies them to an
//! [`EndpointRegistry`].

use crate::endpoints_file::{check_unique, FileWatcher};
use crate::registry::EndpointRegistry;
pub use crate::source::{DiscoveryError, EndpointWatcher};
use pdgate_scheduler::Endpoint;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// Where endpoints come from.
#[derive(Debug)]
pub enum EndpointSource {
    /// A YAML file, polled for changes every `poll` interval.
    File {
        /// Path of the file.
        path: PathBuf,
        /// How often its modification time and size are checked.
        poll: Duration,
    },
    /// A fixed list (from `--endpoint` flags or tests).
    Static(Vec<Endpoint>),
    /// Any other watched source.
    Watch(Box<dyn EndpointWatcher>),
    /// A Kubernetes `InferencePool` or pod selector, through the cluster configuration of
    /// the environment ([`crate::kube::client_from_env`]). Unlike the others, the
    /// start does not wait for its first list: the server comes up not ready (`/health`
    /// 503 "no endpoints known") until the first full list of pods is applied.
    Kubernetes(crate::kube::Target),
}

/// Applies `source` to `registry`: once for a static list; for a watched source, its first
/// list now (an error there fails the start) and every later list until the returned task
/// is aborted (a list that cannot be used keeps the previous endpoints and is logged).
/// In-flight requests are never dropped: loads are carried over by endpoint name.
pub async fn start(
    source: EndpointSource,
    registry: Arc<EndpointRegistry>,
) -> Result<Option<tokio::task::JoinHandle<()>>, DiscoveryError> {
    let mut watcher: Box<dyn EndpointWatcher> = match source {
        EndpointSource::Static(eps) => {
            check_unique(&eps).map_err(|message| DiscoveryError {
                source_name: "--endpoint".into(),
                message,
            })?;
            registry.apply(eps);
            return Ok(None);
        }
        EndpointSource::File { path, poll } => Box::new(FileWatcher {
            path,
            poll,
            last: None,
        }),
        EndpointSource::Watch(w) => w,
        EndpointSource::Kubernetes(target) => {
            let client = crate::kube::client_from_env().await?;
            let watcher = crate::kube::KubeWatcher::new(client, target)?;
            return Ok(Some(tokio::spawn(follow(Box::new(watcher), registry))));
        }
    };
    match watcher.next().await {
        Some(first) => registry.apply(first?),
        None => return Ok(None),
    }
    Ok(Some(tokio::spawn(follow(watcher, registry))))
}

/// Applies every later list of `watcher` to `registry` until the watch ends (a list that
/// cannot be used keeps the previous endpoints and is logged).
async fn follow(mut watcher: Box<dyn EndpointWatcher>, registry: Arc<EndpointRegistry>) {
    while let Some(next) = watcher.next().await {
        match next {
            Ok(eps) => {
                let ready = eps.iter().filter(|e| e.schedulable()).count();
                tracing::info!(source = %watcher.name(), endpoints = eps.len(), ready, "endpoints applied");
                if let Err(message) = check_unique(&eps) {
                    tracing::error!(source = %watcher.name(), %message, "endpoint list rejected; keeping the previous endpoints");
                    continue;
                }
                registry.apply(eps);
            }
            Err(e) => {
                tracing::error!(error = %e, "endpoint list rejected; keeping the previous endpoints")
            }
        }
    }
}
