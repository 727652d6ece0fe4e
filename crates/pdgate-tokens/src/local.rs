//! The local backend: a Hugging Face `tokenizer.json` through the `tokenizers` crate (the
//! library vLLM's fast tokenizers are), with the model's chat template.
//!
//! Files, as `save_pretrained` writes them into a model directory: `tokenizer.json` (required),
//! `tokenizer_config.json` (optional: `chat_template` — a string, or a list of
//! `{name, template}` of which `default` is used — and the special tokens `bos_token`,
//! `eos_token`, `unk_token`, `pad_token`, each a string or `{"content": …}`), and
//! `chat_template.jinja` (optional; newer transformers write the template there). An explicit
//! template file wins over both.
//!
//! Every file is read through [`pdgate_fleet::file_read::read_regular_file`]: a regular file
//! of at most [`MAX_TOKENIZER_FILE_BYTES`], [`MAX_TOKENIZER_CONFIG_BYTES`] or
//! [`MAX_CHAT_TEMPLATE_BYTES`] (a FIFO, a device such as `/dev/zero` or a directory is refused
//! at once, naming the config key and the path). The optional files are skipped only when
//! they do not exist.

use crate::input::PromptSource;
use crate::template::ChatTemplate;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use tokenizers::Tokenizer;

/// Largest `tokenizer.json` read, bytes. Real ones run to tens of MB (Gemma 3's is about
/// 33 MB, Llama 4's 28 MB, Llama 3's 9 MB); parsing one takes a few times its size.
pub const MAX_TOKENIZER_FILE_BYTES: u64 = 128 << 20;

/// Largest `tokenizer_config.json` read, bytes (real ones: a few KB, about 1 MB with a large
/// `added_tokens_decoder`).
pub const MAX_TOKENIZER_CONFIG_BYTES: u64 = 16 << 20;

/// Largest chat template file read (`chat_template.jinja`, `local.chatTemplate`), bytes (real
/// ones: a few KB).
pub const MAX_CHAT_TEMPLATE_BYTES: u64 = 1 << 20;

/// The `token-producer` key naming the tokenizer (and the directory the other files are
/// looked up in).
const TOKENIZER_KEY: &str = "local.tokenizer";

/// The `token-producer` key naming an explicit chat template file.
const CHAT_TEMPLATE_KEY: &str = "local.chatTemplate";

/// A file of the local backend that could not be read or understood.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// Could not read or parse `path`, named by the config key `key`.
    #[error("{key}: {path}: {message}")]
    File {
        /// The `token-producer` parameter that led to the file: `local.tokenizer` (the
        /// tokenizer and the files found beside it) or `local.chatTemplate`.
        key: &'static str,
        /// The file.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
}

fn file_error(key: &'static str, path: &Path, message: impl ToString) -> LoadError {
    LoadError::File {
        key,
        path: path.to_path_buf(),
        message: message.to_string(),
    }
}

/// The text of `path` (named by `key`), a regular file of at most `max` bytes.
fn read(key: &'static str, path: &Path, max: u64) -> Result<String, LoadError> {
    pdgate_fleet::file_read::read_regular_file(path, max).map_err(|e| file_error(key, path, e))
}

/// [`read`] for a file that may be absent: `None` when nothing is at `path`.
fn read_optional(key: &'static str, path: &Path, max: u64) -> Result<Option<String>, LoadError> {
    match path.try_exists() {
        Ok(false) => Ok(None),
        _ => read(key, path, max).map(Some),
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
        let tok: Tokenizer = read(TOKENIZER_KEY, &json, MAX_TOKENIZER_FILE_BYTES)?
            .parse()
            .map_err(|e| file_error(TOKENIZER_KEY, &json, e))?;
        let config_path = dir.join("tokenizer_config.json");
        let config: serde_json::Value =
            match read_optional(TOKENIZER_KEY, &config_path, MAX_TOKENIZER_CONFIG_BYTES)? {
                Some(text) => serde_json::from_str(&text)
                    .map_err(|e| file_error(TOKENIZER_KEY, &config_path, e))?,
                None => serde_json::Value::Null,
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
        let (template_key, source) = match chat_template {
            Some(p) => (
                CHAT_TEMPLATE_KEY,
                Some((
                    p.to_path_buf(),
                    read(CHAT_TEMPLATE_KEY, p, MAX_CHAT_TEMPLATE_BYTES)?,
                )),
            ),
            None => match read_optional(TOKENIZER_KEY, &jinja, MAX_CHAT_TEMPLATE_BYTES)? {
                Some(text) => (TOKENIZER_KEY, Some((jinja, text))),
                None => (
                    TOKENIZER_KEY,
                    config_template(&config["chat_template"]).map(|t| (config_path, t)),
                ),
            },
        };
        let template = match source {
            Some((path, text)) => Some(
                ChatTemplate::new(&text, special)
                    .map_err(|e| file_error(template_key, &path, e))?,
            ),
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
