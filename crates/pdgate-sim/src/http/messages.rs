//! `POST /v1/messages` (Anthropic Messages as vLLM 0.32 serves it,
//! `vllm/entrypoints/anthropic/{protocol,serving,api_router}.py`): the [`Writer`].
//!
//! - Non-streamed: `AnthropicMessagesResponse.model_dump(exclude_none=True)`:
//!   `{"id":"chatcmpl-<request id>","type":"message","role":"assistant",
//!   "content":[{"type":"text","text":…}],"model":…,"stop_reason":"max_tokens",
//!   "usage":{…}}`, plus `kv_transfer_params` on a prefill leg. The simulator always stops at
//!   the token limit (chat's `finish_reason` `length` maps to `max_tokens`).
//! - `usage` as `_build_anthropic_usage` builds it with prompt-token details on (the
//!   simulator reports `cached_tokens` as vLLM with `--enable-prompt-tokens-details`):
//!   `input_tokens` = prompt − cached, `output_tokens`, `cache_read_input_tokens` = cached.
//! - Streamed: `event: <type>\ndata: <compact json>\n\n` events `message_start` (usage: the
//!   prompt, 0 output), `content_block_start` (`{"type":"text","text":""}`) before the first
//!   delta, one `content_block_delta` (`text_delta`) per token, `content_block_stop`,
//!   `message_delta` (`stop_reason`, `stop_sequence` null, usage), `message_stop`; no `ping`,
//!   no `[DONE]`, no `kv_transfer_params`. Keys in pydantic's declaration order (`type`,
//!   `message`, `delta`, `content_block`, `index`, `error`, `usage`).
//! - A stream broken by the engine ends with `event: error` carrying
//!   `{"type":"error","error":{"type":"internal_error","message":…}}`, without
//!   `message_stop`.

use super::writer::{js, named_event, Tally, Writer};
use crate::tokenizer;
use bytes::Bytes;
use serde::Serialize;
use serde_json::Value;

/// The [`Writer`] of `/v1/messages`.
pub struct MessagesWriter {
    /// `chatcmpl-<request id>`.
    pub id: String,
    /// Served model name.
    pub model: String,
    /// Prompt tokens (for `message_start`).
    pub prompt: usize,
}

#[derive(Serialize)]
struct Usage {
    input_tokens: usize,
    output_tokens: usize,
    cache_read_input_tokens: usize,
}

impl Usage {
    fn of(t: &Tally) -> Self {
        Usage {
            input_tokens: t.prompt.saturating_sub(t.cached),
            output_tokens: t.output,
            cache_read_input_tokens: t.cached,
        }
    }
}

#[derive(Serialize)]
struct TextBlock<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    text: &'a str,
}

#[derive(Serialize)]
struct Full<'a> {
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    role: &'static str,
    content: [TextBlock<'a>; 1],
    model: &'a str,
    stop_reason: &'static str,
    usage: Usage,
    #[serde(skip_serializing_if = "Option::is_none")]
    kv_transfer_params: Option<Value>,
}

impl MessagesWriter {
    fn delta(&self, seed: u64, index: usize) -> Bytes {
        let text = tokenizer::output_token_text(seed, index);
        named_event(
            "content_block_delta",
            &format!(
                r#"{{"type":"content_block_delta","delta":{{"type":"text_delta","text":{}}},"index":0}}"#,
                js(&text)
            ),
        )
    }

    /// `content_block_start` before the first delta, then the delta.
    fn token_events(&self, seed: u64, index: usize) -> Vec<Bytes> {
        let mut out = Vec::with_capacity(2);
        if index == 0 {
            out.push(named_event(
                "content_block_start",
                r#"{"type":"content_block_start","content_block":{"type":"text","text":""},"index":0}"#,
            ));
        }
        out.push(self.delta(seed, index));
        out
    }
}

impl Writer for MessagesWriter {
    fn full(&self, seed: u64, t: &Tally, kv: Option<Value>) -> Vec<u8> {
        let text = tokenizer::output_text(seed, t.output);
        let body = Full {
            id: &self.id,
            kind: "message",
            role: "assistant",
            content: [TextBlock {
                kind: "text",
                text: &text,
            }],
            model: &self.model,
            stop_reason: "max_tokens",
            usage: Usage::of(t),
            kv_transfer_params: kv,
        };
        serde_json::to_vec(&body).expect("the answer serializes")
    }

    fn open(&mut self) -> Vec<Bytes> {
        let start = format!(
            r#"{{"type":"message_start","message":{{"id":{},"type":"message","role":"assistant","content":[],"model":{},"stop_reason":null,"stop_sequence":null,"usage":{{"input_tokens":{},"output_tokens":0}}}}}}"#,
            js(&self.id),
            js(&self.model),
            self.prompt
        );
        vec![named_event("message_start", &start)]
    }

    fn token(&mut self, seed: u64, index: usize) -> Vec<Bytes> {
        self.token_events(seed, index)
    }

    fn last(&mut self, seed: u64, index: usize, t: &Tally, _kv: Option<Value>) -> Vec<Bytes> {
        let mut out = self.token_events(seed, index);
        out.push(named_event(
            "content_block_stop",
            r#"{"type":"content_block_stop","index":0}"#,
        ));
        let usage = serde_json::to_string(&Usage::of(t)).expect("usage serializes");
        out.push(named_event(
            "message_delta",
            &format!(
                r#"{{"type":"message_delta","delta":{{"stop_reason":"max_tokens","stop_sequence":null}},"usage":{usage}}}"#
            ),
        ));
        out.push(named_event("message_stop", r#"{"type":"message_stop"}"#));
        out
    }

    fn broken(&mut self, message: &str) -> Option<Bytes> {
        Some(named_event(
            "error",
            &format!(
                r#"{{"type":"error","error":{{"type":"internal_error","message":{}}}}}"#,
                js(message)
            ),
        ))
    }
}
