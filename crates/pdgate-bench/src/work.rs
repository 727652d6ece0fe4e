//! [`WorkItem`]: one request of a workload, with its arrival time, and the JSON body it becomes.

use pdgate_api::ApiKind;
use serde::Serialize;
use serde_json::{json, Value};

/// One chat message (`{"role", "content"}`), as sent in `messages`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ChatMessage {
    /// `system`, `user` or `assistant`.
    pub role: String,
    /// Message text.
    pub content: String,
}

/// What a request asks for: a token-id completion or a chat.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WorkPrompt {
    /// `POST /v1/completions` with `prompt: [token ids]`.
    Tokens(Vec<u32>),
    /// `POST /v1/chat/completions` with `messages`.
    Chat(Vec<ChatMessage>),
}

/// One request of a workload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkItem {
    /// Arrival time in ms from the start of the run, before `--speedup` is applied.
    pub at_ms: u64,
    /// The prompt.
    pub prompt: WorkPrompt,
    /// Requested output length in tokens (`max_tokens`), before any `--max-output-tokens` cap.
    pub max_tokens: u32,
    /// Conversation index for multi-turn workloads (chat), `None` for traces.
    pub conversation: Option<u32>,
}

impl WorkItem {
    /// The API this item is sent to.
    pub fn api(&self) -> ApiKind {
        match self.prompt {
            WorkPrompt::Tokens(_) => ApiKind::Completions,
            WorkPrompt::Chat(_) => ApiKind::ChatCompletions,
        }
    }

    /// Output length actually requested: `max_tokens` capped by `cap` when given, at least 1.
    pub fn effective_max_tokens(&self, cap: Option<u32>) -> u32 {
        cap.map_or(self.max_tokens, |c| self.max_tokens.min(c))
            .max(1)
    }

    /// The streaming request body for `model`: `model`, `prompt` or `messages`, `max_tokens`
    /// ([`Self::effective_max_tokens`]), `stream: true`,
    /// `stream_options: {"include_usage": true}`, `ignore_eos: true`.
    pub fn body(&self, model: &str, cap: Option<u32>) -> Value {
        let mut body = json!({
            "model": model,
            "max_tokens": self.effective_max_tokens(cap),
            "stream": true,
            "stream_options": {"include_usage": true},
            "ignore_eos": true,
        });
        match &self.prompt {
            WorkPrompt::Tokens(t) => body["prompt"] = json!(t),
            WorkPrompt::Chat(m) => body["messages"] = json!(m),
        }
        body
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn body_caps_output_and_picks_the_api() {
        let item = WorkItem {
            at_ms: 0,
            prompt: WorkPrompt::Tokens(vec![5, 6]),
            max_tokens: 500,
            conversation: None,
        };
        assert_eq!(item.api(), ApiKind::Completions);
        assert_eq!(
            item.body("m", Some(64)),
            json!({"model": "m", "prompt": [5, 6], "max_tokens": 64, "stream": true,
                   "stream_options": {"include_usage": true}, "ignore_eos": true})
        );
        let zero = WorkItem {
            max_tokens: 0,
            ..item
        };
        assert_eq!(zero.effective_max_tokens(None), 1);
        let chat = WorkItem {
            at_ms: 0,
            prompt: WorkPrompt::Chat(vec![ChatMessage {
                role: "user".into(),
                content: "hi".into(),
            }]),
            max_tokens: 8,
            conversation: Some(0),
        };
        assert_eq!(chat.api(), ApiKind::ChatCompletions);
        assert_eq!(
            chat.body("m", None)["messages"],
            json!([{"role": "user", "content": "hi"}])
        );
    }
}
