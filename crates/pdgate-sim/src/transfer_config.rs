//! `--kv-transfer-config` and `--ec-transfer-config`: vLLM's own flags (a JSON
//! `KVTransferConfig` / `ECTransferConfig`) with vLLM's key names, parsed strictly: an unknown
//! key, a value of the wrong type or an unsupported connector is an error naming the key.
//!
//! Connectors the simulator speaks:
//! - KV: `NixlConnector` (the default without the flag: leases pulled over `/kv/pull`, see
//!   [`crate::handoff`]) and `ExampleConnector` (older name `SharedStorageConnector`: prompt KV
//!   stored in and loaded from `kv_connector_extra_config.shared_storage_path`, see
//!   [`crate::storage`]).
//! - EC: `ECExampleConnector` (older name `ECSharedStorageConnector`: encoder output stored in
//!   and loaded from `ec_connector_extra_config.shared_storage_path`). Without the flag, encoder
//!   output is handed over by `ec_transfer_params` pulls ([`crate::ec_handoff`]).
//!
//! Source: vLLM `vllm/config/kv_transfer.py` (`KVTransferConfig`), `vllm/config/ec_transfer.py`
//! (`ECTransferConfig`), the connectors' `shared_storage_path` (default `/tmp`).

use serde_json::{Map, Value};
use std::path::{Path, PathBuf};

/// vLLM's default `shared_storage_path` of ExampleConnector and ECExampleConnector.
pub const DEFAULT_SHARED_STORAGE_PATH: &str = "/tmp";

/// What a value of a config key must be.
#[derive(Clone, Copy)]
enum Kind {
    Str,
    Num,
    Int,
    Bool,
    Obj,
}

/// Keys of vLLM's `KVTransferConfig` and their types (null is accepted for every key).
const KV_KEYS: &[(&str, Kind)] = &[
    ("kv_connector", Kind::Str),
    ("engine_id", Kind::Str),
    ("kv_buffer_device", Kind::Str),
    ("kv_buffer_size", Kind::Num),
    ("kv_role", Kind::Str),
    ("kv_rank", Kind::Int),
    ("kv_parallel_size", Kind::Int),
    ("kv_ip", Kind::Str),
    ("kv_port", Kind::Int),
    ("kv_connector_extra_config", Kind::Obj),
    ("kv_connector_module_path", Kind::Str),
    ("enable_permute_local_kv", Kind::Bool),
    ("kv_load_failure_policy", Kind::Str),
];

/// Keys of vLLM's `ECTransferConfig` and their types.
const EC_KEYS: &[(&str, Kind)] = &[
    ("ec_connector", Kind::Str),
    ("engine_id", Kind::Str),
    ("ec_buffer_device", Kind::Str),
    ("ec_buffer_size", Kind::Num),
    ("ec_role", Kind::Str),
    ("ec_rank", Kind::Int),
    ("ec_parallel_size", Kind::Int),
    ("ec_ip", Kind::Str),
    ("ec_port", Kind::Int),
    ("ec_connector_extra_config", Kind::Obj),
    ("ec_connector_module_path", Kind::Str),
];

/// How a worker hands prompt KV from a prefill to a decode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KvConnector {
    /// vLLM `NixlConnector`: the prefill keeps the blocks under a lease, the decode pulls them
    /// with the `kv_transfer_params` the prefill answered.
    Nixl,
    /// vLLM `ExampleConnector`: every request loads its prompt's KV from `path` when stored
    /// there, else stores it there; `kv_transfer_params` are ignored.
    SharedStorage {
        /// `kv_connector_extra_config.shared_storage_path`.
        path: PathBuf,
    },
}

/// vLLM's `--kv-transfer-config`, as the simulator uses it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KvTransferConfig {
    /// `kv_connector` as given (`NixlConnector`, `ExampleConnector`, `SharedStorageConnector`).
    pub kv_connector: String,
    /// `kv_role` (`kv_producer`, `kv_consumer`, `kv_both`); required, as in vLLM, and not
    /// used: neither connector depends on it.
    pub kv_role: String,
    /// The behaviour selected.
    pub connector: KvConnector,
}

