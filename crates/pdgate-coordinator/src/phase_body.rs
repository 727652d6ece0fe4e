//! Phase bodies of the vLLM NIXL connector contract (design.md §5.2).

use crate::json_patch::Edit;
use bytes::Bytes;
use pdgate_api::media::EC_TRANSFER_PARAMS;
use pdgate_api::{InferenceRequest, KvTransferParams};
use serde_json::{Map, Value};

/// Field name of the handoff object in request and response bodies.
pub const KV_TRANSFER_PARAMS: &str = "kv_transfer_params";

/// The prefill leg body: the client body with `kv_transfer_params` set to
/// [`KvTransferParams::prefill_request_json`], `stream: false`, `stream_options` removed,
/// `min_tokens` removed, and every token limit (`max_tokens`, `max_completion_tokens`) set
/// to 1 (`max_tokens` is set even when the client gave none).
pub fn prefill_body(req: &InferenceRequest) -> Map<String, Value> {
    let mut body = req.body.clone();
    body.insert(
        KV_TRANSFER_PARAMS.into(),
        KvTransferParams::prefill_request_json(),
    );
    body.insert("stream".into(), Value::Bool(false));
    body.remove("stream_options");
    body.remove("min_tokens");
    body.insert("max_tokens".into(), Value::from(1));
    if body.contains_key("max_completion_tokens") {
        body.insert("max_completion_tokens".into(), Value::from(1));
    }
    body
}

/// The prefill leg body built from the client's bytes `raw` ([`crate::json_patch`]: no DOM,
/// untouched values byte for byte) — the same fields as [`prefill_body`] — with the
/// encoders' `ec_transfer_params` when there are any.
pub fn prefill_bytes(req: &InferenceRequest, raw: &[u8], ec: &[Value]) -> Bytes {
    let kv = KvTransferParams::prefill_request_json().to_string();
    let ec_json = encoder_json(ec);
    let mut edits = vec![
        Edit::Set(KV_TRANSFER_PARAMS, kv.as_bytes()),
        Edit::Set("stream", b"false"),
        Edit::Remove("stream_options"),
        Edit::Remove("min_tokens"),
        Edit::Set("max_tokens", b"1"),
        Edit::Replace("max_completion_tokens", b"1"),
    ];
    if let Some(e) = &ec_json {
        edits.push(Edit::Set(EC_TRANSFER_PARAMS, e.as_bytes()));
    }
    patched(raw, &edits).unwrap_or_else(|| {
        crate::pipeline::to_bytes(with_encoder_output(prefill_body(req), ec.to_vec()))
    })
}

/// The decode leg body built from the client's bytes `raw`: the same as [`decode_body`].
pub fn decode_bytes(req: &InferenceRequest, raw: &[u8], mut kv: Map<String, Value>) -> Bytes {
    kv.entry("do_remote_prefill").or_insert(Value::Bool(true));
    kv.entry("do_remote_decode").or_insert(Value::Bool(false));
    // Serializing a Map of Values cannot fail.
    let kv_json = serde_json::to_vec(&kv).unwrap_or_default();
    patched(raw, &[Edit::Set(KV_TRANSFER_PARAMS, &kv_json)])
        .unwrap_or_else(|| crate::pipeline::to_bytes(decode_body(req, kv)))
}

/// The client's bytes `raw` with the encoders' `ec_transfer_params` (an aggregated leg of a
/// request with media); `raw` itself when there are none.
pub fn aggregated_bytes(req: &InferenceRequest, raw: &Bytes, ec: &[Value]) -> Bytes {
    match encoder_json(ec) {
        None => raw.clone(),
        Some(e) => {
            patched(raw, &[Edit::Set(EC_TRANSFER_PARAMS, e.as_bytes())]).unwrap_or_else(|| {
                crate::pipeline::to_bytes(with_encoder_output(req.body.clone(), ec.to_vec()))
            })
        }
    }
}

fn encoder_json(ec: &[Value]) -> Option<String> {
    (!ec.is_empty()).then(|| Value::Array(ec.to_vec()).to_string())
}

