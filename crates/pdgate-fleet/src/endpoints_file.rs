//! The endpoints file and the `--endpoint` flag: their format, the checks on addresses,
//! labels and names, and the watcher that re-reads the file when it changes.
//!
//! File format:
//! ```yaml
//! endpoints:
//! - name: prefill-0              # optional; defaults to the address
//!   address: 10.0.0.5:8000       # host:port of the vLLM server
//!   labels: {llm-d.ai/role: prefill, disaggregatedset.x-k8s.io/revision: rev-a}
//!   ready: true                  # optional, default true
//!   terminating: false           # optional, default false
//!   dp_size: 2                   # optional: a pod with 2 data-parallel ranks becomes the
//!                                # endpoints prefill-0-rank-0 and prefill-0-rank-1
//! ```

use crate::source::{DiscoveryError, EndpointWatcher};
use futures_util::future::BoxFuture;
use pdgate_api::{labels, Role};
use pdgate_scheduler::Endpoint;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EndpointsFile {
    endpoints: Vec<EndpointEntry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EndpointEntry {
    name: Option<String>,
    address: String,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    #[serde(default = "yes")]
    ready: bool,
    #[serde(default)]
    terminating: bool,
    dp_rank: Option<u32>,
    /// Data-parallel ranks of the pod: it becomes `dp_size` endpoints `<name>-rank-<i>`.
    dp_size: Option<u32>,
}

fn yes() -> bool {
    true
}

/// Largest `dp_size` of one endpoints-file entry (each rank is an endpoint).
pub const MAX_DP_SIZE: u32 = 1024;

/// Most endpoints one endpoints file may describe, counted after `dp_size` expansion (an
/// entry with `dp_size: n` counts n). A file over it is refused whole (the previous list stays
/// applied), before any rank is built: 10,000 is the fleet the file-size limit
/// ([`crate::file_read::MAX_ENDPOINTS_FILE_BYTES`]) is sized for and the scraper is built to
/// read ([`crate::scrape::MAX_CONCURRENT_SCRAPES`]), while entries × `dp_size` alone let a
/// 56 KB file ask for a million endpoints (about 2 GB of endpoint state).
pub const MAX_ENDPOINTS_PER_FILE: u64 = 10_000;

/// Parses an endpoints file. Errors name the file, the line (YAML errors) or the entry; a
/// file that describes more than [`MAX_ENDPOINTS_PER_FILE`] endpoints (after `dp_size`
/// expansion) is refused with their count, before any endpoint is built.
pub fn parse_endpoints_yaml(text: &str, source: &str) -> Result<Vec<Endpoint>, DiscoveryError> {
    let err = |message: String| DiscoveryError {
        source_name: source.to_string(),
        message,
    };
    crate::file_read::check_nesting(text).map_err(err)?;
    let file: EndpointsFile = serde_yaml_ng::from_str(text)
        .map_err(|e| err(pdgate_api::serde_text::plain_expectation(&e.to_string()).into()))?;
    // Ranks of each entry, checked and counted before any endpoint is built.
    let mut ranks = Vec::with_capacity(file.endpoints.len());
    for (i, e) in file.endpoints.iter().enumerate() {
        let name = e.name.as_deref().unwrap_or(&e.address);
        let entry_err = |m: &str| err(format!("endpoints[{i}] ({name}): {m}"));
        ranks.push(match (e.dp_size, e.dp_rank) {
            (Some(_), Some(_)) => return Err(entry_err("give `dp_size` or `dp_rank`, not both")),
            (Some(0), _) => return Err(entry_err("`dp_size` must be at least 1")),
            (Some(n), _) if n > MAX_DP_SIZE => {
                return Err(entry_err(&format!("`dp_size` {n} is over {MAX_DP_SIZE}")))
            }
            (Some(n), None) => Some(n),
            (None, _) => None,
        });
    }
    let total: u64 = ranks.iter().map(|n| u64::from(n.unwrap_or(1))).sum();
    if total > MAX_ENDPOINTS_PER_FILE {
        return Err(err(format!(
            "{total} endpoints ({} entries, counting each `dp_size` rank), over the limit of \
             {MAX_ENDPOINTS_PER_FILE} per endpoints file",
            file.endpoints.len()
        )));
    }
    let mut out = Vec::with_capacity(total as usize);
    for (i, (e, dp_size)) in file.endpoints.into_iter().zip(ranks).enumerate() {
        let name = e.name.unwrap_or_else(|| e.address.clone());
        let entry_err = |m: String| err(format!("endpoints[{i}] ({name}): {m}"));
        // A pod with N data-parallel ranks is N endpoints `<pod>-rank-<i>` (design.md §1).
        let ranks: Vec<(String, Option<u32>)> = match dp_size {
            Some(n) => (0..n)
                .map(|r| (pdgate_api::labels::rank_endpoint_name(&name, r), Some(r)))
                .collect(),
            None => vec![(name.clone(), e.dp_rank)],
        };
        for (rank_name, rank) in ranks {
            let mut ep = endpoint(&rank_name, &e.address, e.labels.clone()).map_err(entry_err)?;
            ep.ready = e.ready;
            ep.terminating = e.terminating;
            ep.dp_rank = rank;
            out.push(ep);
        }
    }
    check_unique(&out).map_err(err)?;
    Ok(out)
}

/// Parses one `--endpoint` flag: `ADDR[,key=value...]`. `name=`, `role=` (→
/// `llm-d.ai/role`) and `revision=` (→ `disaggregatedset.x-k8s.io/revision`) are shorthands;
/// any other key must be a prefixed label key (`example.com/zone=z1`), so that a typo such as
/// `rol=decode` is an error rather than a silent label.
///
/// Errors: no `host:port` address, a key given twice, an empty value, an unknown shorthand.
pub fn parse_endpoint_flag(flag: &str) -> Result<Endpoint, DiscoveryError> {
    let err = |message: String| DiscoveryError {
        source_name: "--endpoint".into(),
        message: format!("{flag:?}: {message}"),
    };
    let mut parts = flag.split(',');
    let address = parts.next().unwrap_or_default().trim().to_string();
    let mut name = None;
    let mut labels = BTreeMap::new();
    for kv in parts {
        let (k, v) = kv
            .split_once('=')
            .ok_or_else(|| err(format!("expected key=value, got {kv:?}")))?;
        let (k, v) = (k.trim(), v.trim());
        if v.is_empty() {
            return Err(err(format!("`{k}` has an empty value")));
        }
        let key = match k {
            "name" => {
                if name.replace(v.to_string()).is_some() {
                    return Err(err("`name` given twice".into()));
                }
                continue;
            }
            "role" => labels::ROLE,
            "revision" => labels::DS_REVISION,
            other if other.contains('/') => other,
            other => {
                return Err(err(format!(
                    "unknown key `{other}` (expected name, role, revision, or a prefixed label key such as example.com/zone)"
                )))
            }
        };
        if labels.insert(key.to_string(), v.to_string()).is_some() {
            return Err(err(format!("`{k}` given twice")));
        }
    }
    let name = name.unwrap_or_else(|| address.clone());
    endpoint(&name, &address, labels).map_err(err)
}

/// Checks that `address` is `host:port` (no scheme, no path): the one rule for endpoint
/// and router addresses.
///
/// Errors: a message naming the address.
pub fn check_address(address: &str) -> Result<(), String> {
    let bad = || format!("address {address:?} must be host:port (no scheme, no path)");
    let (host, port) = address.rsplit_once(':').ok_or_else(bad)?;
    if host.is_empty() || host.contains('/') || port.parse::<u16>().is_err() {
        return Err(bad());
    }
    Ok(())
}

/// Kubernetes label value syntax (≤ 63 characters; alphanumerics, `-`, `_`, `.` inside;
/// alphanumeric at both ends; empty allowed), plus: the revision label must not be empty
/// (a revision travels between hops in a header, where an empty value reads as absent).
fn check_label_value(key: &str, v: &str) -> Result<(), String> {
    let ok_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    let ends_ok = v.is_empty()
        || (v.starts_with(|c: char| c.is_ascii_alphanumeric())
            && v.ends_with(|c: char| c.is_ascii_alphanumeric()));
    if v.len() > 63 || !v.chars().all(ok_char) || !ends_ok {
        return Err(format!(
            "label {key}: value {v:?} is not a valid label value (≤ 63 characters: \
             alphanumerics, '-', '_', '.', starting and ending alphanumeric)"
        ));
    }
    if v.is_empty() && key == labels::DS_REVISION {
        return Err(format!("label {key}: the revision must not be empty"));
    }
    Ok(())
}

fn endpoint(
    name: &str,
    address: &str,
    labels: BTreeMap<String, String>,
) -> Result<Endpoint, String> {
    check_address(address)?;
    for (k, v) in &labels {
        check_label_value(k, v)?;
    }
    if name.trim().is_empty() {
        return Err("endpoint name is empty".into());
    }
    if let Some(r) = labels.get(labels::ROLE) {
        r.parse::<Role>()
            .map_err(|e| format!("label {}: {e}", labels::ROLE))?;
    }
    Ok(Endpoint::new(name, address, labels))
}

pub(crate) fn check_unique(eps: &[Endpoint]) -> Result<(), String> {
    let mut seen = std::collections::HashSet::new();
    for e in eps {
        if !seen.insert(e.name.as_str()) {
            return Err(format!("endpoint name {:?} appears twice", e.name));
        }
    }
    Ok(())
}

/// Log site of an unreadable endpoints file (one line per second at most).
static ENDPOINTS_FILE_LOG: crate::log_limit::Site = crate::log_limit::Site::new(0);

/// Watches a YAML endpoints file: re-reads it every `poll` and yields it when its content
/// changed.
pub(crate) struct FileWatcher {
    pub(crate) path: PathBuf,
    pub(crate) poll: Duration,
    /// Content of the last yielded (or rejected) version; `None` before the first read.
    pub(crate) last: Option<String>,
}

impl EndpointWatcher for FileWatcher {
    fn name(&self) -> String {
        self.path.display().to_string()
    }

    fn next(&mut self) -> BoxFuture<'_, Option<Result<Vec<Endpoint>, DiscoveryError>>> {
        Box::pin(async move {
            let name = self.name();
            loop {
                if self.last.is_some() {
                    tokio::time::sleep(self.poll).await;
                }
                let path = self.path.clone();
                let read = tokio::task::spawn_blocking(move || {
                    crate::file_read::read_regular_file(
                        &path,
                        crate::file_read::MAX_ENDPOINTS_FILE_BYTES,
                    )
                })
                .await
                .unwrap_or_else(|e| Err(e.to_string()));
                let text = match read {
                    Ok(t) => t,
                    // At start the flag is named: the file comes from `--endpoints`.
                    Err(message) if self.last.is_none() => {
                        return Some(Err(DiscoveryError {
                            source_name: format!("--endpoints: {name}"),
                            message: format!("cannot read the file: {message}"),
                        }))
                    }
                    Err(e) => {
                        if crate::log_limit::allow(&ENDPOINTS_FILE_LOG) {
                            tracing::error!(file = %name, error = %e, "endpoints file unreadable");
                        }
                        continue;
                    }
                };
                if self.last.as_deref() == Some(text.as_str()) {
                    continue;
                }
                let parsed = parse_endpoints_yaml(&text, &name);
                self.last = Some(text);
                return Some(parsed);
            }
        })
    }
}

#[cfg(test)]
#[path = "endpoints_file_tests.rs"]
mod tests;
