//! The prompt of the APIs other than completions and chat, as routing and prefix hashing see
//! it ([`PromptInput`]). Each is deterministic, so the same conversation prefix gives the
//! same prompt prefix, and takes its text where llm-d's estimate tokenizer takes it
//! (`pkg/epp/framework/plugins/requestcontrol/dataproducer/tokenizer/estimate.go`): the
//! system text then each message for Anthropic messages, instructions then input for
//! responses, the token ids themselves for generate.
//!
//! Messages are flattened as chat is ([`crate::openai::flatten_messages`]): one
//! `"{role}: {text}\n"` line per message, a leading `system` line when there is system text.

use crate::openai::{flatten_messages, PromptInput, RequestError, BAD_ROLE};
use crate::raw_object::RawObject;
use serde_json::Value;

/// Anthropic's billing header text block, dropped from `system` (vLLM and llm-d drop it so a
/// per-request hash does not defeat prefix caching).
const BILLING_HEADER: &str = "x-anthropic-billing-header";

/// `POST /v1/messages`: `system` (a string, or text blocks joined without separator, the
/// billing-header block dropped) then each of `messages`. Block contents give their text:
/// `text`, `thinking`, `tool_use` (name then its input as JSON), `tool_result` (its string
/// content or text blocks joined by `\n`); images and redacted thinking give none.
///
/// Errors: `messages` missing or not a non-empty array; a message without a string `role`;
/// a `content` or `system` that is neither a string nor an array of blocks.
pub fn messages_prompt(body: &RawObject) -> Result<PromptInput, RequestError> {
    let mut out = String::new();
    match body.field("system")? {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) => push_line(&mut out, "system", &s),
        Some(Value::Array(blocks)) => {
            let text: String = blocks
                .iter()
                .filter(|b| b.get("type").and_then(Value::as_str) == Some("text"))
                .filter_map(|b| b.get("text").and_then(Value::as_str))
                .filter(|t| !t.starts_with(BILLING_HEADER))
                .collect();
            push_line(&mut out, "system", &text);
        }
        Some(_) => {
            return Err(RequestError::InvalidField {
                field: "system",
                expected: "must be a string or an array of content blocks",
            })
        }
    }
    let messages = non_empty_array(body, "messages")?;
    for m in &messages {
        let role = m.get("role").and_then(Value::as_str).ok_or(BAD_ROLE)?;
        let text = match m.get("content") {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Array(blocks)) => blocks.iter().map(block_text).collect(),
            _ => return Err(BAD_CONTENT),
        };
        push_line(&mut out, role, &text);
    }
    Ok(PromptInput::Text(out))
}

/// The text an Anthropic content block contributes to the prompt.
fn block_text(b: &Value) -> String {
    let s = |k: &str| b.get(k).and_then(Value::as_str).unwrap_or_default();
    match b.get("type").and_then(Value::as_str) {
        Some("text") => s("text").to_string(),
        Some("thinking") => s("thinking").to_string(),
        Some("tool_use") => format!("{}{}", s("name"), b.get("input").unwrap_or(&Value::Null)),
        Some("tool_result") => match b.get("content") {
            Some(Value::String(t)) => t.clone(),
            Some(Value::Array(parts)) => parts
                .iter()
                .filter_map(|p| p.get("text").and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join("\n"),
            _ => String::new(),
        },
        _ => String::new(),
    }
}

/// `POST /v1/responses`: `instructions` as a `system` line, then `input` — a string is one
/// `user` line; a list gives one line per item: a message item (`role`, `content` as a string
/// or parts with `text`) as `"{role}: {text}"`, any other item (function calls, their
/// outputs, reasoning) as `"{type}: {item as JSON}"`.
///
/// Errors: `input` missing; `input` neither a string nor an array; `instructions` not a
/// string.
pub fn responses_prompt(body: &RawObject) -> Result<PromptInput, RequestError> {
    let mut out = String::new();
    match body.field("instructions")? {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) => push_line(&mut out, "system", &s),
        Some(_) => {
            return Err(RequestError::InvalidField {
                field: "instructions",
                expected: "must be a string",
            })
        }
    }
    match body.field("input")? {
        None | Some(Value::Null) => return Err(RequestError::MissingField("input")),
        Some(Value::String(s)) => push_line(&mut out, "user", &s),
        Some(Value::Array(items)) if items.is_empty() => {
            return Err(RequestError::InvalidField {
                field: "input",
                expected: "must be a string or a non-empty array of input items",
            })
        }
        Some(Value::Array(items)) => {
            for item in &items {
                match (
                    item.get("role").and_then(Value::as_str),
                    item.get("content"),
                ) {
                    (Some(role), Some(Value::String(s))) => push_line(&mut out, role, s),
                    (Some(role), Some(Value::Array(parts))) => {
                        let text: String = parts
                            .iter()
                            .filter_map(|p| p.get("text").and_then(Value::as_str))
                            .collect();
                        push_line(&mut out, role, &text);
                    }
                    _ => {
                        let kind = item.get("type").and_then(Value::as_str).unwrap_or("item");
                        push_line(&mut out, kind, &item.to_string());
                    }
                }
            }
        }
        Some(_) => {
            return Err(RequestError::InvalidField {
                field: "input",
                expected: "must be a string or an array of input items",
            })
        }
    }
    Ok(PromptInput::Text(out))
}

