//! The answer side of the engine APIs: a [`Writer`] turns a request the engine ran into one
//! API's wire form, a whole JSON body or the events of a stream, so the pipeline in `infer.rs`
//! is the same for every API. One writer per API: `shape.rs` (completions, chat),
//! `messages.rs`, `responses.rs`, `generate.rs`.
//!
//! The output of a request is deterministic: token `i` is
//! [`tokenizer::output_token_text`]`(seed, i)` with id [`tokenizer::output_token_id`], the
//! seed coming from the prompt, so a streamed and a non-streamed answer to the same prompt
//! carry the same text.

use bytes::Bytes;
use serde::Serialize;
use serde_json::Value;

/// Token counts of a finished request, as `usage` reports them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tally {
    /// Prompt tokens.
    pub prompt: usize,
    /// Prompt tokens found in this engine's prefix cache (`cached_tokens`).
    pub cached: usize,
    /// Output tokens of one choice.
    pub output: usize,
}

/// One API's answer. `seed` is the request's output seed; `kv` the `kv_transfer_params` a
/// prefill leg answers (`None` otherwise).
pub trait Writer: Send + 'static {
    /// The non-streamed JSON body.
    fn full(&self, seed: u64, t: &Tally, kv: Option<Value>) -> Vec<u8>;
    /// Events sent before the first token (may be none).
    fn open(&mut self) -> Vec<Bytes>;
    /// The events of output token `index`, not the last one.
    fn token(&mut self, seed: u64, index: usize) -> Vec<Bytes>;
    /// The events of the last output token (`index`) and the ones that end the stream.
    fn last(&mut self, seed: u64, index: usize, t: &Tally, kv: Option<Value>) -> Vec<Bytes>;
    /// The event that ends a stream broken after its start (the engine stopped), in this
    /// API's form; `None` = the API writes none: the body is cut.
    fn broken(&mut self, message: &str) -> Option<Bytes>;
}

/// A `data: {json}\n\n` event.
pub fn data_event<T: Serialize + ?Sized>(v: &T) -> Bytes {
    let mut out = Vec::with_capacity(128);
    out.extend_from_slice(b"data: ");
    serde_json::to_writer(&mut out, v).expect("JSON value serializes");
    out.extend_from_slice(b"\n\n");
    Bytes::from(out)
}

/// An `event: {name}\ndata: {json}\n\n` event (Anthropic messages, Responses), `json` given
/// as its compact text.
pub fn named_event(name: &str, json: &str) -> Bytes {
    Bytes::from(format!("event: {name}\ndata: {json}\n\n"))
}

/// `s` as a JSON string literal.
pub fn js(s: &str) -> String {
    serde_json::to_string(s).expect("a string serializes")
}

/// Unix seconds now.
pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// vLLM's `random_uuid()`: 16 lowercase hex digits.
pub fn random_uuid() -> String {
    format!("{:016x}", rand::random::<u64>())
}