/// `ec_role`: which way a worker moves encoder output through the connector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EcRole {
    /// `ec_producer`: stores what it encodes (an encode worker).
    Producer,
    /// `ec_consumer`: loads what is stored, stores nothing (a prefill worker).
    Consumer,
    /// `ec_both`: loads and stores.
    Both,
}

impl EcRole {
    /// Whether items this worker encodes are written to the storage (vLLM `is_producer`).
    pub fn stores(self) -> bool {
        matches!(self, EcRole::Producer | EcRole::Both)
    }
}

/// vLLM's `--ec-transfer-config` with `ECExampleConnector`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EcTransferConfig {
    /// `ec_connector` as given (`ECExampleConnector`, `ECSharedStorageConnector`).
    pub ec_connector: String,
    /// `ec_role`.
    pub ec_role: EcRole,
    /// `ec_connector_extra_config.shared_storage_path`.
    pub shared_storage_path: PathBuf,
}

impl KvTransferConfig {
    /// Parses the flag's JSON. Errors name the key: unknown keys, wrong types, a missing
    /// `kv_connector` or `kv_role`, an unsupported connector or role, extra config keys
    /// ExampleConnector does not read, `kv_connector_module_path` (a Python module).
    pub fn parse(json: &str) -> anyhow::Result<Self> {
        const FLAG: &str = "--kv-transfer-config";
        let m = parse_object(FLAG, json, KV_KEYS, "KVTransferConfig")?;
        reject_module_path(FLAG, &m, "kv_connector_module_path")?;
        let kv_connector = required_str(FLAG, &m, "kv_connector", "")?;
        let kv_role = required_str(
            FLAG,
            &m,
            "kv_role",
            " when kv_connector is set (kv_producer, kv_consumer, kv_both)",
        )?;
        one_of(
            FLAG,
            "kv_role",
            &kv_role,
            &["kv_producer", "kv_consumer", "kv_both"],
        )?;
        if let Some(p) = str_of(&m, "kv_load_failure_policy") {
            one_of(FLAG, "kv_load_failure_policy", p, &["recompute", "fail"])?;
        }
        let extra = "kv_connector_extra_config";
        let connector = match kv_connector.as_str() {
            "NixlConnector" => KvConnector::Nixl,
            "ExampleConnector" | "SharedStorageConnector" => KvConnector::SharedStorage {
                path: storage_path(FLAG, &m, extra, &kv_connector)?,
            },
            other => anyhow::bail!(
                "{FLAG}: kv_connector {other:?} is not supported (NixlConnector, ExampleConnector, SharedStorageConnector)"
            ),
        };
        Ok(KvTransferConfig {
            kv_connector,
            kv_role,
            connector,
        })
    }

    /// The storage directory with ExampleConnector, else `None`.
    pub fn shared_storage_path(&self) -> Option<&Path> {
        match &self.connector {
            KvConnector::SharedStorage { path } => Some(path),
            KvConnector::Nixl => None,
        }
    }
}

impl EcTransferConfig {
    /// Parses the flag's JSON. Errors name the key, as [`KvTransferConfig::parse`].
    pub fn parse(json: &str) -> anyhow::Result<Self> {
        const FLAG: &str = "--ec-transfer-config";
        let m = parse_object(FLAG, json, EC_KEYS, "ECTransferConfig")?;
        reject_module_path(FLAG, &m, "ec_connector_module_path")?;
        let ec_connector = required_str(FLAG, &m, "ec_connector", "")?;
        let roles = " when ec_connector is set (ec_producer, ec_consumer, ec_both)";
        let role = required_str(FLAG, &m, "ec_role", roles)?;
        one_of(
            FLAG,
            "ec_role",
            &role,
            &["ec_producer", "ec_consumer", "ec_both"],
        )?;
        let ec_role = match role.as_str() {
            "ec_producer" => EcRole::Producer,
            "ec_consumer" => EcRole::Consumer,
            _ => EcRole::Both,
        };
        anyhow::ensure!(
            matches!(
                ec_connector.as_str(),
                "ECExampleConnector" | "ECSharedStorageConnector"
            ),
            "{FLAG}: ec_connector {ec_connector:?} is not supported (ECExampleConnector, ECSharedStorageConnector)"
        );
        let shared_storage_path =
            storage_path(FLAG, &m, "ec_connector_extra_config", &ec_connector)?;
        Ok(EcTransferConfig {
            ec_connector,
            ec_role,
            shared_storage_path,
        })
    }
}