/// `POST /v1/embeddings`: `input` as a string, token ids, or a batch (strings joined by `\n`;
/// token-id lists concatenated), or chat `messages` flattened as chat is.
///
/// Errors: neither `input` nor `messages` (naming `input`); an `input` of another shape or
/// empty.
pub fn embeddings_prompt(body: &RawObject) -> Result<PromptInput, RequestError> {
    const BAD: RequestError = RequestError::InvalidField {
        field: "input",
        expected: "must be a non-empty string, array of strings, or array of token ids",
    };
    let input = match body.field("input")? {
        None | Some(Value::Null) if body.raw("messages").is_none() => {
            return Err(RequestError::MissingField("input"))
        }
        None | Some(Value::Null) => {
            return flatten_messages(body.raw("messages")).map(PromptInput::Text)
        }
        Some(v) => v,
    };
    let token = |v: &Value| v.as_u64().and_then(|t| u32::try_from(t).ok());
    let prompt = match input {
        Value::String(s) => PromptInput::Text(s),
        Value::Array(items) if items.is_empty() => return Err(BAD),
        Value::Array(items) if items[0].is_string() => PromptInput::Text(
            items
                .iter()
                .map(|i| i.as_str().ok_or(BAD))
                .collect::<Result<Vec<_>, _>>()?
                .join("\n"),
        ),
        Value::Array(items) if items[0].is_array() => {
            let mut out = Vec::new();
            for i in &items {
                for t in i.as_array().ok_or(BAD)? {
                    out.push(token(t).ok_or(BAD)?);
                }
            }
            PromptInput::Tokens(out)
        }
        Value::Array(items) => PromptInput::Tokens(
            items
                .iter()
                .map(|t| token(t).ok_or(BAD))
                .collect::<Result<_, _>>()?,
        ),
        _ => return Err(BAD),
    };
    if prompt.is_empty() {
        return Err(BAD);
    }
    Ok(prompt)
}

/// `POST /inference/v1/generate`: `token_ids`.
///
/// Errors: missing, or not a non-empty array of token ids (each in `u32`).
pub fn generate_prompt(body: &RawObject) -> Result<PromptInput, RequestError> {
    token_ids(body, "token_ids")
}

/// `POST /tokenize`: `prompt` (a string or token ids, as the engine takes it) or chat
/// `messages`.
///
/// Errors: neither given (naming `prompt`); `prompt` of another type.
pub fn tokenize_prompt(body: &RawObject) -> Result<PromptInput, RequestError> {
    match body.raw("prompt") {
        None | Some("null") if body.raw("messages").is_none() => {
            Err(RequestError::MissingField("prompt"))
        }
        None | Some("null") => flatten_messages(body.raw("messages")).map(PromptInput::Text),
        Some(raw) => crate::openai::prompt_input(raw).map_err(|_| RequestError::InvalidField {
            field: "prompt",
            expected: "must be a string or an array of token ids",
        }),
    }
}

/// `POST /detokenize`: `tokens`.
///
/// Errors: missing, or not a non-empty array of token ids.
pub fn detokenize_prompt(body: &RawObject) -> Result<PromptInput, RequestError> {
    token_ids(body, "tokens")
}

/// `{field}` as a non-empty array of token ids.
fn token_ids(body: &RawObject, field: &'static str) -> Result<PromptInput, RequestError> {
    let raw = match body.raw(field) {
        None | Some("null") => return Err(RequestError::MissingField(field)),
        Some(r) => r,
    };
    match serde_json::from_str::<Vec<u32>>(raw) {
        Ok(t) if !t.is_empty() => Ok(PromptInput::Tokens(t)),
        _ => Err(RequestError::InvalidField {
            field,
            expected: "must be a non-empty array of token ids (integers from 0 to 4294967295)",
        }),
    }
}

const BAD_CONTENT: RequestError = RequestError::InvalidField {
    field: "messages.content",
    expected: "must be a string or an array of content blocks",
};

/// `field` as a non-empty JSON array.
fn non_empty_array(body: &RawObject, field: &'static str) -> Result<Vec<Value>, RequestError> {
    match body.field(field)? {
        None | Some(Value::Null) => Err(RequestError::MissingField(field)),
        Some(Value::Array(a)) if !a.is_empty() => Ok(a),
        Some(_) => Err(RequestError::InvalidField {
            field,
            expected: "must be a non-empty array",
        }),
    }
}

fn push_line(out: &mut String, role: &str, text: &str) {
    out.push_str(role);
    out.push_str(": ");
    out.push_str(text);
    out.push('\n');
}

#[cfg(test)]
#[path = "prompts_tests.rs"]
mod tests;
