//! The KV connector: the `kv_transfer_params` contract between the prefill leg and the decode
//! leg (llm-d coordinator `pipeline.kv_connector`; `pdgate serve --kv-connector`).
//!
//! | connector | prefill leg sends | decode leg sends |
//! |---|---|---|
//! | `kv-nixl` (vLLM `NixlConnector`) | `do_remote_decode: true`, `do_remote_prefill: false`, `remote_engine_id`, `remote_block_ids`, `remote_host`, `remote_port` all `null` | the prefill response's `kv_transfer_params`, every key verbatim, with `do_remote_prefill: true` / `do_remote_decode: false` when it left them out |
//! | `kv-shared-storage` (vLLM `ExampleConnector`, formerly `SharedStorageConnector`) | `do_remote_decode: true`, `do_remote_prefill: false` | `do_remote_decode: false`, `do_remote_prefill: true`; the prefill response's params are not needed |
//!
//! With shared storage the engines find the KV themselves: the prefill engine writes it under a
//! hash of the prompt's token ids in a directory both engines mount, and the decode engine
//! recomputes that hash (vLLM `example_connector.py`). Nothing on the wire says where it is, so
//! the prefill response may carry no `kv_transfer_params` at all. Source of both contracts:
//! llm-d-router `pkg/coordinator/connectors/kv/{nixl,shared_storage}.go`.

use pdgate_api::KvTransferParams;
use serde_json::{Map, Value};

/// Which contract the prefill and decode legs speak.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum KvConnector {
    /// vLLM `NixlConnector`: the decode engine pulls the blocks named by the prefill's answer.
    #[default]
    #[serde(rename = "kv-nixl")]
    Nixl,
    /// vLLM `ExampleConnector`: both engines share a KV store keyed by the prompt's tokens.
    #[serde(rename = "kv-shared-storage")]
    SharedStorage,
}

/// Every connector name, as llm-d spells them (`kv-sglang` is not one pdgate speaks).
pub const KV_CONNECTOR_NAMES: &[&str] = &["kv-nixl", "kv-shared-storage"];

impl KvConnector {
    /// The llm-d name: `kv-nixl` or `kv-shared-storage`.
    pub fn as_str(self) -> &'static str {
        match self {
            KvConnector::Nixl => "kv-nixl",
            KvConnector::SharedStorage => "kv-shared-storage",
        }
    }

    /// The prefill leg's `kv_transfer_params`.
    pub fn prefill_params(self) -> Value {
        match self {
            KvConnector::Nixl => KvTransferParams::prefill_request_json(),
            KvConnector::SharedStorage => {
                serde_json::json!({"do_remote_decode": true, "do_remote_prefill": false})
            }
        }
    }

    /// True when the decode leg needs the prefill response's `kv_transfer_params` (NIXL: the
    /// blocks to pull); a prefill answer without them is then a bad prefill response.
    pub fn needs_prefill_params(self) -> bool {
        self == KvConnector::Nixl
    }

    /// The decode leg's `kv_transfer_params`, from the prefill response's (`prefill`, empty
    /// when it had none).
    pub fn decode_params(self, prefill: Map<String, Value>) -> Map<String, Value> {
        let mut kv = match self {
            KvConnector::Nixl => prefill,
            KvConnector::SharedStorage => Map::new(),
        };
        kv.entry("do_remote_prefill").or_insert(Value::Bool(true));
        kv.entry("do_remote_decode").or_insert(Value::Bool(false));
        kv
    }
}

impl std::fmt::Display for KvConnector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for KvConnector {
    type Err = String;
    /// Parses an llm-d connector name. Errors: `kv-sglang` (SGLang's bootstrap protocol, not
    /// spoken by pdgate) and unknown names, with the accepted ones listed.
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "kv-nixl" => Ok(KvConnector::Nixl),
            "kv-shared-storage" => Ok(KvConnector::SharedStorage),
            "kv-sglang" => Err(
                "`kv-sglang` (SGLang's bootstrap protocol) is not supported: pdgate serves vLLM \
                 engines; use `kv-nixl` or `kv-shared-storage`"
                    .into(),
            ),
            other => Err(format!(
                "unknown kv_connector `{other}`: use `{}`",
                KV_CONNECTOR_NAMES.join("` or `")
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn shared_storage_sends_only_the_flags_and_ignores_the_prefill_answer() {
        let c = KvConnector::SharedStorage;
        assert_eq!(
            c.prefill_params(),
            json!({"do_remote_decode": true, "do_remote_prefill": false})
        );
        let answered = json!({"remote_engine_id": "e1", "do_remote_prefill": false});
        let Value::Object(m) = answered else {
            unreachable!()
        };
        assert_eq!(
            Value::Object(c.decode_params(m)),
            json!({"do_remote_prefill": true, "do_remote_decode": false})
        );
        assert!(!c.needs_prefill_params());
    }

    #[test]
    fn nixl_relays_the_prefill_answer() {
        let c = KvConnector::Nixl;
        assert_eq!(c.prefill_params()["remote_block_ids"], Value::Null);
        let Value::Object(m) = json!({"remote_engine_id": "e1", "remote_block_ids": [1, 2]}) else {
            unreachable!()
        };
        assert_eq!(
            Value::Object(c.decode_params(m)),
            json!({"remote_engine_id": "e1", "remote_block_ids": [1, 2],
                   "do_remote_prefill": true, "do_remote_decode": false})
        );
        assert!(c.needs_prefill_params());
    }

    #[test]
    fn names_parse_and_sglang_is_refused_with_a_reason() {
        assert_eq!("kv-nixl".parse(), Ok(KvConnector::Nixl));
        assert_eq!(
            "kv-shared-storage"
                .parse::<KvConnector>()
                .map(|c| c.as_str()),
            Ok("kv-shared-storage")
        );
        let e = "kv-sglang".parse::<KvConnector>().unwrap_err();
        assert!(e.contains("SGLang's bootstrap protocol"), "{e}");
        assert_eq!(
            "nixl".parse::<KvConnector>().unwrap_err(),
            "unknown kv_connector `nixl`: use `kv-nixl` or `kv-shared-storage`"
        );
    }
}