/// `raw` patched; `None` when `raw` is not a JSON object (it always is once parsed: the
/// callers then fall back to the parsed body).
fn patched(raw: &[u8], edits: &[Edit<'_>]) -> Option<Bytes> {
    crate::json_patch::patch(raw, edits).ok().map(Bytes::from)
}

/// Reads `kv_transfer_params` from a prefill response body.
///
/// Errors: the body is not a JSON object or has no `kv_transfer_params` object; the message
/// says which.
pub fn kv_params_from_prefill(body: &[u8]) -> Result<Map<String, Value>, String> {
    let v: Value =
        serde_json::from_slice(body).map_err(|e| format!("prefill response is not JSON: {e}"))?;
    match v.get(KV_TRANSFER_PARAMS) {
        Some(Value::Object(m)) => Ok(m.clone()),
        Some(_) => Err("prefill response `kv_transfer_params` is not an object".into()),
        None => Err("prefill response has no `kv_transfer_params`".into()),
    }
}

/// The decode leg body: the original client body (stream and token limits as the client sent
/// them) plus the prefill's `kv_transfer_params`, relayed verbatim; `do_remote_prefill: true`
/// and `do_remote_decode: false` are added only when the prefill left them out.
pub fn decode_body(req: &InferenceRequest, mut kv: Map<String, Value>) -> Map<String, Value> {
    kv.entry("do_remote_prefill").or_insert(Value::Bool(true));
    kv.entry("do_remote_decode").or_insert(Value::Bool(false));
    let mut body = req.body.clone();
    body.insert(KV_TRANSFER_PARAMS.into(), Value::Object(kv));
    body
}

/// `body` with `ec_transfer_params` set to the encoders' entries (one per media item, in
/// item order) when there are any (pdgate simulator EPD contract); unchanged otherwise.
pub fn with_encoder_output(
    mut body: Map<String, Value>,
    entries: Vec<Value>,
) -> Map<String, Value> {
    if !entries.is_empty() {
        body.insert(
            pdgate_api::media::EC_TRANSFER_PARAMS.to_string(),
            Value::Array(entries),
        );
    }
    body
}

#[cfg(test)]
mod tests {
    use super::*;
    use pdgate_api::ApiKind;
    use serde_json::json;

    fn req(body: Value) -> InferenceRequest {
        InferenceRequest::parse(ApiKind::Completions, body.to_string().as_bytes()).unwrap()
    }

    #[test]
    fn prefill_leg_limits_tokens_and_disables_streaming() {
        let r = req(
            json!({"model":"m","prompt":[1,2],"stream":true,"stream_options":{"include_usage":true},
            "max_tokens":50,"max_completion_tokens":40,"min_tokens":3,"temperature":0.5}),
        );
        let b = Value::Object(prefill_body(&r));
        assert_eq!(
            b,
            json!({"model":"m","prompt":[1,2],"stream":false,"max_tokens":1,"max_completion_tokens":1,
                "temperature":0.5,"kv_transfer_params":{"do_remote_decode":true,"do_remote_prefill":false,
                "remote_engine_id":null,"remote_block_ids":null,"remote_host":null,"remote_port":null}})
        );
    }

    #[test]
    fn byte_bodies_equal_the_parsed_ones_and_keep_the_client_key_order() {
        let raw = r#"{"temperature":0.50,"model":"m","prompt":[1,2],"stream":true,"stream_options":{"include_usage":true},"max_tokens":50,"max_completion_tokens":40,"min_tokens":3}"#;
        let r = InferenceRequest::parse(ApiKind::Completions, raw.as_bytes()).unwrap();
        let p = prefill_bytes(&r, raw.as_bytes(), &[]);
        let parsed: Value = serde_json::from_slice(&p).unwrap();
        assert_eq!(parsed, Value::Object(prefill_body(&r)));
        assert!(p.starts_with(
            br#"{"temperature":0.50,"model":"m","prompt":[1,2],"stream":false,"max_tokens":1"#
        ));
        let kv =
            kv_params_from_prefill(br#"{"kv_transfer_params":{"remote_engine_id":"e"}}"#).unwrap();
        let d = decode_bytes(&r, raw.as_bytes(), kv.clone());
        let parsed: Value = serde_json::from_slice(&d).unwrap();
        assert_eq!(parsed, Value::Object(decode_body(&r, kv)));
        assert!(d.starts_with(raw.trim_end_matches('}').as_bytes()));
        let ec = [json!({"id": "e0"})];
        let a = aggregated_bytes(&r, &Bytes::from(raw), &ec);
        let parsed: Value = serde_json::from_slice(&a).unwrap();
        assert_eq!(
            parsed,
            Value::Object(with_encoder_output(r.body.clone(), ec.to_vec()))
        );
        assert_eq!(aggregated_bytes(&r, &Bytes::from(raw), &[]), raw.as_bytes());
    }

    #[test]
    fn decode_leg_relays_params_verbatim_and_keeps_the_client_body() {
        let r = req(json!({"model":"m","prompt":"hi","stream":true,"max_tokens":50}));
        let kv = kv_params_from_prefill(
            br#"{"id":"x","kv_transfer_params":{"do_remote_prefill":true,"do_remote_decode":false,"remote_engine_id":"e","remote_block_ids":[3,4],"remote_host":"10.0.0.1","remote_port":5600,"tp_size":1,"vendor":{"a":1}}}"#,
        )
        .unwrap();
        let b = Value::Object(decode_body(&r, kv));
        assert_eq!(
            b,
            json!({"model":"m","prompt":"hi","stream":true,"max_tokens":50,"kv_transfer_params":{
                "do_remote_prefill":true,"do_remote_decode":false,"remote_engine_id":"e","remote_block_ids":[3,4],
                "remote_host":"10.0.0.1","remote_port":5600,"tp_size":1,"vendor":{"a":1}}})
        );
        assert_eq!(
            kv_params_from_prefill(br#"{"id":"x"}"#).unwrap_err(),
            "prefill response has no `kv_transfer_params`"
        );
    }
}
