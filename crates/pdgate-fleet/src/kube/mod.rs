//! Kubernetes discovery through kube-rs: an `InferencePool` and its pods ([`pool`],
//! [`pods`], [`watch`]).
//!
//! Permissions (least privilege, one namespace): `get`, `list`, `watch` on `pods` and on
//! `inferencepools` of the pool's group (`deploy/` has the Role).

pub mod pods;
pub mod pool;
pub mod watch;

pub use watch::{KubeWatcher, Target};

use crate::source::DiscoveryError;

/// A client from the environment, as kubectl finds its cluster: `KUBECONFIG` or
/// `~/.kube/config`, else the in-cluster service account.
///
/// Errors: no configuration found, or one that cannot be used (the message says which).
pub async fn client_from_env() -> Result<kube::Client, DiscoveryError> {
    kube::Client::try_default()
        .await
        .map_err(|e| DiscoveryError {
            source_name: "kubernetes".into(),
            message: format!(
                "no usable cluster configuration (KUBECONFIG, ~/.kube/config or in-cluster): {e}"
            ),
        })
}
