//! The OpenAI request view shared by the router and the simulator, and `usage`.
//!
//! A body is parsed once into [`InferenceRequest`]: the few typed fields routing needs, plus the
//! whole JSON object kept verbatim in [`InferenceRequest::body`] so phase bodies can be derived
//! from it and unknown fields pass through.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Which OpenAI API a request came in on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ApiKind {
    /// `POST /v1/completions`
    Completions,
    /// `POST /v1/chat/completions`
    ChatCompletions,
}

impl ApiKind {
    /// The request path.
    pub fn path(self) -> &'static str {
        match self {
            ApiKind::Completions => "/v1/completions",
            ApiKind::ChatCompletions => "/v1/chat/completions",
        }
    }
}

/// The prompt, as routing and prefix hashing see it.
#[derive(Debug, Clone, PartialEq)]
pub enum PromptInput {
    /// A text prompt, or chat messages flattened by [`flatten_messages`].
    Text(String),
    /// A token-id prompt (`prompt: [int, ...]`).
    Tokens(Vec<u32>),
}

impl PromptInput {
    /// Length in bytes (text) or tokens (token ids).
    pub fn len(&self) -> usize {
        match self {
            PromptInput::Text(t) => t.len(),
            PromptInput::Tokens(t) => t.len(),
        }
    }
    /// True when the prompt is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A client mistake in the request body; always answered 400 with this message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    /// Not parsable as JSON; carries serde's message with line and column.
    #[error("request body is not valid JSON: {0}")]
    InvalidJson(String),
    /// JSON, but not an object.
    #[error("request body must be a JSON object")]
    NotAnObject,
    /// A required field is absent.
    #[error("missing required field `{0}`")]
    MissingField(&'static str),
    /// A field has the wrong type or value.
    #[error("field `{field}` {expected}")]
    InvalidField {
        /// Field name (dotted path for nested fields).
        field: &'static str,
        /// What was expected, e.g. "must be a string".
        expected: &'static str,
    },
}

/// A parsed inference request: typed routing fields plus the verbatim body.
#[derive(Debug, Clone)]
pub struct InferenceRequest {
    /// API the request came in on.
    pub kind: ApiKind,
    /// `model`.
    pub model: String,
    /// `stream` (default false).
    pub stream: bool,
    /// `prompt` (completions) or the flattened `messages` (chat).
    pub prompt: PromptInput,
    /// `max_completion_tokens`, else `max_tokens`, when given.
    pub max_tokens: Option<u32>,
    /// `n` (default 1).
    pub n: u32,
    /// The whole body, verbatim.
    pub body: Map<String, Value>,
}

/// Token-limit fields (design.md §5.2): set to 1 on the prefill leg.
pub const TOKEN_LIMIT_FIELDS: &[&str] = &["max_tokens", "max_completion_tokens"];

impl InferenceRequest {
    /// Parses a request body for `kind`.
    ///
    /// Errors: [`RequestError`] naming the field at fault. Batched completions prompts (more
    /// than one prompt in `prompt`) are rejected as `InvalidField { field: "prompt" }`.
    pub fn parse(kind: ApiKind, bytes: &[u8]) -> Result<Self, RequestError> {
        let value: Value =
            serde_json::from_slice(bytes).map_err(|e| RequestError::InvalidJson(e.to_string()))?;
        let Value::Object(body) = value else {
            return Err(RequestError::NotAnObject);
        };
        Self::from_body(kind, body)
    }

    /// Like [`Self::parse`], from an already-decoded object.
    pub fn from_body(kind: ApiKind, body: Map<String, Value>) -> Result<Self, RequestError> {
        let model = match body.get("model") {
            None | Some(Value::Null) => return Err(RequestError::MissingField("model")),
            Some(Value::String(s)) if !s.is_empty() => s.clone(),
            Some(_) => {
                return Err(RequestError::InvalidField {
                    field: "model",
                    expected: "must be a non-empty string",
                })
            }
        };
        let stream = match body.get("stream") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(_) => {
                return Err(RequestError::InvalidField {
                    field: "stream",
                    expected: "must be a boolean",
                })
            }
        };
        let max_tokens = match (
            opt_u32(&body, "max_completion_tokens")?,
            opt_u32(&body, "max_tokens")?,
        ) {
            (Some(m), _) => Some(m),
            (None, m) => m,
        };
        let n = opt_u32(&body, "n")?.unwrap_or(1);
        if n == 0 {
            return Err(RequestError::InvalidField {
                field: "n",
                expected: "must be at least 1",
            });
        }
        let prompt = match kind {
            ApiKind::Completions => parse_prompt(body.get("prompt"))?,
            ApiKind::ChatCompletions => PromptInput::Text(flatten_messages(body.get("messages"))?),
        };
        Ok(InferenceRequest {
            kind,
            model,
            stream,
            prompt,
            max_tokens,
            n,
            body,
        })
    }
}

const U32_RANGE: &str = "must be an integer from 0 to 4294967295";

fn opt_u32(body: &Map<String, Value>, field: &'static str) -> Result<Option<u32>, RequestError> {
    match body.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => n
            .as_u64()
            .and_then(|v| u32::try_from(v).ok())
            .map(Some)
            .ok_or(RequestError::InvalidField {
                field,
                expected: U32_RANGE,
            }),
        Some(_) => Err(RequestError::InvalidField {
            field,
            expected: U32_RANGE,
        }),
    }
}

