//! OpenAI response shapes as vLLM writes them: full responses, stream chunks
//! (`text_completion` / `chat.completion.chunk`), the usage chunk, and [`OpenAiWriter`], the
//! [`Writer`] of `/v1/completions` and `/v1/chat/completions`.

use super::writer::{data_event, unix_now, Tally, Writer};
use crate::tokenizer;
use bytes::Bytes;
use pdgate_api::openai::PromptTokensDetails;
use pdgate_api::{ApiKind, Usage};
use serde_json::{json, Value};

/// The terminating SSE event.
pub const DONE: &[u8] = b"data: [DONE]\n\n";

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
        Shape {
            kind,
            id: format!("{prefix}-{request_id}"),
            created: unix_now(),
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

/// The [`Writer`] of completions and chat: `data:` chunks (chat opens with the role chunk),
/// `finish_reason` and a prefill leg's `kv_transfer_params` on the last token chunk, the
/// usage chunk when `stream_options.include_usage`, then `data: [DONE]`.
pub struct OpenAiWriter {
    /// Identity of the answer.
    pub shape: Shape,
    /// `stream_options.include_usage`.
    pub include_usage: bool,
}

impl OpenAiWriter {
    fn usage(&self, t: &Tally) -> Usage {
        usage(t.prompt, t.output * self.shape.n as usize, t.cached)
    }
}

impl Writer for OpenAiWriter {
    fn full(&self, seed: u64, t: &Tally, kv: Option<Value>) -> Vec<u8> {
        let text = tokenizer::output_text(seed, t.output);
        let mut body = self.shape.full(&text, &self.usage(t));
        if let Some(kv) = kv {
            body["kv_transfer_params"] = kv;
        }
        serde_json::to_vec(&body).expect("JSON value serializes")
    }

    fn open(&mut self) -> Vec<Bytes> {
        self.shape.role_chunk().iter().map(data_event).collect()
    }

    fn token(&mut self, seed: u64, index: usize) -> Vec<Bytes> {
        let text = tokenizer::output_token_text(seed, index);
        vec![data_event(&self.shape.token_chunk(&text, None))]
    }

    fn last(&mut self, seed: u64, index: usize, t: &Tally, kv: Option<Value>) -> Vec<Bytes> {
        let text = tokenizer::output_token_text(seed, index);
        let mut chunk = self.shape.token_chunk(&text, Some("length"));
        if let Some(kv) = kv {
            chunk["kv_transfer_params"] = kv;
        }
        let mut out = vec![data_event(&chunk)];
        if self.include_usage {
            out.push(data_event(&self.shape.usage_chunk(&self.usage(t))));
        }
        out.push(Bytes::from_static(DONE));
        out
    }

    fn broken(&mut self, message: &str) -> Option<Bytes> {
        let err = json!({"error": {"message": message, "type": "server_error", "code": 503}});
        Some(data_event(&err))
    }
}
