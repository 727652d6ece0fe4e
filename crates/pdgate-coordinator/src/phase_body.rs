//! Phase bodies of the P/D KV handoff (design.md §5.2), for either [`KvConnector`].

use crate::json_patch::{self, patch_object, Edit};
use crate::kv_connector::KvConnector;
use bytes::Bytes;
use pdgate_api::media::EC_TRANSFER_PARAMS;
use pdgate_api::{InferenceRequest, RawObject};
use serde_json::{Map, Value};

/// Field name of the handoff object in request and response bodies.
pub const KV_TRANSFER_PARAMS: &str = "kv_transfer_params";

/// The prefill leg body, from the client's bytes ([`crate::json_patch`]: no DOM, untouched
/// values byte for byte, the client's key order): `kv_transfer_params` set to
/// [`KvConnector::prefill_params`], `stream: false`, `stream_options` removed, the encoders'
/// `ec_transfer_params` when there are any, and the API's token limits capped
/// ([`token_limit_edits`]).
pub fn prefill_bytes(req: &InferenceRequest, ec: &[Value], connector: KvConnector) -> Bytes {
    let kv = connector.prefill_params().to_string();
    let ec_json = encoder_json(ec);
    let limits = token_limit_edits(req);
    let mut edits = vec![
        Edit::Set("stream", b"false"),
        Edit::Remove("stream_options"),
    ];
    let nested;
    match req.kind.leg_params_object() {
        None => {
            edits.push(Edit::Set(KV_TRANSFER_PARAMS, kv.as_bytes()));
            edits.extend(limits);
        }
        // Generate: the limits and the handoff live in `sampling_params`.
        Some(object) => {
            nested = leg_params(req, object, &limits, kv.as_bytes());
            edits.push(Edit::Set(object, &nested));
        }
    }
    if let Some(e) = &ec_json {
        edits.push(Edit::Set(EC_TRANSFER_PARAMS, e.as_bytes()));
    }
    Bytes::from(patch_object(&req.body, &edits))
}

/// The body's `object` (generate's `sampling_params`, [`pdgate_api::ApiKind::leg_params_object`])
/// with `edits` applied and `kv` (JSON) set as `extra_args.kv_transfer_params`, each object
/// created when absent; the other values byte for byte.
fn leg_params(req: &InferenceRequest, object_name: &str, edits: &[Edit<'_>], kv: &[u8]) -> Vec<u8> {
    // The parse checked `sampling_params` is an object; `extra_args` may be anything.
    let object = |raw: Option<&str>| match raw {
        Some(r) if r.starts_with('{') => r.to_string(),
        _ => "{}".to_string(),
    };
    let sp = object(req.body.raw(object_name));
    let extra = RawObject::parse(Bytes::from(sp.clone()))
        .ok()
        .and_then(|o| o.raw("extra_args").map(str::to_string));
    // Patching a JSON object cannot fail; an empty value would be refused by the engine.
    let extra = json_patch::patch(
        object(extra.as_deref()).as_bytes(),
        &[Edit::Set(KV_TRANSFER_PARAMS, kv)],
    )
    .unwrap_or_default();
    let mut all = edits.to_vec();
    all.push(Edit::Set("extra_args", &extra));
    json_patch::patch(sp.as_bytes(), &all).unwrap_or_default()
}

/// The tokens-in prefill leg of a rendered chat request (llm-d coordinator
/// `use_openai_format: false`, `pkg/coordinator/steps/prefill.go`), for
/// `POST /inference/v1/generate`: `{"model", "token_ids": ids, "sampling_params":
/// {"max_tokens": 1, "extra_args": {"kv_transfer_params": …}}, "stream": false}`, plus the
/// render's `features` (multimodal hashes and placeholders), the client's `cache_salt` and
/// `priority` when given, and the encoders' `ec_transfer_params` when there are any.
pub fn tokens_in_prefill_bytes(
    req: &InferenceRequest,
    ids: &[u32],
    ec: &[Value],
    connector: KvConnector,
) -> Bytes {
    let mut body = Map::new();
    if !req.model.is_empty() {
        body.insert("model".into(), Value::from(req.model.as_str()));
    }
    body.insert("token_ids".into(), Value::from(ids));
    let mut extra = Map::new();
    extra.insert(KV_TRANSFER_PARAMS.into(), connector.prefill_params());
    body.insert(
        "sampling_params".into(),
        serde_json::json!({"max_tokens": 1, "extra_args": extra}),
    );
    body.insert("stream".into(), Value::Bool(false));
    let features = req
        .body
        .get(pdgate_api::request_fields::RENDERED_TOKENS_FIELD)
        .and_then(|t| t.get("features").cloned());
    if let Some(f) = features {
        body.insert("features".into(), f);
    }
    for field in ["cache_salt", "priority"] {
        if let Some(v) = req.body.get(field).filter(|v| !v.is_null()) {
            body.insert(field.into(), v);
        }
    }
    if !ec.is_empty() {
        body.insert(EC_TRANSFER_PARAMS.into(), Value::Array(ec.to_vec()));
    }
    Bytes::from(Value::Object(body).to_string())
}

/// The token-limit edits of a prefill leg (design.md §5.2; llm-d's P/D sidecar): `min_tokens`
/// removed, the API's first limit field ([`pdgate_api::ApiKind::token_limit_fields`]:
/// `max_tokens` for completions, chat, messages and generate, `max_output_tokens` for
/// responses) set to 1 even when the client gave none, the others (`max_completion_tokens`)
/// set to 1 when present.
fn token_limit_edits(req: &InferenceRequest) -> Vec<Edit<'static>> {
    let mut edits = vec![Edit::Remove("min_tokens")];
    for (i, field) in req.kind.token_limit_fields().iter().enumerate() {
        edits.push(match i {
            0 => Edit::Set(field, b"1"),
            _ => Edit::Replace(field, b"1"),
        });
    }
    edits
}