fn parse_prompt(v: Option<&Value>) -> Result<PromptInput, RequestError> {
    const BAD: RequestError = RequestError::InvalidField {
        field: "prompt",
        expected: "must be a string, an array of token ids, or a one-element array of either",
    };
    match v {
        None | Some(Value::Null) => Err(RequestError::MissingField("prompt")),
        Some(Value::String(s)) => Ok(PromptInput::Text(s.clone())),
        Some(Value::Array(items)) => match items.first() {
            None => Err(BAD),
            Some(Value::Number(_)) => items
                .iter()
                .map(|t| t.as_u64().and_then(|t| u32::try_from(t).ok()).ok_or(BAD))
                .collect::<Result<Vec<u32>, _>>()
                .map(PromptInput::Tokens),
            Some(first @ (Value::String(_) | Value::Array(_))) if items.len() == 1 => {
                parse_prompt(Some(first))
            }
            _ => Err(BAD),
        },
        Some(_) => Err(BAD),
    }
}

/// Flattens chat `messages` into one text, `"{role}: {content}\n"` per message, taking the
/// text parts of array contents. Deterministic, so the same conversation prefix gives the
/// same text prefix (what prefix hashing needs).
///
/// Errors: `messages` missing, not a non-empty array, or an entry without a string `role`.
pub fn flatten_messages(v: Option<&Value>) -> Result<String, RequestError> {
    let Some(v) = v.filter(|v| !v.is_null()) else {
        return Err(RequestError::MissingField("messages"));
    };
    let Some(messages) = v.as_array().filter(|m| !m.is_empty()) else {
        return Err(RequestError::InvalidField {
            field: "messages",
            expected: "must be a non-empty array",
        });
    };
    let mut out = String::new();
    for m in messages {
        let role = m
            .get("role")
            .and_then(Value::as_str)
            .ok_or(RequestError::InvalidField {
                field: "messages.role",
                expected: "must be a string on every message",
            })?;
        out.push_str(role);
        out.push_str(": ");
        match m.get("content") {
            Some(Value::String(s)) => out.push_str(s),
            Some(Value::Array(parts)) => {
                for p in parts {
                    if !p.is_object() {
                        return Err(RequestError::InvalidField {
                            field: "messages.content",
                            expected: "must be a string or an array of content-part objects",
                        });
                    }
                    if let Some(t) = p.get("text").and_then(Value::as_str) {
                        out.push_str(t);
                    }
                }
            }
            // An assistant turn that only carries tool calls has no content (OpenAI).
            None | Some(Value::Null) if role == "assistant" => {}
            None | Some(Value::Null) => return Err(RequestError::MissingField("messages.content")),
            Some(_) => {
                return Err(RequestError::InvalidField {
                    field: "messages.content",
                    expected: "must be a string or an array of content-part objects",
                })
            }
        }
        out.push('\n');
    }
    Ok(out)
}

/// `usage` of a completion response.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Prompt length in tokens.
    pub prompt_tokens: u32,
    /// Generated tokens.
    pub completion_tokens: u32,
    /// prompt + completion.
    pub total_tokens: u32,
    /// Cached prompt tokens (vLLM `prompt_tokens_details.cached_tokens`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_tokens_details: Option<PromptTokensDetails>,
}

/// `usage.prompt_tokens_details`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PromptTokensDetails {
    /// Prompt tokens served from a prefix cache instead of being computed for this request.
    pub cached_tokens: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_text_token_and_chat_prompts() {
        let r = InferenceRequest::parse(
            ApiKind::Completions,
            br#"{"model":"m","prompt":[1,2,3],"max_tokens":5,"stream":true,"extra":1}"#,
        )
        .unwrap();
        assert_eq!(r.prompt, PromptInput::Tokens(vec![1, 2, 3]));
        assert_eq!((r.max_tokens, r.stream, r.n), (Some(5), true, 1));
        assert_eq!(r.body["extra"], 1);
        let r = InferenceRequest::parse(ApiKind::Completions, br#"{"model":"m","prompt":["hi"]}"#)
            .unwrap();
        assert_eq!(r.prompt, PromptInput::Text("hi".into()));
        let r = InferenceRequest::parse(
            ApiKind::ChatCompletions,
            br#"{"model":"m","messages":[{"role":"system","content":"be brief"},{"role":"user","content":[{"type":"text","text":"hi"}]}]}"#,
        )
        .unwrap();
        assert_eq!(
            r.prompt,
            PromptInput::Text("system: be brief\nuser: hi\n".into())
        );
    }

    #[test]
    fn errors_name_the_field() {
        let e = |k, b: &[u8]| InferenceRequest::parse(k, b).unwrap_err().to_string();
        assert!(e(ApiKind::Completions, b"{nope").starts_with(
            "request body is not valid JSON: key must be a string at line 1 column 2"
        ));
        assert_eq!(
            e(ApiKind::Completions, br#"{"prompt":"x"}"#),
            "missing required field `model`"
        );
        assert_eq!(
            e(ApiKind::Completions, br#"{"model":"m"}"#),
            "missing required field `prompt`"
        );
        assert_eq!(
            e(ApiKind::ChatCompletions, br#"{"model":"m"}"#),
            "missing required field `messages`"
        );
        assert_eq!(
            e(
                ApiKind::Completions,
                br#"{"model":"m","prompt":"x","max_tokens":-1}"#
            ),
            "field `max_tokens` must be an integer from 0 to 4294967295"
        );
        assert_eq!(e(ApiKind::Completions, br#"{"model":"m","prompt":["a","b"]}"#), "field `prompt` must be a string, an array of token ids, or a one-element array of either");
        assert_eq!(
            e(ApiKind::Completions, b"[1]"),
            "request body must be a JSON object"
        );
    }
}
