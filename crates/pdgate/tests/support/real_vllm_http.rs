//! HTTP helpers of the real-vLLM tests (`e2e_real_vllm*.rs`): prompts, whole answers and
//! their SSE events, the `pdgate serve` process in front of the fleet, and readers of
//! metrics and usage.

use super::process::{serve, Served, TempPath};
use super::real_vllm::{series, BLOCK_SIZE, MODEL};
use serde_json::{json, Value};
use std::time::Duration;

/// A deterministic text prompt of `words` words, distinct per `seed` from its first word on
/// (so no two seeds share a KV block).
pub fn text(seed: u32, words: u32) -> String {
    (0..words)
        .map(|i| format!("s{seed}w{} ", i.wrapping_mul(2_654_435_761) % 9973))
        .collect()
}

/// An answer read whole: status, headers, body text.
pub struct Answer {
    pub status: u16,
    pub headers: http::HeaderMap,
    pub text: String,
}

impl Answer {
    pub fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .map_or("", |v| v.to_str().unwrap_or(""))
    }

    pub fn json(&self) -> Value {
        serde_json::from_str(&self.text).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text))
    }

    /// The `data:` payloads of an SSE body, `[DONE]` excluded; panics when the stream does
    /// not end with `data: [DONE]` or a payload is not JSON.
    pub fn sse(&self) -> Vec<Value> {
        assert!(
            self.text.ends_with("data: [DONE]\n\n"),
            "the stream ends with [DONE]: {}",
            self.text
        );
        (self.text.split("\n\n"))
            .filter_map(|e| e.strip_prefix("data: "))
            .filter(|d| *d != "[DONE]")
            .map(|d| serde_json::from_str(d).unwrap_or_else(|e| panic!("{e}: {d}")))
            .collect()
    }

    /// `[x-pdgate-pd-mode, prefill endpoint, decode endpoint]`.
    pub fn served(&self) -> [&str; 3] {
        [
            self.header("x-pdgate-pd-mode"),
            self.header("x-pdgate-prefill-endpoint"),
            self.header("x-pdgate-decode-endpoint"),
        ]
    }
}

/// POSTs `body` to `{url}{path}` with `headers` and reads the whole answer.
pub async fn post(url: &str, path: &str, headers: &[(&str, &str)], body: &Value) -> Answer {
    let mut req = reqwest::Client::new()
        .post(format!("{url}{path}"))
        .timeout(Duration::from_secs(120))
        .json(body);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let r = req.send().await.unwrap();
    let (status, headers) = (r.status().as_u16(), r.headers().clone());
    Answer {
        status,
        headers,
        text: r.text().await.unwrap(),
    }
}

/// A completion of `prompt` through `url`: `max_tokens` generated exactly (`ignore_eos`).
pub fn completion(prompt: &str, max_tokens: u32) -> Value {
    json!({"model": MODEL, "prompt": prompt, "max_tokens": max_tokens, "ignore_eos": true})
}

/// `body` streamed, with the usage in a last event (`stream_options.include_usage`).
pub fn streamed(mut body: Value) -> Value {
    body["stream"] = json!(true);
    body["stream_options"] = json!({"include_usage": true});
    body
}

/// The `usage.completion_tokens` of a stream's last event (vLLM may send several tokens in
/// one event, so events are not counted).
pub fn streamed_tokens(events: &[Value]) -> u64 {
    let last = events.last().expect("at least one event");
    last["usage"]["completion_tokens"]
        .as_u64()
        .unwrap_or_else(|| panic!("the last event holds the usage: {last}"))
}

/// `pdgate serve` over the endpoints file `endpoints`, with the built-in config unless
/// `config` is given.
pub fn pdgate(endpoints: &str, config: Option<&str>, stem: &str) -> Served {
    let endpoints = TempPath::write(&format!("{stem}-endpoints"), endpoints);
    let path = endpoints.path().to_str().unwrap().to_string();
    let mut files = vec![endpoints];
    let mut args = vec!["--endpoints".to_string(), path];
    if let Some(yaml) = config {
        let c = TempPath::write(&format!("{stem}-config"), yaml);
        args.extend(["--config".to_string(), c.path().to_str().unwrap().into()]);
        files.push(c);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    serve(&args, &[], files)
}

/// A sample of pdgate's own `/metrics` for `endpoint`, `None` when absent (unknown).
pub fn endpoint_gauge(text: &str, name: &str, endpoint: &str) -> Option<f64> {
    series(text, name, &[("endpoint", endpoint)])
}

/// The engine counter `name{labels}` (summed over engines), 0 when absent.
pub fn counter(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    series(text, name, labels).unwrap_or(0.0)
}

/// What vLLM reports as `cached_tokens` for a prompt of `prompt` tokens whose blocks it all
/// holds: whole blocks only, and at least the last token is computed again.
pub fn cached_when_held(prompt: u64) -> u64 {
    (prompt - 1) / BLOCK_SIZE * BLOCK_SIZE
}

/// `(prompt_tokens, cached_tokens)` of a non-streamed answer's usage.
pub fn usage(body: &Value) -> (u64, u64) {
    let u = &body["usage"];
    let prompt = u["prompt_tokens"].as_u64().expect("usage.prompt_tokens");
    let cached = u["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .expect("usage.prompt_tokens_details.cached_tokens (--enable-prompt-tokens-details)");
    (prompt, cached)
}
