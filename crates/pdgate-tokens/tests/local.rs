//! The local backend on a tokenizer made in the test: exact token ids for completions (with
//! and without special tokens), chat (template, generation prompt), and template overrides.

mod common;

use pdgate_api::{ApiKind, InferenceRequest};
use pdgate_tokens::{Backend, LocalTokenizer, Outcome, PromptSource, TokenProducer};

fn ids(tok: &LocalTokenizer, kind: ApiKind, body: &str) -> Vec<u32> {
    let req = InferenceRequest::parse(kind, body.as_bytes()).unwrap();
    tok.tokenize(&PromptSource::of(&req)).unwrap()
}

#[test]
fn completions_text_gets_the_special_token_unless_told_not_to() {
    let tok = LocalTokenizer::load(&common::model_dir("completions"), None).unwrap();
    let c = ApiKind::Completions;
    assert_eq!(
        ids(&tok, c, r#"{"model":"m","prompt":"hello world"}"#),
        [1, 5, 6]
    );
    // Whitespace does not change the tokens: the prefix hashes match across spacing.
    assert_eq!(
        ids(&tok, c, r#"{"model":"m","prompt":"hello \n  world"}"#),
        [1, 5, 6]
    );
    assert_eq!(
        ids(
            &tok,
            c,
            r#"{"model":"m","prompt":"hello world","add_special_tokens":false}"#
        ),
        [5, 6]
    );
    assert_eq!(
        ids(&tok, c, r#"{"model":"m","prompt":"hello nope"}"#),
        [1, 5, 0]
    );
    assert_eq!(ids(&tok, c, r#"{"model":"m","prompt":[9,9,9]}"#), [9, 9, 9]);
}

#[test]
fn chat_renders_the_template_then_tokenizes_without_special_tokens() {
    let dir = common::model_dir("chat");
    let tok = LocalTokenizer::load(&dir.join("tokenizer.json"), None).unwrap();
    assert!(tok.has_chat_template());
    let msgs =
        r#"[{"role":"system","content":"be brief"},{"role":"user","content":"hello world"}]"#;
    let chat = ApiKind::ChatCompletions;
    // "<|bos|>system: be brief\n<|bos|>user: hello world\nassistant: "
    assert_eq!(
        ids(&tok, chat, &format!(r#"{{"model":"m","messages":{msgs}}}"#)),
        [2, 8, 4, 9, 10, 2, 3, 4, 5, 6, 7, 4]
    );
    assert_eq!(
        ids(
            &tok,
            chat,
            &format!(
                r#"{{"model":"m","messages":{msgs},"add_generation_prompt":false,"add_special_tokens":true}}"#
            )
        ),
        [1, 2, 8, 4, 9, 10, 2, 3, 4, 5, 6]
    );
}

#[test]
fn template_file_wins_over_the_config_and_jinja_file_over_config() {
    let dir = common::model_dir("override");
    std::fs::write(
        dir.join("chat_template.jinja"),
        "{% for m in messages %}{{ m.content }} {% endfor %}",
    )
    .unwrap();
    let chat = ApiKind::ChatCompletions;
    let body = r#"{"model":"m","messages":[{"role":"user","content":"hello world"}]}"#;
    let tok = LocalTokenizer::load(&dir, None).unwrap();
    assert_eq!(ids(&tok, chat, body), [5, 6]);
    let explicit = dir.join("explicit.jinja");
    std::fs::write(&explicit, "{{ bos_token }}{{ messages[0].role }}").unwrap();
    let tok = LocalTokenizer::load(&dir, Some(&explicit)).unwrap();
    assert_eq!(ids(&tok, chat, body), [1, 3]);
}

#[test]
fn load_errors_name_the_key_and_the_file() {
    let dir = common::temp_dir("missing");
    let err = LocalTokenizer::load(&dir, None).unwrap_err().to_string();
    let want = format!(
        "local.tokenizer: {}: ",
        dir.join("tokenizer.json").display()
    );
    assert!(err.starts_with(&want), "{err}");
    let dir = common::model_dir("badtemplate");
    let bad = dir.join("bad.jinja");
    std::fs::write(&bad, "{% for %}").unwrap();
    let err = LocalTokenizer::load(&dir, Some(&bad))
        .unwrap_err()
        .to_string();
    let want = format!("local.chatTemplate: {}: ", bad.display());
    assert!(err.starts_with(&want), "{err}");
}

/// Issue 26: a device or a FIFO given as (or found as) a tokenizer file is refused at once,
/// never read to the end or waited on.
#[test]
fn special_files_are_refused_naming_the_key() {
    let t = std::time::Instant::now();
    let err = LocalTokenizer::load(std::path::Path::new("/dev/zero"), None)
        .unwrap_err()
        .to_string();
    assert_eq!(err, "local.tokenizer: /dev/zero: not a regular file");
    let dir = common::model_dir("fifo");
    let fifo = dir.join("chat_template.jinja");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status();
    assert!(made.unwrap().success());
    let err = LocalTokenizer::load(&dir, None).unwrap_err().to_string();
    assert_eq!(
        err,
        format!("local.tokenizer: {}: not a regular file", fifo.display())
    );
    let err = LocalTokenizer::load(&dir, Some(&fifo))
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        format!("local.chatTemplate: {}: not a regular file", fifo.display())
    );
    std::fs::remove_file(&fifo).unwrap();
    let config = dir.join("tokenizer_config.json");
    std::fs::remove_file(&config).unwrap();
    std::os::unix::fs::symlink("/dev/zero", &config).unwrap();
    let err = LocalTokenizer::load(&dir, None).unwrap_err().to_string();
    assert_eq!(
        err,
        format!("local.tokenizer: {}: not a regular file", config.display())
    );
    assert!(t.elapsed() < std::time::Duration::from_secs(5));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn producer_tokenizes_its_model_and_falls_back_on_a_template_error() {
    let dir = common::model_dir("producer");
    let bad = dir.join("raise.jinja");
    std::fs::write(&bad, "{{ raise_exception('roles must alternate') }}").unwrap();
    let good = TokenProducer::new(
        "m",
        Backend::Local(Box::new(LocalTokenizer::load(&dir, None).unwrap())),
    );
    let failing = TokenProducer::new(
        "m",
        Backend::Local(Box::new(LocalTokenizer::load(&dir, Some(&bad)).unwrap())),
    );
    let parse = |kind, b: &str| InferenceRequest::parse(kind, b.as_bytes()).unwrap();
    let text = parse(ApiKind::Completions, r#"{"model":"m","prompt":"hello"}"#);
    let t = good.tokenize(&text, None).await;
    assert_eq!((t.ids, t.outcome), (Some(vec![1, 5]), Outcome::Tokenized));
    let other = parse(
        ApiKind::Completions,
        r#"{"model":"other","prompt":"hello"}"#,
    );
    assert_eq!(
        good.tokenize(&other, None).await.outcome,
        Outcome::OtherModel
    );
    let chat = parse(
        ApiKind::ChatCompletions,
        r#"{"model":"m","messages":[{"role":"user","content":"x"}]}"#,
    );
    let t = failing.tokenize(&chat, None).await;
    assert_eq!(t.ids, None);
    assert!(
        matches!(&t.outcome, Outcome::Fallback(f) if f.to_string().contains("roles must alternate")),
        "{t:?}"
    );
    assert_eq!((good.fallbacks(), failing.fallbacks()), (0, 1));
    let est = TokenProducer::new("m", Backend::Estimate);
    assert_eq!(est.tokenize(&text, None).await.outcome, Outcome::Estimate);
}
