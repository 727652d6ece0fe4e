//! The local backend: a Hugging Face `tokenizer.json` through the `tokenizers` crate (the
//! library vLLM's fast tokenizers are), with the model's chat template.
//!
//! Files, as `save_pretrained` writes them into a model directory: `tokenizer.json` (required),
//! `tokenizer_config.json` (optional: `chat_template` — a string, or a list of
//! `{name, template}` of which `default` is used — and the special tokens `bos_token`,
//! `eos_token`, `unk_token`, `pad_token`, each a string or `{"content": …}`), and
//! `chat_template.jinja` (optional; newer transformers write the template there). An explicit
//! template file wins over both.

use crate::input::PromptSource;
use crate::template::ChatTemplate;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use tokenizers::Tokenizer;

/// A file of the local backend that could not be read or understood.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// Could not read or parse `path`.
    #[error("{path}: {message}")]
    File {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
}

fn file_error(path: &Path, message: impl ToString) -> LoadError {
    LoadError::File {
        path: path.to_path_buf(),
        message: message.to_string(),
    }
}

/// A prompt the local backend could not tokenize.
#[derive(Debug, thiserror::Error)]
pub enum LocalError {
    /// A chat request and no chat template was found.
    #[error("no chat template (tokenizer_config.json `chat_template` or chat_template.jinja)")]
    NoTemplate,
    /// The template failed.
    #[error(transparent)]
    Template(#[from] crate::template::TemplateError),
    /// The tokenizer failed.
    #[error("tokenizer: {0}")]
    Encode(String),
}

/// A loaded tokenizer and chat template. `Send + Sync`; tokenizing is CPU-only.
#[derive(Debug)]
pub struct LocalTokenizer {
    tokenizer: Tokenizer,
    template: Option<ChatTemplate>,
}

impl LocalTokenizer {
    /// Loads from `tokenizer`: a model directory or its `tokenizer.json`; the other files are
    /// looked up beside it. `chat_template`: an explicit template file (a `.jinja` text).
    ///
    /// Errors: [`LoadError`] naming the file that is missing or malformed, including a chat
    /// template that does not compile.
    pub fn load(tokenizer: &Path, chat_template: Option<&Path>) -> Result<Self, LoadError> {
        let (dir, json) = match tokenizer.is_dir() {
            true => (tokenizer.to_path_buf(), tokenizer.join("tokenizer.json")),
            false => (
                tokenizer.parent().unwrap_or(Path::new(".")).to_path_buf(),
                tokenizer.to_path_buf(),
            ),
        };
        let tok = Tokenizer::from_file(&json).map_err(|e| file_error(&json, e))?;
        let config_path = dir.join("tokenizer_config.json");
        let config: serde_json::Value = match std::fs::read_to_string(&config_path) {
            Ok(text) => serde_json::from_str(&text).map_err(|e| file_error(&config_path, e))?,
            Err(_) => serde_json::Value::Null,
        };
        let special: BTreeMap<String, String> =
            ["bos_token", "eos_token", "unk_token", "pad_token"]
                .into_iter()
                .filter_map(|k| {
                    let v = &config[k];
                    let text = v.as_str().or_else(|| v["content"].as_str())?;
                    Some((k.to_string(), text.to_string()))
                })
                .collect();
        let jinja = dir.join("chat_template.jinja");
        let source = match chat_template {
            Some(p) => Some((
                p.to_path_buf(),
                std::fs::read_to_string(p).map_err(|e| file_error(p, e))?,
            )),
            None => match std::fs::read_to_string(&jinja) {
                Ok(text) => Some((jinja, text)),
                Err(_) => config_template(&config["chat_template"]).map(|t| (config_path, t)),
            },
        };
        let template = match source {
            Some((path, text)) => {
                Some(ChatTemplate::new(&text, special).map_err(|e| file_error(&path, e))?)
            }
            None => None,
        };
        Ok(LocalTokenizer {
            tokenizer: tok,
            template,
        })
    }

    /// True when a chat template was found.
    pub fn has_chat_template(&self) -> bool {
        self.template.is_some()
    }

    /// The token ids of `prompt`, as vLLM computes them: a text prompt encoded with
    /// `add_special_tokens`; chat messages rendered by the template, then encoded with the
    /// request's `add_special_tokens` (default false); token ids returned as they are.
    ///
    /// Errors: [`LocalError`].
    pub fn tokenize(&self, prompt: &PromptSource<'_>) -> Result<Vec<u32>, LocalError> {
        match prompt {
            PromptSource::Tokens(ids) => Ok(ids.to_vec()),
            PromptSource::Text {
                text,
                add_special_tokens,
            } => self.encode(text, *add_special_tokens),
            PromptSource::Chat(chat) => {
                let template = self.template.as_ref().ok_or(LocalError::NoTemplate)?;
                let text = template.render(chat)?;
                self.encode(&text, chat.add_special_tokens)
            }
        }
    }

    fn encode(&self, text: &str, add_special_tokens: bool) -> Result<Vec<u32>, LocalError> {
        self.tokenizer
            .encode_fast(text, add_special_tokens)
            .map(|e| e.get_ids().to_vec())
            .map_err(|e| LocalError::Encode(e.to_string()))
    }
}

/// `chat_template` of `tokenizer_config.json`: a string, or the `default` entry of a list of
/// named templates.
fn config_template(v: &serde_json::Value) -> Option<String> {
    match v {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Array(list) => list
            .iter()
            .find(|t| t["name"] == "default")
            .and_then(|t| t["template"].as_str())
            .map(str::to_string),
        _ => None,
    }
}