/// The JSON object of `flag`, every key known (`keys`) and of its type.
fn parse_object(
    flag: &str,
    json: &str,
    keys: &[(&str, Kind)],
    class: &str,
) -> anyhow::Result<Map<String, Value>> {
    let v: Value =
        serde_json::from_str(json).map_err(|e| anyhow::anyhow!("{flag} is not valid JSON: {e}"))?;
    let Value::Object(m) = v else {
        anyhow::bail!("{flag} must be a JSON object ({class})");
    };
    for (k, v) in &m {
        let Some((_, kind)) = keys.iter().find(|(name, _)| name == k) else {
            let names: Vec<&str> = keys.iter().map(|(n, _)| *n).collect();
            anyhow::bail!(
                "{flag}: unknown key {k:?} (vLLM's {class} has: {})",
                names.join(", ")
            );
        };
        let ok = match kind {
            _ if v.is_null() => true,
            Kind::Str => v.is_string(),
            Kind::Num => v.is_number(),
            Kind::Int => v.is_i64() || v.is_u64(),
            Kind::Bool => v.is_boolean(),
            Kind::Obj => v.is_object(),
        };
        let what = match kind {
            Kind::Str => "a string",
            Kind::Num => "a number",
            Kind::Int => "an integer",
            Kind::Bool => "true or false",
            Kind::Obj => "an object",
        };
        anyhow::ensure!(ok, "{flag}: {k} must be {what}, got {v}");
    }
    Ok(m)
}

fn str_of<'a>(m: &'a Map<String, Value>, key: &str) -> Option<&'a str> {
    m.get(key).and_then(Value::as_str)
}

fn required_str(
    flag: &str,
    m: &Map<String, Value>,
    key: &str,
    why: &str,
) -> anyhow::Result<String> {
    match str_of(m, key) {
        Some(s) if !s.is_empty() => Ok(s.to_string()),
        _ => anyhow::bail!("{flag}: {key} is required{why}"),
    }
}

fn one_of(flag: &str, key: &str, v: &str, allowed: &[&str]) -> anyhow::Result<()> {
    anyhow::ensure!(
        allowed.contains(&v),
        "{flag}: {key} {v:?} is not one of {}",
        allowed.join(", ")
    );
    Ok(())
}

fn reject_module_path(flag: &str, m: &Map<String, Value>, key: &str) -> anyhow::Result<()> {
    anyhow::ensure!(
        str_of(m, key).is_none(),
        "{flag}: {key} is not supported (the simulator cannot load a Python connector)"
    );
    Ok(())
}

