use crate::openai::{ApiKind, InferenceRequest, PromptInput, RequestError};

fn parse(kind: ApiKind, body: &str) -> Result<InferenceRequest, RequestError> {
    InferenceRequest::parse(kind, body.as_bytes())
}

fn text(kind: ApiKind, body: &str) -> String {
    match parse(kind, body).unwrap().prompt {
        PromptInput::Text(t) => t,
        PromptInput::Tokens(t) => panic!("tokens {t:?}"),
    }
}

#[test]
fn anthropic_messages_take_system_then_each_block() {
    let body = r#"{"model":"m","max_tokens":9,"stream":true,
        "system":[{"type":"text","text":"x-anthropic-billing-header: cch=1"},{"type":"text","text":"Be "},{"type":"text","text":"brief."}],
        "messages":[{"role":"user","content":"Hi"},
                    {"role":"assistant","content":[{"type":"thinking","thinking":"hm"},{"type":"text","text":"Yes"},{"type":"tool_use","id":"t1","name":"f","input":{"a":1}}]},
                    {"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":[{"type":"text","text":"r1"},{"type":"text","text":"r2"}]},{"type":"image","source":{"type":"url","url":"u"}}]}]}"#;
    assert_eq!(
        text(ApiKind::Messages, body),
        "system: Be brief.\nuser: Hi\nassistant: hmYesf{\"a\":1}\nuser: r1\nr2\n"
    );
    let r = parse(ApiKind::Messages, body).unwrap();
    assert_eq!((r.max_tokens, r.stream, r.n), (Some(9), true, 1));
    assert_eq!(
        text(
            ApiKind::Messages,
            r#"{"model":"m","system":"S","messages":[{"role":"user","content":"a"}]}"#
        ),
        "system: S\nuser: a\n"
    );
}

