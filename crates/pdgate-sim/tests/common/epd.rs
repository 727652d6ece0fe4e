//! Helpers of the encoder-disaggregation tests: media parts, chat bodies, encode legs.

use super::*;
use pdgate_api::KvTransferParams;
use pdgate_sim::WorkerHandle;
use serde_json::{json, Value};

/// An `image_url` part for picture `n`.
pub fn image(n: u32) -> Value {
    json!({"type": "image_url", "image_url": {"url": format!("https://example.com/img-{n}.png")}})
}

/// A chat body: one user turn with a question and `media` parts.
pub fn chat(media: &[Value], max_tokens: u32) -> Value {
    let mut content = vec![json!({"type": "text", "text": "what differs between these pictures"})];
    content.extend(media.iter().cloned());
    json!({"model": "pdgate-sim", "messages": [{"role": "user", "content": content}],
           "max_tokens": max_tokens})
}

/// `body` with extra top-level fields.
pub fn with(mut body: Value, fields: Value) -> Value {
    for (k, v) in fields.as_object().unwrap() {
        body[k] = v.clone();
    }
    body
}

/// POSTs `body` to `w`'s `/v1/chat/completions`.
pub async fn post_chat(w: &WorkerHandle, body: Value) -> Resp {
    post(&w.url(), "/v1/chat/completions", body).await
}

/// Encodes `media` in one request on `e`; returns its `ec_transfer_params`.
pub async fn encode(e: &WorkerHandle, media: &[Value]) -> Value {
    let r = post_chat(e, chat(media, 1)).await;
    assert_eq!(r.status, 200, "{}", r.body);
    r.body["ec_transfer_params"].clone()
}

/// A prefill leg (`do_remote_decode`) carrying `ec`.
pub fn prefill_leg(media: &[Value], ec: &Value) -> Value {
    with(
        chat(media, 1),
        json!({"kv_transfer_params": KvTransferParams::prefill_request_json(), "ec_transfer_params": ec}),
    )
}
