//! Unit tests of `models`: the bounded `/v1/models` reader and the router's merged list.

use super::*;
use serde_json::json;

/// vLLM's answer for one model, as its OpenAI server writes it (`permission` included).
const VLLM_ANSWER: &str = r#"{"object":"list","data":[{"id":"tiny","object":"model","created":1795941674,"owned_by":"vllm","root":"/models/tiny","parent":null,"max_model_len":2048,"permission":[{"id":"modelperm-4c1f0e0a9b5e4d1c8e2f3a4b5c6d7e8f","object":"model_permission","created":1795941674,"allow_create_engine":false,"allow_sampling":true,"allow_logprobs":true,"allow_search_indices":false,"allow_view":true,"allow_fine_tuning":false,"organization":"*","group":null,"is_blocking":false}]}]}"#;

/// An answer listing `n` models `m0`, `m1`, … (`{"id": …}` only).
fn answer(n: usize) -> String {
    let data: Vec<String> = (0..n).map(|i| format!(r#"{{"id":"m{i}"}}"#)).collect();
    format!(r#"{{"object":"list","data":[{}]}}"#, data.join(","))
}

#[test]
fn a_vllm_answer_keeps_the_openai_fields_and_drops_the_rest() {
    assert_eq!(
        VLLM_ANSWER.len(),
        466,
        "a real answer is a few hundred bytes"
    );
    let cards = parse_models(VLLM_ANSWER.as_bytes()).unwrap();
    assert_eq!(
        cards,
        [
            json!({"id": "tiny", "object": "model", "created": 1795941674_u64, "owned_by": "vllm",
            "root": "/models/tiny", "parent": null, "max_model_len": 2048})
        ]
    );
    // Entries without a string id, and entries that are no objects, are dropped; nested
    // values of kept fields are skipped, scalars of any type kept.
    let cards = parse_models(
        br#"{"data":[{"id":"a","max_model_len":8,"parent":{"x":[1,2]},"created":1.5,"extra":[1]},
            {"id":3},5,"s",[{"id":"x"}],null,{"id":"b","root":["r"],"object":true}]}"#,
    )
    .unwrap();
    assert_eq!(
        cards,
        [
            json!({"id": "a", "max_model_len": 8, "created": 1.5}),
            json!({"id": "b", "object": true})
        ]
    );
    for not_a_list in [
        &b"<html>"[..],
        b"[]",
        b"{}",
        br#"{"data":{"id":"a"}}"#,
        b"{\"data\":[",
    ] {
        assert_eq!(parse_models(not_a_list), Err(ModelsError::NotAList));
        assert_eq!(parse_model_cards(not_a_list), None);
    }
}

#[test]
fn answers_over_a_bound_are_refused_whole_with_their_size() {
    // The count: 256 models are kept, 257 refused (not cut to 256).
    assert_eq!(parse_models(answer(256).as_bytes()).unwrap().len(), 256);
    let e = parse_models(answer(257).as_bytes()).unwrap_err();
    assert_eq!(e, ModelsError::TooMany { count: 257 });
    assert_eq!(e.to_string(), "257 models, over the limit of 256");
    // Many small entries within the byte bound: counted to the end, none past 256 built.
    let many = answer(15_000);
    assert!(many.len() < MAX_MODELS_BYTES, "{}", many.len());
    assert_eq!(
        parse_models(many.as_bytes()),
        Err(ModelsError::TooMany { count: 15_000 })
    );
    // The bytes: the 466k-model answer of the issue (7.8 MB) is refused unread.
    let huge = answer(466_000);
    let started = std::time::Instant::now();
    let e = parse_models(huge.as_bytes()).unwrap_err();
    assert_eq!(
        e,
        ModelsError::TooLarge {
            bytes: Some(7_810_916)
        }
    );
    assert_eq!(
        e.to_string(),
        "answer of 7810916 bytes, over the limit of 262144 bytes"
    );
    assert!(started.elapsed() < std::time::Duration::from_millis(50));
    assert!(e.over_limit() && !ModelsError::NotAList.over_limit());
    // A field: 512 bytes kept, 513 refused, naming the model and the field.
    let long = |n: usize| {
        format!(
            r#"{{"data":[{{"id":"a"}},{{"id":"b","root":"{}"}}]}}"#,
            "r".repeat(n)
        )
    };
    assert_eq!(parse_models(long(512).as_bytes()).unwrap().len(), 2);
    let e = parse_models(long(513).as_bytes()).unwrap_err();
    assert_eq!(
        e.to_string(),
        "data[1].root is 513 bytes, over the limit of 512"
    );
}

#[test]
fn models_merge_by_id_first_seen_wins_fields_kept() {
    use pdgate_scheduler::{Endpoint, EndpointLoad, EndpointState, Snapshot};
    let state = |name: &str, answer: Option<&str>| {
        let load = std::sync::Arc::new(EndpointLoad::default());
        if let Some(a) = answer {
            load.set_model_cards(parse_models(a.as_bytes()).unwrap());
        }
        std::sync::Arc::new(EndpointState {
            endpoint: Endpoint::new(name, "127.0.0.1:1", Default::default()),
            load,
        })
    };
    let ids = state("ids", None);
    ids.load.set_models(vec!["z".into(), "m".into()]);
    let b = r#"{"data":[{"id":"m","created":2,"owned_by":"other"},{"id":"lora","parent":"m"}]}"#;
    let snap = Snapshot {
        endpoints: vec![
            state("a", Some(VLLM_ANSWER.replace("tiny", "m").as_str())),
            state("b", Some(b)),
            state("c", None),
            ids,
        ],
        version: 1,
    };
    assert_eq!(
        merge_model_cards(&snap),
        [
            json!({"id": "lora", "parent": "m"}),
            json!({"id": "m", "object": "model", "created": 1795941674_u64, "owned_by": "vllm",
                "root": "/models/m", "parent": null, "max_model_len": 2048}),
            json!({"id": "z", "object": "model", "owned_by": "pdgate"}),
        ]
    );
}
