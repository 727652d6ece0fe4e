//! What a request contributes to its prompt's tokens: the completions prompt (text or token
//! ids) or the chat messages, plus the body fields that change how vLLM renders them.
//!
//! Defaults are vLLM 0.32's (`vllm/entrypoints/openai/*/protocol.py`): completions add the
//! tokenizer's special tokens (`add_special_tokens: true`); chat does not (the template adds
//! them, `add_special_tokens: false`) and appends the generation prompt
//! (`add_generation_prompt: true`).

use pdgate_api::{ApiKind, InferenceRequest, PromptInput};

/// Body fields of a completions request that the render endpoint reads, forwarded verbatim.
pub const COMPLETION_RENDER_FIELDS: &[&str] = &["add_special_tokens"];

/// Body fields of a chat request that the render endpoint reads, forwarded verbatim.
pub const CHAT_RENDER_FIELDS: &[&str] = &[
    "add_generation_prompt",
    "continue_final_message",
    "add_special_tokens",
    "chat_template",
    "chat_template_kwargs",
    "tools",
    "documents",
];

/// The prompt of one request, as tokenization sees it (borrowed from the request).
///
/// Token-id prompts (completions, embeddings, generate, detokenize) pass through. Anthropic
/// messages and responses are tokenized from their flattened text
/// ([`pdgate_api::prompts`]), not through the chat template as the engine does, so their
/// token ids approximate the engine's.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum PromptSource<'a> {
    /// A completions prompt that already is token ids: nothing to tokenize.
    Tokens(&'a [u32]),
    /// A completions text prompt.
    Text {
        /// The prompt text.
        text: &'a str,
        /// `add_special_tokens` (default true).
        add_special_tokens: bool,
    },
    /// Chat messages, rendered through the chat template then tokenized.
    Chat(ChatSource<'a>),
}

/// A chat request's rendering inputs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ChatSource<'a> {
    /// The JSON text of `messages`.
    pub messages: &'a str,
    /// `add_generation_prompt` (default true).
    pub add_generation_prompt: bool,
    /// `continue_final_message` (default false).
    pub continue_final_message: bool,
    /// `add_special_tokens` (default false).
    pub add_special_tokens: bool,
    /// The JSON text of `chat_template_kwargs`, when given.
    pub chat_template_kwargs: Option<&'a str>,
    /// The JSON text of `tools`, when given.
    pub tools: Option<&'a str>,
    /// The JSON text of `documents`, when given.
    pub documents: Option<&'a str>,
}

impl<'a> PromptSource<'a> {
    /// Reads the prompt source of `req`. A boolean field that is not `true`/`false` keeps its
    /// default (the engine will reject the body anyway; routing does not).
    pub fn of(req: &'a InferenceRequest) -> PromptSource<'a> {
        let flag = |field: &str, default: bool| match req.body.raw(field) {
            Some("true") => true,
            Some("false") => false,
            _ => default,
        };
        let json = |field: &str| req.body.raw(field).filter(|r| *r != "null");
        let chat = |add_generation_prompt: bool| {
            PromptSource::Chat(ChatSource {
                messages: req.body.raw("messages").unwrap_or("[]"),
                add_generation_prompt: flag("add_generation_prompt", add_generation_prompt),
                continue_final_message: flag("continue_final_message", false),
                add_special_tokens: flag("add_special_tokens", false),
                chat_template_kwargs: json("chat_template_kwargs"),
                tools: json("tools"),
                documents: json("documents"),
            })
        };
        // Tokenize and embeddings take chat messages when they have no prompt/input (vLLM:
        // the generation prompt is added by default for tokenize, not for embeddings).
        let has_messages = json("messages").is_some();
        match (req.kind, &req.prompt) {
            (_, PromptInput::Tokens(ids)) => PromptSource::Tokens(ids),
            (ApiKind::ChatCompletions, _) => chat(true),
            (ApiKind::Tokenize, _) if has_messages && json("prompt").is_none() => chat(true),
            (ApiKind::Embeddings, _) if has_messages && json("input").is_none() => chat(false),
            (
                ApiKind::Completions | ApiKind::Tokenize | ApiKind::Embeddings,
                PromptInput::Text(text),
            ) => PromptSource::Text {
                text,
                add_special_tokens: flag("add_special_tokens", true),
            },
            // Anthropic messages and responses: vLLM renders them through the chat template;
            // pdgate tokenizes its flattened text (crate docs: an approximation).
            (_, PromptInput::Text(text)) => PromptSource::Text {
                text,
                add_special_tokens: false,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(kind: ApiKind, body: &str) -> InferenceRequest {
        InferenceRequest::parse(kind, body.as_bytes()).unwrap()
    }

    #[test]
    fn completions_defaults_and_overrides() {
        let r = parse(ApiKind::Completions, r#"{"model":"m","prompt":"hi"}"#);
        assert_eq!(
            PromptSource::of(&r),
            PromptSource::Text {
                text: "hi",
                add_special_tokens: true
            }
        );
        let r = parse(
            ApiKind::Completions,
            r#"{"model":"m","prompt":"hi","add_special_tokens":false}"#,
        );
        assert_eq!(
            PromptSource::of(&r),
            PromptSource::Text {
                text: "hi",
                add_special_tokens: false
            }
        );
        let r = parse(ApiKind::Completions, r#"{"model":"m","prompt":[7,8]}"#);
        assert_eq!(PromptSource::of(&r), PromptSource::Tokens(&[7, 8]));
    }

    #[test]
    fn chat_defaults_and_fields() {
        let r = parse(
            ApiKind::ChatCompletions,
            r#"{"model":"m","messages":[{"role":"user","content":"x"}],"tools":null,"chat_template_kwargs":{"a":1}}"#,
        );
        let PromptSource::Chat(c) = PromptSource::of(&r) else {
            panic!("not chat")
        };
        assert_eq!(c.messages, r#"[{"role":"user","content":"x"}]"#);
        assert!(c.add_generation_prompt && !c.continue_final_message && !c.add_special_tokens);
        assert_eq!(c.chat_template_kwargs, Some(r#"{"a":1}"#));
        assert_eq!(c.tools, None);
    }
}