/// `<extra>.shared_storage_path` (default [`DEFAULT_SHARED_STORAGE_PATH`]); any other key of
/// `<extra>` is an error, since the example connectors read no other.
fn storage_path(
    flag: &str,
    m: &Map<String, Value>,
    extra: &str,
    connector: &str,
) -> anyhow::Result<PathBuf> {
    let Some(Value::Object(x)) = m.get(extra) else {
        return Ok(PathBuf::from(DEFAULT_SHARED_STORAGE_PATH));
    };
    if let Some(k) = x.keys().find(|k| *k != "shared_storage_path") {
        anyhow::bail!("{flag}: {extra}.{k} is not read by {connector} (only shared_storage_path)");
    }
    match x.get("shared_storage_path") {
        None | Some(Value::Null) => Ok(PathBuf::from(DEFAULT_SHARED_STORAGE_PATH)),
        Some(Value::String(s)) if !s.is_empty() => Ok(PathBuf::from(s)),
        Some(v) => {
            anyhow::bail!("{flag}: {extra}.shared_storage_path must be a non-empty string, got {v}")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kv_err(json: &str) -> String {
        KvTransferConfig::parse(json).unwrap_err().to_string()
    }

    #[test]
    fn kv_connectors_and_their_errors() {
        let c = KvTransferConfig::parse(
            r#"{"kv_connector":"ExampleConnector","kv_role":"kv_both",
                "kv_connector_extra_config":{"shared_storage_path":"/data/kv"}}"#,
        )
        .unwrap();
        assert_eq!(c.shared_storage_path(), Some(Path::new("/data/kv")));
        let old = KvTransferConfig::parse(
            r#"{"kv_connector":"SharedStorageConnector","kv_role":"kv_consumer","kv_port":14579}"#,
        )
        .unwrap();
        assert_eq!(old.shared_storage_path(), Some(Path::new("/tmp")));
        let nixl =
            KvTransferConfig::parse(r#"{"kv_connector":"NixlConnector","kv_role":"kv_both"}"#)
                .unwrap();
        assert_eq!(nixl.connector, KvConnector::Nixl);
        assert!(kv_err(r#"{"kv_conector":"NixlConnector"}"#)
            .starts_with("--kv-transfer-config: unknown key \"kv_conector\" (vLLM's KVTransferConfig has: kv_connector, "));
        assert_eq!(
            kv_err(r#"{"kv_connector":"ExampleConnector"}"#),
            "--kv-transfer-config: kv_role is required when kv_connector is set (kv_producer, kv_consumer, kv_both)"
        );
        assert_eq!(
            kv_err(r#"{"kv_connector":"ExampleConnector","kv_role":"both"}"#),
            "--kv-transfer-config: kv_role \"both\" is not one of kv_producer, kv_consumer, kv_both"
        );
        assert_eq!(
            kv_err(r#"{"kv_connector":"ExampleConnector","kv_role":"kv_both","kv_port":"x"}"#),
            "--kv-transfer-config: kv_port must be an integer, got \"x\""
        );
        assert_eq!(
            kv_err(r#"{"kv_connector":"LMCacheConnectorV1","kv_role":"kv_both"}"#),
            "--kv-transfer-config: kv_connector \"LMCacheConnectorV1\" is not supported (NixlConnector, ExampleConnector, SharedStorageConnector)"
        );
        assert_eq!(
            kv_err(
                r#"{"kv_connector":"ExampleConnector","kv_role":"kv_both",
                    "kv_connector_extra_config":{"shared_storage_pth":"/x"}}"#
            ),
            "--kv-transfer-config: kv_connector_extra_config.shared_storage_pth is not read by ExampleConnector (only shared_storage_path)"
        );
        assert_eq!(
            kv_err(
                r#"{"kv_connector":"ExampleConnector","kv_role":"kv_both",
                    "kv_connector_extra_config":{"shared_storage_path":7}}"#
            ),
            "--kv-transfer-config: kv_connector_extra_config.shared_storage_path must be a non-empty string, got 7"
        );
        assert_eq!(
            kv_err("[]"),
            "--kv-transfer-config must be a JSON object (KVTransferConfig)"
        );
        assert_eq!(
            kv_err(r#"{"kv_role":"kv_both"}"#),
            "--kv-transfer-config: kv_connector is required"
        );
    }

    #[test]
    fn ec_connector_and_roles() {
        let c = EcTransferConfig::parse(
            r#"{"ec_connector":"ECExampleConnector","ec_role":"ec_producer",
                "ec_connector_extra_config":{"shared_storage_path":"/data/ec"}}"#,
        )
        .unwrap();
        assert_eq!(
            (c.ec_role, c.shared_storage_path.as_path()),
            (EcRole::Producer, Path::new("/data/ec"))
        );
        assert!(c.ec_role.stores() && EcRole::Both.stores() && !EcRole::Consumer.stores());
        let e = |j: &str| EcTransferConfig::parse(j).unwrap_err().to_string();
        assert_eq!(
            e(r#"{"ec_connector":"ECCPUConnector","ec_role":"ec_both"}"#),
            "--ec-transfer-config: ec_connector \"ECCPUConnector\" is not supported (ECExampleConnector, ECSharedStorageConnector)"
        );
        assert_eq!(
            e(r#"{"ec_connector":"ECExampleConnector"}"#),
            "--ec-transfer-config: ec_role is required when ec_connector is set (ec_producer, ec_consumer, ec_both)"
        );
        assert!(e(
            r#"{"ec_connector":"ECExampleConnector","ec_role":"ec_both","kv_role":"kv_both"}"#
        )
        .starts_with("--ec-transfer-config: unknown key \"kv_role\""));
        assert_eq!(
            e(r#"{"ec_connector":"ECExampleConnector","ec_role":"ec_both","ec_connector_module_path":"m"}"#),
            "--ec-transfer-config: ec_connector_module_path is not supported (the simulator cannot load a Python connector)"
        );
    }
}
