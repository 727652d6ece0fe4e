//! Router-owned body fields: the fields the router itself sets on a phase leg (design.md §5.2:
//! `kv_transfer_params` for the KV handoff, `ec_transfer_params` for encoder output). A client's
//! copies would let it steer an engine (a decode engine pulls KV from the `remote_host` and
//! `remote_port` it is given; a prefill engine keeps a KV lease for a `do_remote_decode` nobody
//! will pull), and an engine's copies in its answers name internal hosts, ports and leases. So
//! a client's copies are removed from its body before any leg is built, on every path, and the
//! engines' copies are removed from what reaches the client. A coordinator's legs keep them:
//! that is the contract between a coordinator and a per-role router.
//!
//! This list is the one place that names them; the edits keep every other byte as it was
//! ([`crate::json_patch`]).

use crate::json_patch::{self, Edit};
use crate::phase_body::KV_TRANSFER_PARAMS;
use bytes::Bytes;
use pdgate_api::media::EC_TRANSFER_PARAMS;
use pdgate_api::spells::Spells;
use pdgate_api::{InferenceRequest, RawObject};

/// Body fields only the router sets on legs.
pub const ROUTER_OWNED_FIELDS: &[&str] = &[KV_TRANSFER_PARAMS, EC_TRANSFER_PARAMS];

/// True when `bytes` may carry a router-owned field (a fast substring test: the JSON key
/// with its quotes, or any `\u` escape, which could spell the key), so that bodies without
/// one are never parsed.
pub fn mentions(bytes: &[u8]) -> bool {
    static SPELLS: std::sync::OnceLock<Spells> = std::sync::OnceLock::new();
    SPELLS
        .get_or_init(|| Spells::new(ROUTER_OWNED_FIELDS))
        .after_quote(bytes)
}

/// Removes the router-owned fields from a client request (its body, which legs are built
/// from). Returns the fields that were there (in list order), for the caller to count and
/// log; nothing is touched when there were none.
///
/// Generate's `sampling_params.extra_args` is where vLLM itself puts these fields (and reads
/// them from when the top-level ones are absent: `scale_out/token_in_token_out/serving.py`),
/// so a client's copies there go too, reported as `sampling_params.extra_args.<field>`.
pub fn strip_request(req: &mut InferenceRequest) -> Vec<&'static str> {
    let mut found: Vec<&'static str> = ROUTER_OWNED_FIELDS
        .iter()
        .copied()
        .filter(|f| req.body.contains_key(f))
        .collect();
    let mut edits: Vec<Edit<'_>> = found.iter().map(|f| Edit::Remove(f)).collect();
    let object = req.kind.leg_params_object();
    let nested = object.and_then(|o| strip_extra_args(&req.body, o, &mut found));
    if let (Some(o), Some(n)) = (object, &nested) {
        edits.push(Edit::Set(o, n));
    }
    if found.is_empty() {
        return found;
    }
    let stripped = Bytes::from(json_patch::patch_object(&req.body, &edits));
    // Re-scanning what was a valid object less some entries cannot fail.
    if let Ok(body) = RawObject::parse(stripped) {
        req.body = body;
    }
    found
}

/// The body's `object` (generate's `sampling_params`) without the router-owned fields of its
/// `extra_args`, when it has any (their reported names are added to `found`); `None`
/// otherwise.
fn strip_extra_args(
    body: &RawObject,
    object: &str,
    found: &mut Vec<&'static str>,
) -> Option<Vec<u8>> {
    let raw = body.raw(object)?;
    if !mentions(raw.as_bytes()) {
        return None;
    }
    let mut sp: serde_json::Map<String, serde_json::Value> = serde_json::from_str(raw).ok()?;
    let extra = sp.get_mut("extra_args")?.as_object_mut()?;
    for (field, name) in ROUTER_OWNED_FIELDS.iter().zip(NESTED_NAMES) {
        if extra.remove(*field).is_some() {
            found.push(name);
        }
    }
    serde_json::to_vec(&sp).ok()
}

/// How a field found in generate's `sampling_params.extra_args` is reported (in
/// [`ROUTER_OWNED_FIELDS`] order).
const NESTED_NAMES: [&str; 2] = [
    "sampling_params.extra_args.kv_transfer_params",
    "sampling_params.extra_args.ec_transfer_params",
];

/// A JSON object answer without its router-owned fields; `None` when it has none (or is not
/// a JSON object: then it is passed as it is).
pub fn strip_json(body: &[u8]) -> Option<Vec<u8>> {
    if !mentions(body) {
        return None;
    }
    let edits: Vec<Edit<'_>> = ROUTER_OWNED_FIELDS
        .iter()
        .map(|f| Edit::Remove(f))
        .collect();
    json_patch::patch(body, &edits)
        .ok()
        .filter(|b| b.as_slice() != body)
}

