//! A tiny model directory made in the test: a WordLevel `tokenizer.json` built with the
//! `tokenizers` crate (whitespace pre-tokenizer, `<s>` prepended as the special token of
//! single sequences) and a `tokenizer_config.json` carrying the tiny model's chat template
//! (`shared/tools/real-vllm/make_tiny.py`).

use std::collections::HashMap;
use std::path::PathBuf;
use tokenizers::models::wordlevel::WordLevel;
use tokenizers::pre_tokenizers::whitespace::Whitespace;
use tokenizers::processors::template::TemplateProcessing;
use tokenizers::{AddedToken, Tokenizer};

/// The vocabulary: id = position.
pub const VOCAB: &[&str] = &[
    "[UNK]",
    "<s>",
    "<|bos|>",
    "user",
    ":",
    "hello",
    "world",
    "assistant",
    "system",
    "be",
    "brief",
];

/// The tiny model's chat template.
pub const TINY_TEMPLATE: &str = "{% for m in messages %}<|bos|>{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}{% if add_generation_prompt %}assistant: {% endif %}";

/// A fresh directory under the system temp dir, unique to this process and `name`.
pub fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("pdgate-tokens-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Writes `tokenizer.json` and `tokenizer_config.json` into a fresh directory.
pub fn model_dir(name: &str) -> PathBuf {
    model_dir_with(name, VOCAB)
}

/// [`model_dir`] over `words` (id = position; `[UNK]` among them). When `<s>` is one of
/// them it is prepended to single sequences (the post-processor of `add_special_tokens`).
pub fn model_dir_with(name: &str, words: &[&str]) -> PathBuf {
    let dir = temp_dir(name);
    let vocab: HashMap<String, u32> = (words.iter().enumerate())
        .map(|(i, w)| (w.to_string(), i as u32))
        .collect();
    let bos = vocab.get("<s>").copied();
    let model = WordLevel::builder()
        .vocab(vocab.into_iter().collect())
        .unk_token("[UNK]".into())
        .build()
        .unwrap();
    let mut tok = Tokenizer::new(model);
    tok.with_pre_tokenizer(Some(Whitespace {}));
    if let Some(id) = bos {
        tok.with_post_processor(Some(
            TemplateProcessing::builder()
                .try_single("<s> $A")
                .unwrap()
                .special_tokens(vec![("<s>", id)])
                .build()
                .unwrap(),
        ));
    }
    tok.add_special_tokens(&[
        AddedToken::from("<s>", true),
        AddedToken::from("<|bos|>", true),
    ]);
    tok.save(dir.join("tokenizer.json"), false).unwrap();
    let config = serde_json::json!({
        "bos_token": {"content": "<s>"},
        "eos_token": "</s>",
        "chat_template": TINY_TEMPLATE,
    });
    std::fs::write(dir.join("tokenizer_config.json"), config.to_string()).unwrap();
    dir
}
