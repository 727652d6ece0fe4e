//! The OpenAI request view shared by the router and the simulator, and `usage`.
//!
//! A body is parsed once into [`InferenceRequest`]: the few typed fields routing needs, plus the
//! whole JSON object kept verbatim in [`InferenceRequest::body`] so phase bodies can be derived
//! from it and unknown fields pass through.

use crate::prompts;
use crate::raw_object::{RawObject, RawObjectError};
use crate::request_fields::{check_responses_routing_fields, max_tokens, opt_u32};
use bytes::Bytes;
use serde::de::{self, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use std::borrow::Cow;
use std::fmt;

pub use crate::api_kind::ApiKind;

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
    /// A top-level field given twice (its name, cut to 64 bytes): refused, since JSON
    /// readers differ on which copy counts.
    #[error("field `{0}` is given more than once")]
    DuplicateField(String),
    /// More top-level fields than [`crate::raw_object::MAX_FIELDS`].
    #[error(
        "request body has more than {} top-level fields",
        crate::raw_object::MAX_FIELDS
    )]
    TooManyFields,
    /// A field whose JSON text cannot be read as a value (nested deeper than serde_json's
    /// 128 levels, a lone surrogate escape); `reason` is serde_json's, without its position.
    #[error("field `{field}` cannot be read: {reason}")]
    UnreadableField {
        /// Field name.
        field: &'static str,
        /// Why, e.g. "recursion limit exceeded".
        reason: String,
    },
    /// A field has the wrong type or value.
    #[error("field `{field}` {expected}")]
    InvalidField {
        /// Field name (dotted path for nested fields).
        field: &'static str,
        /// What was expected, e.g. "must be a string".
        expected: &'static str,
    },
}

impl RequestError {
    /// [`RequestError::UnreadableField`] for `field` from serde_json's error `e` (its " at
    /// line L column C" dropped: it counts within the field, not the body).
    pub fn unreadable(field: &'static str, e: &serde_json::Error) -> RequestError {
        let text = e.to_string();
        let reason = text.rfind(" at line ").map_or(&text[..], |i| &text[..i]);
        RequestError::UnreadableField {
            field,
            reason: reason.to_string(),
        }
    }
}

/// A parsed inference request: typed routing fields plus the verbatim body.
#[derive(Debug, Clone)]
pub struct InferenceRequest {
    /// API the request came in on.
    pub kind: ApiKind,
    /// `model`; empty when the body names none, which only the APIs whose model is optional
    /// allow ([`ApiKind::requires_model`]: the engine then serves its own model).
    pub model: String,
    /// `stream` (default false; always false on APIs that cannot stream).
    pub stream: bool,
    /// The prompt: `prompt` (completions), the flattened `messages` (chat), or as
    /// [`crate::prompts`] reads the other APIs.
    pub prompt: PromptInput,
    /// The output token limit when given: `max_completion_tokens`, else `max_tokens` (chat,
    /// completions, messages); `max_output_tokens` (responses); `sampling_params.max_tokens`
    /// (generate); never for embeddings, tokenize and detokenize.
    pub max_tokens: Option<u32>,
    /// `n` (default 1; completions and chat only).
    pub n: u32,
    /// The whole body: its bytes and the span of each top-level field ([`RawObject`]: no tree).
    pub body: RawObject,
}

impl InferenceRequest {
    /// Parses a request body for `kind` (a copy of `bytes`; see [`Self::from_bytes`]).
    ///
    /// Errors: [`RequestError`] naming the field at fault. Batched completions prompts (more
    /// than one prompt in `prompt`) are rejected as `InvalidField { field: "prompt" }`.
    pub fn parse(kind: ApiKind, bytes: &[u8]) -> Result<Self, RequestError> {
        Self::from_bytes(kind, Bytes::copy_from_slice(bytes))
    }

