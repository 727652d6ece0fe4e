//! Unit tests of `hints.rs`.
use super::*;
use serde_json::json;

fn parse(h: &[(&str, &str)], body: Value) -> Result<RoutingHints, HintError> {
    let body = RawObject::parse(body.to_string().into()).expect("object");
    RoutingHints::parse(|n| h.iter().find(|(k, _)| *k == n).map(|(_, v)| *v), &body)
}

#[test]
fn empty_request_has_no_hints() {
    let hints = parse(&[], json!({"model": "m"})).unwrap();
    assert!(hints.is_empty());
}

#[test]
fn numbers_read_as_decimal_names_and_ranks_accept_strings() {
    let hints = parse(
        &[],
        json!({"nvext": {"backend_instance_id": 7, "dp_rank": "2"},
               "routing": {"prefill_dp_rank": 0}}),
    )
    .unwrap();
    assert_eq!(
        hints.worker_pin,
        Some(Hint {
            value: "7".into(),
            source: "nvext.backend_instance_id"
        })
    );
    assert_eq!(hints.dp_rank.unwrap().value, 2);
    assert_eq!(
        hints.prefill_dp_rank,
        Some(Hint {
            value: 0,
            source: "routing.prefill_dp_rank"
        })
    );
}

#[test]
fn ranks_reject_signs_fractions_and_overflow() {
    for bad in ["+1", "-1", "1.0", "4294967296", " 1 2"] {
        let err = parse(&[("x-dp-rank", bad)], json!({})).unwrap_err();
        assert!(
            matches!(err, HintError::InvalidDpRank { .. }),
            "{bad}: {err}"
        );
    }
    for bad in [json!(-1), json!(1.5), json!(4294967296u64)] {
        let err = parse(&[], json!({"nvext": {"dp_rank": bad}})).unwrap_err();
        assert!(matches!(err, HintError::InvalidDpRank { .. }), "{err}");
    }
}

#[test]
fn shown_cuts_and_escapes() {
    assert_eq!(shown("a\nb"), "a\\nb");
    let long = "x".repeat(MAX_SHOWN_CHARS + 1);
    assert_eq!(shown(&long), format!("{}…", "x".repeat(MAX_SHOWN_CHARS)));
    assert_eq!(shown(&long[1..]), long[1..]);
}

#[test]
fn session_id_length_counts_characters() {
    let ok = "é".repeat(MAX_SESSION_ID_CHARS);
    assert_eq!(
        parse(&[("x-session-id", &ok)], json!({}))
            .unwrap()
            .session_id
            .unwrap()
            .value,
        ok
    );
}