/// One SSE line (`data: {…}` with its line end) without the router-owned fields of its JSON
/// payload; `None` when it has none.
pub fn strip_sse_line(line: &[u8]) -> Option<Vec<u8>> {
    let payload = line.strip_prefix(b"data:")?;
    let trimmed = payload.trim_ascii_start();
    let lead = line.len() - trimmed.len();
    let end = trimmed.trim_ascii_end().len();
    let stripped = strip_json(&trimmed[..end])?;
    let mut out = Vec::with_capacity(line.len());
    out.extend_from_slice(&line[..lead]);
    out.extend_from_slice(&stripped);
    out.extend_from_slice(&trimmed[end..]);
    Some(out)
}

#[cfg(test)]
mod tests {
    #[test]
    fn generate_loses_the_client_params_in_sampling_extra_args_too() {
        let raw = br#"{"token_ids":[1],"sampling_params":{"max_tokens":3,"extra_args":{"kv_transfer_params":{"do_remote_prefill":true},"x":1}},"kv_transfer_params":{}}"#;
        let mut req = InferenceRequest::parse(pdgate_api::ApiKind::Generate, raw).unwrap();
        assert_eq!(
            super::strip_request(&mut req),
            [
                "kv_transfer_params",
                "sampling_params.extra_args.kv_transfer_params"
            ]
        );
        assert_eq!(
            std::str::from_utf8(req.body.bytes()).unwrap(),
            r#"{"token_ids":[1],"sampling_params":{"extra_args":{"x":1},"max_tokens":3}}"#
        );
        let plain = br#"{"token_ids":[1],"sampling_params":{"max_tokens":3}}"#;
        let mut req = InferenceRequest::parse(pdgate_api::ApiKind::Generate, plain).unwrap();
        assert!(super::strip_request(&mut req).is_empty());
        assert_eq!(req.body.bytes().as_ref(), plain);
    }

    use super::*;
    use pdgate_api::ApiKind;

    #[test]
    fn client_copies_leave_body_and_bytes_and_the_rest_stays_byte_for_byte() {
        let raw = br#"{"model":"m", "kv_transfer_params":{"do_remote_prefill":true,"remote_host":"127.0.0.1","remote_port":9},"prompt":"hi","ec_transfer_params":[1]}"#;
        let mut req = InferenceRequest::parse(ApiKind::Completions, raw).unwrap();
        let found = strip_request(&mut req);
        assert_eq!(found, vec!["kv_transfer_params", "ec_transfer_params"]);
        assert_eq!(&req.body.bytes()[..], br#"{"model":"m","prompt":"hi"}"#);
        assert!(!req.body.contains_key("kv_transfer_params"));
        let clean = br#"{"model":"m",  "prompt":"kv_transfer_params"}"#;
        let mut req = InferenceRequest::parse(ApiKind::Completions, clean).unwrap();
        assert!(strip_request(&mut req).is_empty());
        assert_eq!(&req.body.bytes()[..], clean);
    }

    #[test]
    fn answers_lose_engine_copies_in_json_and_sse() {
        let body = br#"{"id":"c","choices":[],"kv_transfer_params":{"remote_host":"10.0.0.1","remote_port":5600}}"#;
        assert_eq!(strip_json(body).unwrap(), br#"{"id":"c","choices":[]}"#);
        assert_eq!(strip_json(br#"{"id":"c"}"#), None);
        assert_eq!(strip_json(b"not json kv_transfer_params"), None);
        // A string that merely contains the name is not a field: nothing changes.
        assert_eq!(strip_json(br#"{"text":"\"kv_transfer_params\""}"#), None);
        let line = b"data: {\"id\":\"c\",\"kv_transfer_params\":null}\n";
        assert_eq!(strip_sse_line(line).unwrap(), b"data: {\"id\":\"c\"}\n");
        assert_eq!(strip_sse_line(b"data: [DONE]\n"), None);
        assert_eq!(strip_sse_line(b": comment kv_transfer_params\n"), None);
        // A key after a string that merely ends with the name is still found.
        let late = br#"{"text":"xkv_transfer_params","kv_transfer_params":{"remote_port":1}}"#;
        assert_eq!(
            strip_json(late).unwrap(),
            br#"{"text":"xkv_transfer_params"}"#
        );
        // An escaped spelling is the same key.
        let escaped = b"data: {\"id\":\"c\", \"kv\\u005ftransfer_params\":{\"a\":1}}\n";
        assert_eq!(strip_sse_line(escaped).unwrap(), b"data: {\"id\":\"c\"}\n");
        let text = b"data: {\"text\":\"caf\\u00e9\"}\n";
        assert_eq!(
            strip_sse_line(text),
            None,
            "an escape alone changes nothing"
        );
    }
}
