//! Every manifest under `deploy/` decodes into its k8s-openapi type, and nothing in it is
//! lost on the way (a misspelt field would be silently dropped by the decoder, so the
//! decoded object is encoded again and compared with the file).

use k8s_openapi::api::core::v1::ServiceAccount;
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

#[test]
fn every_manifest_is_a_valid_kubernetes_object() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy");
    let mut files = Vec::new();
    yaml_files(&root, &mut files);
    let mut checked = 0;
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        for (i, doc) in serde_yaml_ng::Deserializer::from_str(&text).enumerate() {
            let doc = serde_json::Value::deserialize(doc)
                .unwrap_or_else(|e| panic!("{}: document {i}: {e}", file.display()));
            if doc.is_null() || file.file_name().is_some_and(|n| n == "kustomization.yaml") {
                continue;
            }
            let kind = doc["kind"].as_str().unwrap_or_default().to_string();
            let checked_as = match kind.as_str() {
                "ServiceAccount" => round_trips::<ServiceAccount>(&doc),
                "Role" => round_trips::<Role>(&doc),
                "RoleBinding" => round_trips::<RoleBinding>(&doc),
                other => Err(format!("no type for kind {other:?}: add it to this test")),
            };
            if let Err(e) = checked_as {
                panic!("{}: document {i} ({kind}): {e}", file.display());
            }
            checked += 1;
        }
    }
    assert!(
        checked >= 3,
        "found only {checked} manifests under {}",
        root.display()
    );
}

use serde::Deserialize;
