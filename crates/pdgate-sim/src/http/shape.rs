//! OpenAI response shapes as vLLM writes them: full responses, stream chunks
//! (`text_completion` / `chat.completion.chunk`), the usage chunk, and the SSE framing.

use bytes::Bytes;
use pdgate_api::openai::PromptTokensDetails;
use pdgate_api::{ApiKind, Usage};
use serde_json::{json, Value};

/// The terminating SSE event.
pub const DONE: &[u8] = b"data: [DONE]\n\n";

/// One SSE event carrying `v`.
pub fn sse(v: &Value) -> Bytes {
    let mut out = Vec::with_capacity(128);
    out.extend_from_slice(b"data: ");
    serde_json::to_writer(&mut out, v).expect("JSON value serializes");
    out.extend_from_slice(b"\n\n");
    Bytes::from(out)
}

/// `usage` with `prompt_tokens_details.cached_tokens`.
pub fn usage(prompt: usize, completion: usize, cached: usize) -> Usage {
    Usage {
        prompt_tokens: prompt as u32,
        completion_tokens: completion as u32,
        total_tokens: (prompt + completion) as u32,
        prompt_tokens_details: Some(PromptTokensDetails {
            cached_tokens: cached as u32,
        }),
    }
}

/// Identity shared by every object of one response.
#[derive(Debug, Clone)]
pub struct Shape {
    /// API of the request.
    pub kind: ApiKind,
    /// Response id (`cmpl-…` / `chatcmpl-…`).
    pub id: String,
    /// Unix seconds.
    pub created: u64,
    /// Model name.
    pub model: String,
    /// Choices per response (`n`).
    pub n: u32,
}

impl Shape {
    /// A shape for `kind`; `request_id` becomes the id's suffix.
    pub fn new(kind: ApiKind, request_id: &str, model: &str, n: u32) -> Self {
        let prefix = match kind {
            ApiKind::Completions => "cmpl",
            _ => "chatcmpl",
        };
        let created = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        Shape {
            kind,
            id: format!("{prefix}-{request_id}"),
            created,
            model: model.to_string(),
            n,
        }
    }

    fn chunk_object(&self) -> &'static str {
        match self.kind {
            ApiKind::Completions => "text_completion",
            _ => "chat.completion.chunk",
        }
    }

    fn envelope(&self, object: &str, choices: Vec<Value>) -> Value {
        json!({
            "id": self.id,
            "object": object,
            "created": self.created,
            "model": self.model,
            "choices": choices,
        })
    }

    /// The opening chat chunk (`delta.role`), sent before any token; `None` for completions.
    pub fn role_chunk(&self) -> Option<Value> {
        (self.kind == ApiKind::ChatCompletions).then(|| {
            let choices = (0..self.n)
                .map(|i| json!({"index": i, "delta": {"role": "assistant", "content": ""}, "logprobs": null, "finish_reason": null}))
                .collect();
            self.envelope(self.chunk_object(), choices)
        })
    }

    /// A chunk carrying one token's `text` in every choice; `finish` on the last token.
    pub fn token_chunk(&self, text: &str, finish: Option<&str>) -> Value {
        let choices = (0..self.n)
            .map(|i| match self.kind {
                ApiKind::Completions => json!({"index": i, "text": text, "logprobs": null, "finish_reason": finish, "stop_reason": null}),
                _ => json!({"index": i, "delta": {"content": text}, "logprobs": null, "finish_reason": finish, "stop_reason": null}),
            })
            .collect();
        self.envelope(self.chunk_object(), choices)
    }

    /// The final usage chunk (`choices: []`), sent when `stream_options.include_usage`.
    pub fn usage_chunk(&self, usage: &Usage) -> Value {
        let mut v = self.envelope(self.chunk_object(), Vec::new());
        v["usage"] = serde_json::to_value(usage).expect("usage serializes");
        v
    }

    /// A non-streamed response with `text` in every choice.
    pub fn full(&self, text: &str, usage: &Usage) -> Value {
        let choices = (0..self.n)
            .map(|i| match self.kind {
                ApiKind::Completions => json!({"index": i, "text": text, "logprobs": null, "finish_reason": "length", "stop_reason": null, "prompt_logprobs": null}),
                _ => json!({"index": i, "message": {"role": "assistant", "content": text, "tool_calls": []}, "logprobs": null, "finish_reason": "length", "stop_reason": null}),
            })
            .collect();
        let object = match self.kind {
            ApiKind::Completions => "text_completion",
            _ => "chat.completion",
        };
        let mut v = self.envelope(object, choices);
        v["usage"] = serde_json::to_value(usage).expect("usage serializes");
        v
    }
}
