//! Kubernetes discovery helpers: the real `pdgate serve` binary run against the stand-in API
//! server (`pdgate_sim::kube_api::KubeApi`) through a kubeconfig, as a user runs it.

use super::process::{self, Served, TempPath};
use pdgate_sim::kube_api::KubeApi;

/// Starts `pdgate serve ARGS…` with `KUBECONFIG` naming `api` (namespace `namespace`).
pub fn serve(api: &KubeApi, namespace: &str, args: &[&str]) -> Served {
    let kubeconfig = TempPath::write("kubeconfig", &api.kubeconfig(namespace));
    let path = kubeconfig.path().display().to_string();
    process::serve(args, &[("KUBECONFIG", &path)], vec![kubeconfig])
}