#[test]
fn anthropic_messages_name_the_bad_field() {
    let cases = [
        (
            r#"{"messages":[{"role":"user","content":"a"}]}"#,
            "missing required field `model`",
        ),
        (r#"{"model":"m"}"#, "missing required field `messages`"),
        (
            r#"{"model":"m","messages":[]}"#,
            "field `messages` must be a non-empty array",
        ),
        (
            r#"{"model":"m","messages":[{"content":"a"}]}"#,
            "field `messages.role` must be a string on every message",
        ),
        (
            r#"{"model":"m","messages":[{"role":"user","content":3}]}"#,
            "field `messages.content` must be a string or an array of content blocks",
        ),
        (
            r#"{"model":"m","system":5,"messages":[{"role":"user","content":"a"}]}"#,
            "field `system` must be a string or an array of content blocks",
        ),
        (
            r#"{"model":"m","max_tokens":-1,"messages":[{"role":"user","content":"a"}]}"#,
            "field `max_tokens` must be an integer from 0 to 4294967295",
        ),
    ];
    for (body, want) in cases {
        assert_eq!(
            parse(ApiKind::Messages, body).unwrap_err().to_string(),
            want,
            "{body}"
        );
    }
}

#[test]
fn responses_take_instructions_then_input_items() {
    assert_eq!(
        text(
            ApiKind::Responses,
            r#"{"model":"m","instructions":"Be brief.","input":"Hi","max_output_tokens":7}"#
        ),
        "system: Be brief.\nuser: Hi\n"
    );
    let body = r#"{"input":[{"role":"user","content":[{"type":"input_text","text":"a"},{"type":"input_text","text":"b"}]},
        {"type":"function_call","call_id":"c","name":"f","arguments":"{}"},{"role":"assistant","content":"ok"}]}"#;
    let r = parse(ApiKind::Responses, body).unwrap();
    assert_eq!(r.model, "", "model is optional on responses");
    assert_eq!(
        text(ApiKind::Responses, body),
        "user: ab\nfunction_call: {\"arguments\":\"{}\",\"call_id\":\"c\",\"name\":\"f\",\"type\":\"function_call\"}\nassistant: ok\n"
    );
    assert_eq!(
        parse(
            ApiKind::Responses,
            r#"{"model":"m","input":"x","max_output_tokens":7}"#
        )
        .unwrap()
        .max_tokens,
        Some(7)
    );
    assert_eq!(
        parse(ApiKind::Responses, r#"{"model":"m"}"#).unwrap_err(),
        RequestError::MissingField("input")
    );
    assert_eq!(
        parse(ApiKind::Responses, r#"{"input":5}"#)
            .unwrap_err()
            .to_string(),
        "field `input` must be a string or an array of input items"
    );
}

#[test]
fn embeddings_take_every_input_shape() {
    let p = |b: &str| parse(ApiKind::Embeddings, b).map(|r| r.prompt);
    assert_eq!(p(r#"{"input":"a b"}"#), Ok(PromptInput::Text("a b".into())));
    assert_eq!(
        p(r#"{"input":["a","b"]}"#),
        Ok(PromptInput::Text("a\nb".into()))
    );
    assert_eq!(p(r#"{"input":[1,2]}"#), Ok(PromptInput::Tokens(vec![1, 2])));
    assert_eq!(
        p(r#"{"input":[[1],[2,3]]}"#),
        Ok(PromptInput::Tokens(vec![1, 2, 3]))
    );
    assert_eq!(
        p(r#"{"messages":[{"role":"user","content":"q"}]}"#),
        Ok(PromptInput::Text("user: q\n".into()))
    );
    for bad in [
        r#"{"input":[]}"#,
        r#"{"input":["a",1]}"#,
        r#"{"input":[-1]}"#,
        r#"{"input":{}}"#,
        r#"{"input":""}"#,
    ] {
        assert_eq!(
            p(bad).unwrap_err().to_string(),
            "field `input` must be a non-empty string, array of strings, or array of token ids",
            "{bad}"
        );
    }
    let r = parse(ApiKind::Embeddings, r#"{"input":"a","stream":true,"n":3}"#).unwrap();
    assert_eq!((r.stream, r.n, r.max_tokens), (false, 1, None));
}

#[test]
fn generate_takes_token_ids_and_the_sampling_limit() {
    let r = parse(
        ApiKind::Generate,
        r#"{"token_ids":[5,6,7],"sampling_params":{"max_tokens":4,"temperature":0},"stream":true}"#,
    )
    .unwrap();
    assert_eq!(r.prompt, PromptInput::Tokens(vec![5, 6, 7]));
    assert_eq!(
        (r.max_tokens, r.stream, r.model.as_str()),
        (Some(4), true, "")
    );
    let e = |b: &str| parse(ApiKind::Generate, b).unwrap_err().to_string();
    assert_eq!(
        e(r#"{"sampling_params":{}}"#),
        "missing required field `token_ids`"
    );
    assert_eq!(
        e(r#"{"token_ids":[],"sampling_params":{}}"#),
        "field `token_ids` must be a non-empty array of token ids (integers from 0 to 4294967295)"
    );
    assert_eq!(
        e(r#"{"token_ids":[1]}"#),
        "missing required field `sampling_params`"
    );
    assert_eq!(
        e(r#"{"token_ids":[1],"sampling_params":3}"#),
        "field `sampling_params` must be an object"
    );
    assert_eq!(
        e(r#"{"token_ids":[1],"sampling_params":{"max_tokens":"x"}}"#),
        "field `sampling_params.max_tokens` must be an integer from 0 to 4294967295"
    );
}

#[test]
fn tokenize_and_detokenize() {
    let p = |k, b: &str| parse(k, b).map(|r| r.prompt);
    assert_eq!(
        p(ApiKind::Tokenize, r#"{"prompt":"hi"}"#),
        Ok(PromptInput::Text("hi".into()))
    );
    assert_eq!(
        p(
            ApiKind::Tokenize,
            r#"{"messages":[{"role":"user","content":"hi"}]}"#
        ),
        Ok(PromptInput::Text("user: hi\n".into()))
    );
    assert_eq!(
        p(ApiKind::Tokenize, r#"{}"#),
        Err(RequestError::MissingField("prompt"))
    );
    assert_eq!(
        p(ApiKind::Tokenize, r#"{"prompt":[1,2,3]}"#),
        Ok(PromptInput::Tokens(vec![1, 2, 3]))
    );
    assert_eq!(
        p(ApiKind::Detokenize, r#"{"tokens":[3,4]}"#),
        Ok(PromptInput::Tokens(vec![3, 4]))
    );
    assert_eq!(
        p(ApiKind::Detokenize, r#"{}"#),
        Err(RequestError::MissingField("tokens"))
    );
}

#[test]
fn which_requests_can_split() {
    let split = |k, b: &str| parse(k, b).unwrap().can_split();
    assert!(split(ApiKind::Completions, r#"{"model":"m","prompt":"a"}"#));
    assert!(!split(
        ApiKind::Completions,
        r#"{"model":"m","prompt":"a","n":2}"#
    ));
    assert!(split(
        ApiKind::Messages,
        r#"{"model":"m","messages":[{"role":"user","content":"a"}]}"#
    ));
    assert!(split(
        ApiKind::Responses,
        r#"{"input":"a","background":false,"previous_response_id":null}"#
    ));
    assert!(!split(
        ApiKind::Responses,
        r#"{"input":"a","previous_response_id":"resp_1"}"#
    ));
    assert!(!split(
        ApiKind::Responses,
        r#"{"input":"a","background":true}"#
    ));
    assert!(split(
        ApiKind::Generate,
        r#"{"token_ids":[1],"sampling_params":{}}"#
    ));
    assert!(!split(ApiKind::Embeddings, r#"{"input":"a"}"#));
    assert!(!split(ApiKind::Tokenize, r#"{"prompt":"a"}"#));
    assert!(!split(ApiKind::Detokenize, r#"{"tokens":[1]}"#));
}

#[test]
fn the_fields_at_fault_are_named() {
    let e = |k, b: &str| parse(k, b).unwrap_err().to_string();
    assert_eq!(
        e(ApiKind::Embeddings, r#"{}"#),
        "missing required field `input`"
    );
    assert_eq!(
        e(ApiKind::Embeddings, r#"{"input":null}"#),
        "missing required field `input`"
    );
    assert_eq!(
        e(ApiKind::Responses, r#"{"input":[]}"#),
        "field `input` must be a string or a non-empty array of input items"
    );
    assert_eq!(
        e(ApiKind::Responses, r#"{"input":"a","background":"yes"}"#),
        "field `background` must be a boolean"
    );
    assert_eq!(
        e(
            ApiKind::Responses,
            r#"{"input":"a","previous_response_id":5}"#
        ),
        "field `previous_response_id` must be a string"
    );
    assert_eq!(
        e(
            ApiKind::Generate,
            r#"{"token_ids":[1],"sampling_params":{"max_tokens":3,"max_tokens":4}}"#
        ),
        "field `sampling_params.max_tokens` is given more than once"
    );
}

/// Regression (adversarial try of issue 13): a field whose JSON text serde_json cannot build a
/// tree of was answered as if absent ("missing required field `messages`").
#[test]
fn an_unreadable_field_is_named_and_not_called_missing() {
    let e = |k, b: &str| parse(k, b).unwrap_err().to_string();
    // A leading surrogate with no trailing `\uDC00`-`\uDFFF` escape after it.
    let lone = |f: &str| format!("field `{f}` cannot be read: unexpected end of hex escape");
    assert_eq!(
        e(
            ApiKind::Messages,
            r#"{"model":"m","max_tokens":2,"messages":[{"role":"user","content":"\ud800"}]}"#
        ),
        lone("messages")
    );
    assert_eq!(
        e(
            ApiKind::Messages,
            r#"{"model":"m","system":"\ud800","messages":[{"role":"user","content":"a"}]}"#
        ),
        lone("system")
    );
    assert_eq!(
        e(ApiKind::Responses, r#"{"input":"\ud800"}"#),
        lone("input")
    );
    assert_eq!(
        e(
            ApiKind::Responses,
            r#"{"input":"a","instructions":"\ud800"}"#
        ),
        lone("instructions")
    );
    assert_eq!(
        e(ApiKind::Embeddings, r#"{"input":"\ud800"}"#),
        lone("input")
    );
    // 130 levels inside a content block: past serde_json's 128.
    let deep = format!(
        r#"{{"model":"m","max_tokens":2,"messages":[{{"role":"user","content":[{{"type":"text","text":"x","extra":{}1{}}}]}}]}}"#,
        "[".repeat(130),
        "]".repeat(130)
    );
    assert_eq!(
        e(ApiKind::Messages, &deep),
        "field `messages` cannot be read: recursion limit exceeded"
    );
}