/// The decode leg body: the client's bytes (stream and token limits as the client sent them)
/// plus `kv_transfer_params` from [`KvConnector::decode_params`] of the prefill's (`kv`).
pub fn decode_bytes(
    req: &InferenceRequest,
    kv: Map<String, Value>,
    connector: KvConnector,
) -> Bytes {
    let kv = connector.decode_params(kv);
    // Serializing a Map of Values cannot fail.
    let kv_json = serde_json::to_vec(&kv).unwrap_or_default();
    if let Some(object) = req.kind.leg_params_object() {
        let nested = leg_params(req, object, &[], &kv_json);
        return Bytes::from(patch_object(&req.body, &[Edit::Set(object, &nested)]));
    }
    Bytes::from(patch_object(
        &req.body,
        &[Edit::Set(KV_TRANSFER_PARAMS, &kv_json)],
    ))
}

/// The client's bytes with the encoders' `ec_transfer_params` (an aggregated leg of a request
/// with media); the client's bytes themselves (no copy) when there are none.
pub fn aggregated_bytes(req: &InferenceRequest, ec: &[Value]) -> Bytes {
    match encoder_json(ec) {
        None => req.body.bytes().clone(),
        Some(e) => Bytes::from(patch_object(
            &req.body,
            &[Edit::Set(EC_TRANSFER_PARAMS, e.as_bytes())],
        )),
    }
}

