//! Fleet plans: which workers to start on which ports, from the CLI flags or a YAML file.
//!
//! ```yaml
//! workers:              # or the list alone, without the `workers:` key
//! - name: prefill       # optional; unnamed workers are called <role>-<k>
//!   role: prefill
//!   revision: rev-a     # optional
//!   labels: {zone: a}   # optional
//!   count: 2            # optional (default 1); count > 1 names them <name>-0, <name>-1, …
//!   port: 9000          # optional; the entry's workers take port, port+1, …
//! - role: decode
//!   revision: rev-a
//!   count: 4            # no port: the next free ones from --port on
//! ```

use crate::config::WorkerSpec;
use pdgate_api::Role;
use serde::Deserialize;
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// One worker to start: identity and port (0 = ephemeral).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedWorker {
    /// Identity.
    pub spec: WorkerSpec,
    /// Port to bind.
    pub port: u16,
}

/// One entry of a fleet file.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FleetEntry {
    /// Worker name (or name stem when `count > 1`).
    #[serde(default)]
    pub name: Option<String>,
    /// Role label.
    pub role: String,
    /// Revision label.
    #[serde(default)]
    pub revision: Option<String>,
    /// Other labels.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Number of identical workers.
    #[serde(default)]
    pub count: Option<usize>,
    /// First port of this entry's workers.
    #[serde(default)]
    pub port: Option<u16>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum FleetFile {
    List(Vec<FleetEntry>),
    Map { workers: Vec<FleetEntry> },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FleetMap {
    #[allow(dead_code)]
    workers: Vec<FleetEntry>,
}

/// Parses a fleet file's text.
pub fn parse_fleet(yaml: &str) -> anyhow::Result<Vec<FleetEntry>> {
    match serde_yaml_ng::from_str::<FleetFile>(yaml) {
        Ok(FleetFile::List(w)) | Ok(FleetFile::Map { workers: w }) => Ok(w),
        Err(_) => {
            // Re-parse strictly to get an error that names the line and field.
            let e = match serde_yaml_ng::from_str::<serde_yaml_ng::Value>(yaml) {
                Ok(serde_yaml_ng::Value::Sequence(_)) => {
                    serde_yaml_ng::from_str::<Vec<FleetEntry>>(yaml).err()
                }
                Ok(_) => serde_yaml_ng::from_str::<FleetMap>(yaml).err(),
                Err(e) => Some(e),
            };
            Err(anyhow::anyhow!(
                "fleet file: {}",
                e.map_or("expected a list of workers".to_string(), |e| e.to_string())
            ))
        }
    }
}

/// Expands fleet entries into workers; ports without an explicit `port` are taken from
/// `base_port` on (0 = every such worker on an ephemeral port).
pub fn plan_fleet(entries: &[FleetEntry], base_port: u16) -> anyhow::Result<Vec<PlannedWorker>> {
    anyhow::ensure!(!entries.is_empty(), "the fleet has no workers");
    let mut per_role: HashMap<String, usize> = HashMap::new();
    let mut next_port = base_port as u32;
    let mut out = Vec::new();
    for (i, e) in entries.iter().enumerate() {
        let role = canonical_role(&e.role).map_err(|m| anyhow::anyhow!("fleet entry {i}: {m}"))?;
        let count = e.count.unwrap_or(1);
        anyhow::ensure!(count >= 1, "fleet entry {i}: count must be at least 1");
        for k in 0..count {
            let name = match &e.name {
                Some(n) if e.count.unwrap_or(1) > 1 => format!("{n}-{k}"),
                Some(n) => n.clone(),
                None => {
                    let idx = per_role.entry(role.clone()).or_default();
                    *idx += 1;
                    format!("{role}-{}", *idx - 1)
                }
            };
            let port = match e.port {
                Some(p) => p as u32 + k as u32,
                None if base_port == 0 => 0,
                None => {
                    next_port += 1;
                    next_port - 1
                }
            };
            let port = u16::try_from(port)
                .map_err(|_| anyhow::anyhow!("fleet entry {i}: port {port} is over 65535"))?;
            out.push(PlannedWorker {
                spec: WorkerSpec {
                    name,
                    role: role.clone(),
                    revision: e.revision.clone(),
                    labels: e.labels.clone(),
                },
                port,
            });
        }
    }
    let mut names = BTreeSet::new();
    for w in &out {
        anyhow::ensure!(
            names.insert(w.spec.name.as_str()),
            "two workers are named {:?}",
            w.spec.name
        );
    }
    Ok(out)
}

/// Workers from `--workers`, `--role`/`--roles` and `--revision`, named `<role>-<k>`.
pub fn plan_flags(
    workers: Option<usize>,
    role: &str,
    roles: &[String],
    revision: Option<&str>,
    base_port: u16,
) -> anyhow::Result<Vec<PlannedWorker>> {
    let roles: Vec<String> = if roles.is_empty() {
        vec![role.to_string(); workers.unwrap_or(1)]
    } else {
        if let Some(n) = workers {
            anyhow::ensure!(
                n == roles.len(),
                "--workers {n} does not match the {} roles of --roles",
                roles.len()
            );
        }
        roles.to_vec()
    };
    let entries: Vec<FleetEntry> = roles
        .into_iter()
        .map(|role| FleetEntry {
            name: None,
            role,
            revision: revision.map(str::to_string),
            labels: BTreeMap::new(),
            count: None,
            port: None,
        })
        .collect();
    plan_fleet(&entries, base_port)
}

/// The canonical label value of a role (`both` → `prefill-decode`).
pub fn canonical_role(role: &str) -> Result<String, String> {
    role.parse::<Role>()
        .map(|r| r.as_str().to_string())
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fleet_file_expands_names_and_ports() {
        let yaml = r#"
workers:
- name: p
  role: prefill
  revision: rev-a
  labels: {zone: a}
  count: 2
  port: 9100
- role: decode
  revision: rev-a
- role: both
"#;
        let w = plan_fleet(&parse_fleet(yaml).unwrap(), 8000).unwrap();
        let got: Vec<(&str, &str, u16)> = w
            .iter()
            .map(|w| (w.spec.name.as_str(), w.spec.role.as_str(), w.port))
            .collect();
        assert_eq!(
            got,
            vec![
                ("p-0", "prefill", 9100),
                ("p-1", "prefill", 9101),
                ("decode-0", "decode", 8000),
                ("prefill-decode-0", "prefill-decode", 8001)
            ]
        );
        assert_eq!(w[0].spec.labels["zone"], "a");
        assert_eq!(parse_fleet("- role: decode\n").unwrap().len(), 1);
        let err = parse_fleet("workers:\n- role: decode\n  colour: red\n").unwrap_err();
        assert!(err.to_string().contains("unknown field `colour`"), "{err}");
        let err = plan_fleet(&parse_fleet("- role: gpu\n").unwrap(), 0).unwrap_err();
        assert!(err.to_string().contains("unknown role \"gpu\""), "{err}");
    }

    #[test]
    fn flags_give_one_worker_per_role() {
        let w = plan_flags(
            None,
            "prefill-decode",
            &["prefill".into(), "decode".into(), "decode".into()],
            Some("r1"),
            8000,
        )
        .unwrap();
        let names: Vec<_> = w.iter().map(|w| (w.spec.name.as_str(), w.port)).collect();
        assert_eq!(
            names,
            vec![("prefill-0", 8000), ("decode-0", 8001), ("decode-1", 8002)]
        );
        assert_eq!(w[2].spec.revision.as_deref(), Some("r1"));
        assert_eq!(plan_flags(Some(2), "both", &[], None, 0).unwrap().len(), 2);
        assert!(plan_flags(Some(2), "both", &["decode".into()], None, 0).is_err());
    }
}
