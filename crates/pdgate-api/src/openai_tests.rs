//! Unit tests of `openai.rs`.
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
    assert_eq!(r.body.get("extra"), Some(serde_json::json!(1)));
    let r =
        InferenceRequest::parse(ApiKind::Completions, br#"{"model":"m","prompt":["hi"]}"#).unwrap();
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
fn prompts_decode_from_their_text_without_a_tree() {
    let p = |b: &str| {
        InferenceRequest::parse(
            ApiKind::Completions,
            format!(r#"{{"model":"m","prompt":{b}}}"#).as_bytes(),
        )
        .map(|r| r.prompt)
        .map_err(|e| e.to_string())
    };
    assert_eq!(p("[[7, 8]]"), Ok(PromptInput::Tokens(vec![7, 8])));
    assert_eq!(p(r#"[["x"]]"#), Ok(PromptInput::Text("x".into())));
    assert_eq!(p(r#""a\nb""#), Ok(PromptInput::Text("a\nb".into())));
    assert_eq!(
        p("[0, 4294967295]"),
        Ok(PromptInput::Tokens(vec![0, u32::MAX]))
    );
    for bad in [
        "[]",
        "[1, -1]",
        "[1, 4294967296]",
        r#"[1, "a"]"#,
        "[1.5]",
        r#"["a", "b"]"#,
        "[[1], [2]]",
        "7",
        "{}",
        "[null]",
        "true",
    ] {
        assert_eq!(p(bad).unwrap_err(), BAD_PROMPT.to_string(), "{bad}");
    }
    assert_eq!(p("null").unwrap_err(), "missing required field `prompt`");
}

#[test]
fn chat_flattening_reads_fields_in_any_order() {
    let f = |m: &str| flatten_messages(Some(m)).map_err(|e| e.to_string());
    assert_eq!(
        f(r#"[{"content":"hi","role":"user","name":"x"},{"role":"assistant","tool_calls":[]}]"#),
        Ok("user: hi\nassistant: \n".into())
    );
    assert_eq!(
        f(
            r#"[{"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url","image_url":{"url":"u"}},{"text":7}]}]"#
        ),
        Ok("user: a\n".into())
    );
    assert_eq!(f("[]").unwrap_err(), BAD_MESSAGES.to_string());
    assert_eq!(f(r#""x""#).unwrap_err(), BAD_MESSAGES.to_string());
    assert_eq!(f(r#"["x"]"#).unwrap_err(), BAD_ROLE.to_string());
    assert_eq!(
        f(r#"[{"role":1,"content":"x"}]"#).unwrap_err(),
        BAD_ROLE.to_string()
    );
    assert_eq!(
        f(r#"[{"role":"user","content":7}]"#).unwrap_err(),
        BAD_CONTENT.to_string()
    );
    assert_eq!(
        f(r#"[{"role":"user","content":["x"]}]"#).unwrap_err(),
        BAD_CONTENT.to_string()
    );
    assert_eq!(
        f(r#"[{"role":"user"}]"#).unwrap_err(),
        "missing required field `messages.content`"
    );
}

#[test]
fn a_repeated_top_level_field_is_refused() {
    let e = InferenceRequest::parse(
        ApiKind::Completions,
        br#"{"model":"a","prompt":"x","model":"b"}"#,
    )
    .unwrap_err();
    assert_eq!(e.to_string(), "field `model` is given more than once");
}

#[test]
fn errors_name_the_field() {
    let e = |k, b: &[u8]| InferenceRequest::parse(k, b).unwrap_err().to_string();
    assert!(e(ApiKind::Completions, b"{nope")
        .starts_with("request body is not valid JSON: key must be a string at line 1 column 2"));
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
    assert_eq!(
        e(ApiKind::Completions, br#"{"model":"m","prompt":["a","b"]}"#),
        "field `prompt` must be a string, an array of token ids, or a one-element array of either"
    );
    assert_eq!(
        e(ApiKind::Completions, b"[1]"),
        "request body must be a JSON object"
    );
}