/// `ec_transfer_params` (one entry per media item, in item order: pdgate simulator EPD
/// contract); `None` when there are none.
fn encoder_json(ec: &[Value]) -> Option<String> {
    (!ec.is_empty()).then(|| Value::Array(ec.to_vec()).to_string())
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

#[cfg(test)]
mod tests {
    use super::*;
    use pdgate_api::ApiKind;
    use serde_json::json;

    fn req(body: &str) -> InferenceRequest {
        InferenceRequest::parse(ApiKind::Completions, body.as_bytes()).unwrap()
    }

    fn json_of(b: &[u8]) -> Value {
        serde_json::from_slice(b).unwrap()
    }

    #[test]
    fn prefill_leg_limits_tokens_and_disables_streaming() {
        let r = req(
            r#"{"model":"m","prompt":[1,2],"stream":true,"stream_options":{"include_usage":true},"max_tokens":50,"max_completion_tokens":40,"min_tokens":3,"temperature":0.5}"#,
        );
        assert_eq!(
            json_of(&prefill_bytes(&r, &[], KvConnector::Nixl)),
            json!({"model":"m","prompt":[1,2],"stream":false,"max_tokens":1,"max_completion_tokens":1,
                "temperature":0.5,"kv_transfer_params":{"do_remote_decode":true,"do_remote_prefill":false,
                "remote_engine_id":null,"remote_block_ids":null,"remote_host":null,"remote_port":null}})
        );
        let r = req(r#"{"model":"m","prompt":"x"}"#);
        assert_eq!(
            json_of(&prefill_bytes(&r, &[], KvConnector::Nixl))["max_tokens"],
            1
        );
        assert!(json_of(&prefill_bytes(&r, &[], KvConnector::Nixl))
            .get("max_completion_tokens")
            .is_none());
    }

    #[test]
    fn prefill_legs_cap_each_apis_own_token_limits() {
        let parse = |k, b: &str| InferenceRequest::parse(k, b.as_bytes()).unwrap();
        let r = parse(
            ApiKind::Generate,
            r#"{"token_ids":[1,2],"sampling_params":{"temperature":0,"max_tokens":64,"min_tokens":2},"stream":true}"#,
        );
        assert_eq!(
            std::str::from_utf8(&prefill_bytes(&r, &[], KvConnector::SharedStorage)).unwrap(),
            r#"{"token_ids":[1,2],"sampling_params":{"temperature":0,"max_tokens":1,"extra_args":{"kv_transfer_params":{"do_remote_decode":true,"do_remote_prefill":false}}},"stream":false}"#
        );
        let kv =
            kv_params_from_prefill(br#"{"kv_transfer_params":{"remote_engine_id":"e"}}"#).unwrap();
        let r = parse(
            ApiKind::Generate,
            r#"{"token_ids":[1],"sampling_params":{"max_tokens":9,"extra_args":{"x":1}},"stream":true}"#,
        );
        assert_eq!(
            std::str::from_utf8(&decode_bytes(&r, kv, KvConnector::Nixl)).unwrap(),
            r#"{"token_ids":[1],"sampling_params":{"max_tokens":9,"extra_args":{"x":1,"kv_transfer_params":{"do_remote_decode":false,"do_remote_prefill":true,"remote_engine_id":"e"}}},"stream":true}"#
        );
        let r = parse(
            ApiKind::Responses,
            r#"{"input":"a","max_output_tokens":50,"stream":true}"#,
        );
        assert_eq!(
            std::str::from_utf8(&prefill_bytes(&r, &[], KvConnector::SharedStorage)).unwrap(),
            r#"{"input":"a","max_output_tokens":1,"stream":false,"kv_transfer_params":{"do_remote_decode":true,"do_remote_prefill":false}}"#
        );
        let r = parse(
            ApiKind::Messages,
            r#"{"model":"m","max_tokens":50,"messages":[{"role":"user","content":"a"}],"stream":true}"#,
        );
        assert_eq!(
            json_of(&prefill_bytes(&r, &[], KvConnector::SharedStorage)),
            json!({"model":"m","max_tokens":1,"messages":[{"role":"user","content":"a"}],"stream":false,
                "kv_transfer_params":{"do_remote_decode":true,"do_remote_prefill":false}})
        );
    }

    #[test]
    fn a_rendered_chat_request_prefills_tokens_in() {
        let r = InferenceRequest::parse(
            ApiKind::ChatCompletions,
            br#"{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true,"max_tokens":9,"cache_salt":"s","tokens":{"token_ids":[4,5,6]}}"#,
        )
        .unwrap();
        let ids = r.rendered_token_ids().unwrap();
        assert_eq!(ids, [4, 5, 6]);
        assert_eq!(
            json_of(&tokens_in_prefill_bytes(
                &r,
                &ids,
                &[],
                KvConnector::SharedStorage
            )),
            json!({"model":"m","token_ids":[4,5,6],"stream":false,"cache_salt":"s",
                "sampling_params":{"max_tokens":1,"extra_args":{"kv_transfer_params":
                    {"do_remote_decode":true,"do_remote_prefill":false}}}})
        );
    }

    #[test]
    fn leg_bodies_keep_the_client_bytes_and_key_order() {
        let raw = r#"{"temperature":0.50,"model":"m","prompt":[1,2],"stream":true,"stream_options":{"include_usage":true},"max_tokens":50,"max_completion_tokens":40,"min_tokens":3}"#;
        let r = req(raw);
        let p = prefill_bytes(&r, &[], KvConnector::Nixl);
        assert!(p.starts_with(
            br#"{"temperature":0.50,"model":"m","prompt":[1,2],"stream":false,"max_tokens":1"#
        ));
        let kv =
            kv_params_from_prefill(br#"{"kv_transfer_params":{"remote_engine_id":"e"}}"#).unwrap();
        let d = decode_bytes(&r, kv, KvConnector::Nixl);
        assert_eq!(
            std::str::from_utf8(&d).unwrap(),
            format!(
                r#"{},"kv_transfer_params":{{"do_remote_decode":false,"do_remote_prefill":true,"remote_engine_id":"e"}}}}"#,
                raw.trim_end_matches('}')
            )
        );
        let ec = [json!({"id": "e0"})];
        let a = aggregated_bytes(&r, &ec);
        assert_eq!(
            std::str::from_utf8(&a).unwrap(),
            format!(
                r#"{},"ec_transfer_params":[{{"id":"e0"}}]}}"#,
                raw.trim_end_matches('}')
            )
        );
        assert_eq!(aggregated_bytes(&r, &[]), raw.as_bytes());
        let pe = json_of(&prefill_bytes(&r, &ec, KvConnector::Nixl));
        assert_eq!(pe["ec_transfer_params"], json!([{"id": "e0"}]));
    }

    #[test]
    fn decode_leg_relays_params_verbatim_and_keeps_the_client_body() {
        let r = req(r#"{"model":"m","prompt":"hi","stream":true,"max_tokens":50}"#);
        let kv = kv_params_from_prefill(
            br#"{"id":"x","kv_transfer_params":{"do_remote_prefill":true,"do_remote_decode":false,"remote_engine_id":"e","remote_block_ids":[3,4],"remote_host":"10.0.0.1","remote_port":5600,"tp_size":1,"vendor":{"a":1}}}"#,
        )
        .unwrap();
        assert_eq!(
            json_of(&decode_bytes(&r, kv, KvConnector::Nixl)),
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
