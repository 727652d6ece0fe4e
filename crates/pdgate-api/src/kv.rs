//! `kv_transfer_params`, the object vLLM's P/D connectors exchange (vLLM NIXL connector).
//!
//! The prefill leg sends [`KvTransferParams::prefill_request`]; the prefill engine answers with
//! the engine id, the block ids it holds under a lease, and where to pull them from; the decode
//! leg sends that object back with `do_remote_prefill: true`. The router relays it verbatim
//! (as JSON), so unknown fields survive in [`KvTransferParams::extra`].

use serde::{Deserialize, Serialize};

/// The handoff object. Absent fields serialize as `null`, as the NIXL connector expects.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct KvTransferParams {
    /// Set on the prefill leg: the engine keeps the KV blocks for a remote decode.
    #[serde(default)]
    pub do_remote_decode: bool,
    /// Set on the decode leg: the engine pulls the prompt's KV blocks from a remote prefill.
    #[serde(default)]
    pub do_remote_prefill: bool,
    /// Engine id of the prefill engine holding the blocks.
    #[serde(default)]
    pub remote_engine_id: Option<String>,
    /// Block ids held under the lease on the prefill engine.
    #[serde(default)]
    pub remote_block_ids: Option<Vec<u64>>,
    /// Host of the prefill engine's KV side channel.
    #[serde(default)]
    pub remote_host: Option<String>,
    /// Port of the prefill engine's KV side channel.
    #[serde(default)]
    pub remote_port: Option<u16>,
    /// Request id on the prefill engine (lease key).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote_request_id: Option<String>,
    /// Tensor-parallel size of the prefill engine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tp_size: Option<u32>,
    /// Any other field, kept verbatim.
    #[serde(flatten)]
    pub extra: serde_json::Map<String, serde_json::Value>,
}

impl KvTransferParams {
    /// The object the router puts on the prefill leg (design.md §5.2): `do_remote_decode: true`,
    /// everything else false or null.
    pub fn prefill_request() -> Self {
        KvTransferParams {
            do_remote_decode: true,
            ..Default::default()
        }
    }

    /// [`Self::prefill_request`] as JSON.
    pub fn prefill_request_json() -> serde_json::Value {
        serde_json::json!({
            "do_remote_decode": true,
            "do_remote_prefill": false,
            "remote_engine_id": null,
            "remote_block_ids": null,
            "remote_host": null,
            "remote_port": null,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefill_request_serializes_nulls_and_roundtrips_extra_fields() {
        let v = serde_json::to_value(KvTransferParams::prefill_request()).unwrap();
        assert_eq!(v, KvTransferParams::prefill_request_json());
        let with_extra: KvTransferParams =
            serde_json::from_str(r#"{"remote_engine_id":"e1","x_custom":7}"#).unwrap();
        assert_eq!(with_extra.extra["x_custom"], 7);
        assert_eq!(serde_json::to_value(&with_extra).unwrap()["x_custom"], 7);
    }
}