    /// Parses a request body for `kind`, keeping `bytes` as the body. No JSON tree is built:
    /// the typed fields are decoded from their spans, a token-id prompt straight into a
    /// `Vec<u32>`, chat messages straight into the flattened text, so peak memory is the
    /// body, the prompt and a few small values (issue 10).
    ///
    /// Errors: as [`Self::parse`], plus [`RequestError::DuplicateField`].
    pub fn from_bytes(kind: ApiKind, bytes: Bytes) -> Result<Self, RequestError> {
        let body = RawObject::parse(bytes).map_err(|e| match e {
            RawObjectError::InvalidJson(m) => RequestError::InvalidJson(m),
            RawObjectError::NotAnObject => RequestError::NotAnObject,
            RawObjectError::DuplicateKey(k) => RequestError::DuplicateField(k),
            RawObjectError::TooManyFields => RequestError::TooManyFields,
        })?;
        let model = match body.raw("model") {
            None | Some("null") if !kind.requires_model() => String::new(),
            None | Some("null") => return Err(RequestError::MissingField("model")),
            Some(raw) => unescaped_string(raw)
                .map(str::to_string)
                .or_else(|| serde_json::from_str::<String>(raw).ok())
                .filter(|s| !s.is_empty())
                .ok_or(RequestError::InvalidField {
                    field: "model",
                    expected: "must be a non-empty string",
                })?,
        };
        let stream = match body.raw("stream") {
            _ if !kind.can_stream() => false,
            None | Some("null") | Some("false") => false,
            Some("true") => true,
            Some(_) => {
                return Err(RequestError::InvalidField {
                    field: "stream",
                    expected: "must be a boolean",
                })
            }
        };
        let max_tokens = max_tokens(kind, &body)?;
        let n = match kind.has_choices() {
            true => opt_u32(&body, "n")?.unwrap_or(1),
            false => 1,
        };
        if n == 0 {
            return Err(RequestError::InvalidField {
                field: "n",
                expected: "must be at least 1",
            });
        }
        if kind == ApiKind::Responses {
            check_responses_routing_fields(&body)?;
        }
        let prompt = match kind {
            ApiKind::Completions => match body.raw("prompt") {
                None | Some("null") => return Err(RequestError::MissingField("prompt")),
                Some(raw) => prompt_input(raw)?,
            },
            ApiKind::ChatCompletions => PromptInput::Text(flatten_messages(body.raw("messages"))?),
            ApiKind::Messages => prompts::messages_prompt(&body)?,
            ApiKind::Responses => prompts::responses_prompt(&body)?,
            ApiKind::Embeddings => prompts::embeddings_prompt(&body)?,
            ApiKind::Generate => prompts::generate_prompt(&body)?,
            ApiKind::Tokenize => prompts::tokenize_prompt(&body)?,
            ApiKind::Detokenize => prompts::detokenize_prompt(&body)?,
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

const BAD_PROMPT: RequestError = RequestError::InvalidField {
    field: "prompt",
    expected: "must be a string, an array of token ids, or a one-element array of either",
};

/// Decodes `prompt`'s JSON text: a string, token ids (`[int, ...]`, each in `u32`) read
/// straight into a vector, or a one-element array of either.
pub(crate) fn prompt_input(raw: &str) -> Result<PromptInput, RequestError> {
    // A string without escapes is its own text: the scan already checked it.
    if let Some(text) = unescaped_string(raw) {
        return Ok(PromptInput::Text(text.to_string()));
    }
    // The separators bound the number of tokens: the vector is sized once.
    let tokens = match raw.starts_with('[') {
        true => memchr::memchr_iter(b',', raw.as_bytes()).count() + 1,
        false => 0,
    };
    let mut de = serde_json::Deserializer::from_str(raw);
    serde::Deserializer::deserialize_any(&mut de, PromptVisitor { tokens }).map_err(|_| BAD_PROMPT)
}

/// The text of the JSON string `raw` when it has no escape (then its bytes between the
/// quotes are the text: the body scan validated the string, control characters included).
fn unescaped_string(raw: &str) -> Option<&str> {
    let inner = raw.strip_prefix('"')?.strip_suffix('"')?;
    memchr::memchr(b'\\', inner.as_bytes())
        .is_none()
        .then_some(inner)
}

/// Decodes a prompt; `tokens` bounds the number of token ids it can hold.
struct PromptVisitor {
    tokens: usize,
}

impl<'de> Visitor<'de> for PromptVisitor {
    type Value = PromptInput;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a prompt")
    }

    fn visit_str<E: de::Error>(self, s: &str) -> Result<PromptInput, E> {
        Ok(PromptInput::Text(s.to_string()))
    }

    fn visit_string<E: de::Error>(self, s: String) -> Result<PromptInput, E> {
        Ok(PromptInput::Text(s))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<PromptInput, A::Error> {
        match seq.next_element_seed(PromptItemSeed(self.tokens))? {
            None => Err(de::Error::custom("empty")),
            Some(PromptItem::Token(first)) => {
                let mut tokens = Vec::with_capacity(self.tokens);
                tokens.push(first);
                while let Some(t) = seq.next_element::<u32>()? {
                    tokens.push(t);
                }
                Ok(PromptInput::Tokens(tokens))
            }
            Some(PromptItem::Nested(p)) => match seq.next_element::<de::IgnoredAny>()? {
                None => Ok(p),
                Some(_) => Err(de::Error::custom("batched")),
            },
        }
    }
}

/// The first element of a prompt array: a token id, or a nested prompt.
enum PromptItem {
    Token(u32),
    Nested(PromptInput),
}

/// Reads a [`PromptItem`]; the bound is passed on to a nested prompt.
struct PromptItemSeed(usize);

impl<'de> de::DeserializeSeed<'de> for PromptItemSeed {
    type Value = PromptItem;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<PromptItem, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for PromptItemSeed {
    type Value = PromptItem;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a token id, a string or an array")
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<PromptItem, E> {
        u32::try_from(v)
            .map(PromptItem::Token)
            .map_err(|_| E::custom("token id out of range"))
    }
    fn visit_str<E: de::Error>(self, s: &str) -> Result<PromptItem, E> {
        Ok(PromptItem::Nested(PromptInput::Text(s.to_string())))
    }
    fn visit_string<E: de::Error>(self, s: String) -> Result<PromptItem, E> {
        Ok(PromptItem::Nested(PromptInput::Text(s)))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<PromptItem, A::Error> {
        PromptVisitor { tokens: self.0 }
            .visit_seq(seq)
            .map(PromptItem::Nested)
    }
}

const BAD_MESSAGES: RequestError = RequestError::InvalidField {
    field: "messages",
    expected: "must be a non-empty array",
};
/// A message without a string `role` (chat and Anthropic messages alike).
pub(crate) const BAD_ROLE: RequestError = RequestError::InvalidField {
    field: "messages.role",
    expected: "must be a string on every message",
};
const BAD_CONTENT: RequestError = RequestError::InvalidField {
    field: "messages.content",
    expected: "must be a string or an array of content-part objects",
};

/// Flattens chat `messages` (its JSON text, `None` when absent) into one text,
/// `"{role}: {content}\n"` per message, taking the text parts of array contents.
/// Deterministic, so the same conversation prefix gives the same text prefix (what prefix
/// hashing needs). Strings are read from the body's bytes; no tree is built.
///
/// Errors: `messages` missing, not a non-empty array, an entry without a string `role`, or a
/// `content` that is neither a string nor an array of objects (missing or `null` content is
/// allowed on assistant turns, which may carry only tool calls, as OpenAI defines).
pub fn flatten_messages(raw: Option<&str>) -> Result<String, RequestError> {
    let raw = match raw {
        None | Some("null") => return Err(RequestError::MissingField("messages")),
        Some(r) => r,
    };
    let messages: Vec<&RawValue> = serde_json::from_str(raw).map_err(|_| BAD_MESSAGES)?;
    if messages.is_empty() {
        return Err(BAD_MESSAGES);
    }
    let mut out = String::new();
    for m in messages {
        let m: MessageView<'_> = serde_json::from_str(m.get()).map_err(|_| BAD_ROLE)?;
        let role = m.role.as_ref().and_then(|r| r.text()).ok_or(BAD_ROLE)?;
        out.push_str(role);
        out.push_str(": ");
        match m.content.map(RawValue::get) {
            // An assistant turn that only carries tool calls has no content (OpenAI).
            None | Some("null") if role == "assistant" => {}
            None | Some("null") => return Err(RequestError::MissingField("messages.content")),
            Some(c) if c.starts_with('"') => {
                let s: Cow<'_, str> = serde_json::from_str(c).map_err(|_| BAD_CONTENT)?;
                out.push_str(&s);
            }
            Some(c) if c.starts_with('[') => {
                let parts: Vec<PartView<'_>> = serde_json::from_str(c).map_err(|_| BAD_CONTENT)?;
                for p in parts {
                    if let Some(t) = p.text.as_ref().and_then(|t| t.text()) {
                        out.push_str(t);
                    }
                }
            }
            Some(_) => return Err(BAD_CONTENT),
        }
        out.push('\n');
    }
    Ok(out)
}

/// A chat message as flattening reads it: `role` and the JSON text of `content`; every other
/// field skipped unread.
#[derive(Deserialize)]
struct MessageView<'a> {
    #[serde(borrow, default)]
    role: Option<Scalar<'a>>,
    #[serde(borrow, default)]
    content: Option<&'a RawValue>,
}

/// A content part as flattening reads it: only `text` (when it is a string). Not an object →
/// an error (the caller's [`BAD_CONTENT`]).
#[derive(Deserialize)]
struct PartView<'a> {
    #[serde(borrow, default)]
    text: Option<Scalar<'a>>,
}

/// A JSON value of which only a string matters: other types are skipped, not built.
enum Scalar<'a> {
    Text(Cow<'a, str>),
    Other,
}

impl Scalar<'_> {
    fn text(&self) -> Option<&str> {
        match self {
            Scalar::Text(t) => Some(t),
            Scalar::Other => None,
        }
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Scalar<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = <&'de RawValue>::deserialize(d)?;
        if !raw.get().starts_with('"') {
            return Ok(Scalar::Other);
        }
        Cow::<'a, str>::deserialize(&mut serde_json::Deserializer::from_str(raw.get()))
            .map(Scalar::Text)
            .map_err(de::Error::custom)
    }
}

/// `usage` of a completion response (read from every API's form by
/// [`crate::usage_reader`]).
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
#[path = "openai_tests.rs"]
mod tests;
