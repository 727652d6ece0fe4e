//! Chat templates: the Jinja template a model ships (`chat_template` in
//! `tokenizer_config.json`, or `chat_template.jinja`) rendered as Hugging Face's
//! `apply_chat_template` does, which is what vLLM calls before tokenizing a chat request.
//!
//! Environment (transformers' `_compile_jinja_template`): `trim_blocks` and `lstrip_blocks`
//! on, loop controls, `raise_exception(msg)`, `strftime_now(fmt)`, `tojson`; Python string and
//! dict methods (`.strip()`, `.items()`, …) through minijinja-contrib's pycompat. Context:
//! `messages`, `add_generation_prompt`, `tools`, `documents`, the special tokens
//! (`bos_token`, `eos_token`, `unk_token`, `pad_token`), then `chat_template_kwargs` on top.

use crate::input::ChatSource;
use minijinja::{Environment, Error, ErrorKind, Value};
use std::collections::BTreeMap;

/// Name the template is stored under in its environment.
const NAME: &str = "chat";

/// A compiled chat template with the special tokens it may reference.
pub struct ChatTemplate {
    env: Environment<'static>,
    special: BTreeMap<String, String>,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate")
            .field("special", &self.special)
            .finish_non_exhaustive()
    }
}

/// A chat template that did not compile or render.
#[derive(Debug, thiserror::Error)]
#[error("chat template: {0}")]
pub struct TemplateError(String);

impl ChatTemplate {
    /// Compiles `source`; `special` maps `bos_token`-style names to their text.
    ///
    /// Errors: a syntax error, with minijinja's line and message.
    pub fn new(source: &str, special: BTreeMap<String, String>) -> Result<Self, TemplateError> {
        let mut env = Environment::new();
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", |msg: String| -> Result<Value, Error> {
            Err(Error::new(ErrorKind::InvalidOperation, msg))
        });
        env.add_function("strftime_now", |_fmt: String| -> Value {
            // Dates in a prompt defeat prefix caching anyway; a fixed text keeps the
            // tokenization deterministic (documented limitation).
            Value::from("")
        });
        env.add_template_owned(NAME, source.to_string())
            .map_err(|e| TemplateError(format!("{e:#}")))?;
        Ok(ChatTemplate { env, special })
    }

    /// Renders `chat` to the prompt text.
    ///
    /// Errors: `messages` (or another JSON field) is not valid JSON, or the template raised.
    pub fn render(&self, chat: &ChatSource<'_>) -> Result<String, TemplateError> {
        let parse = |field: &str, text: &str| -> Result<serde_json::Value, TemplateError> {
            serde_json::from_str(text).map_err(|e| TemplateError(format!("`{field}`: {e}")))
        };
        let mut ctx: BTreeMap<String, Value> = BTreeMap::new();
        for (k, v) in &self.special {
            ctx.insert(k.clone(), Value::from(v.as_str()));
        }
        ctx.insert(
            "messages".into(),
            Value::from_serialize(parse("messages", chat.messages)?),
        );
        ctx.insert(
            "add_generation_prompt".into(),
            Value::from(chat.add_generation_prompt),
        );
        for (field, text) in [("tools", chat.tools), ("documents", chat.documents)] {
            let value = match text {
                Some(t) => Value::from_serialize(parse(field, t)?),
                None => Value::from(()),
            };
            ctx.insert(field.into(), value);
        }
        if let Some(kw) = chat.chat_template_kwargs {
            if let serde_json::Value::Object(map) = parse("chat_template_kwargs", kw)? {
                for (k, v) in map {
                    ctx.insert(k, Value::from_serialize(v));
                }
            }
        }
        let tmpl = self
            .env
            .get_template(NAME)
            .map_err(|e| TemplateError(e.to_string()))?;
        tmpl.render(ctx)
            .map_err(|e| TemplateError(format!("{e:#}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chat(messages: &str, add_generation_prompt: bool) -> ChatSource<'_> {
        ChatSource {
            messages,
            add_generation_prompt,
            continue_final_message: false,
            add_special_tokens: false,
            chat_template_kwargs: None,
            tools: None,
            documents: None,
        }
    }

    /// The tiny model's template (`shared/tools/real-vllm/make_tiny.py`).
    const TINY: &str = "{% for m in messages %}<|bos|>{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}{% if add_generation_prompt %}assistant: {% endif %}";

    #[test]
    fn renders_the_tiny_models_template() {
        let t = ChatTemplate::new(TINY, BTreeMap::new()).unwrap();
        let msgs = r#"[{"role":"system","content":"be brief"},{"role":"user","content":"hi"}]"#;
        assert_eq!(
            t.render(&chat(msgs, true)).unwrap(),
            "<|bos|>system: be brief\n<|bos|>user: hi\nassistant: "
        );
        assert_eq!(
            t.render(&chat(msgs, false)).unwrap(),
            "<|bos|>system: be brief\n<|bos|>user: hi\n"
        );
    }

    #[test]
    fn special_tokens_pycompat_trim_and_raise() {
        let src = "{{ bos_token }}{% for m in messages %}\n  {% if m.role == 'tool' %}{{ raise_exception('no tools') }}{% endif %}\n  [{{ m.role | upper }}] {{ m.content.strip() }}\n{% endfor %}";
        let special = BTreeMap::from([("bos_token".to_string(), "<s>".to_string())]);
        let t = ChatTemplate::new(src, special).unwrap();
        let out = t
            .render(&chat(r#"[{"role":"user","content":"  hi  "}]"#, true))
            .unwrap();
        // lstrip_blocks strips before block tags only; the indent before `[` stays (Jinja2 too).
        assert_eq!(out, "<s>  [USER] hi\n");
        let err = t
            .render(&chat(r#"[{"role":"tool","content":"x"}]"#, true))
            .unwrap_err();
        assert!(err.to_string().contains("no tools"), "{err}");
        let err = t.render(&chat("[{", true)).unwrap_err();
        assert!(err.to_string().contains("`messages`"), "{err}");
    }
}
