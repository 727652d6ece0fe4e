//! Exact messages of every routing-hint and pin error (design.md §5.3, §5.5).

mod pins_support;

use pdgate_api::hints::HintError;
use pdgate_api::{Phase, Role};
use pdgate_scheduler::pins::{phase_accepts, pin_for, resolve, validate};
use pdgate_scheduler::{Pin, PinError};
use pins_support::*;
use serde_json::json;

#[test]
fn hint_error_messages_name_the_header_or_field() {
    let cases: Vec<(HintError, &str)> = vec![
        (
            hint_err(&[("x-worker-instance-id", "")], json!({})),
            "header `x-worker-instance-id`: value is empty",
        ),
        (
            hint_err(&[("x-dynamo-prefill-instance-id", "  ")], json!({})),
            "header `x-dynamo-prefill-instance-id`: value is empty",
        ),
        (
            hint_err(&[], json!({"nvext": {"decode_worker_id": ""}})),
            "field `nvext.decode_worker_id`: value is empty",
        ),
        (
            hint_err(&[("x-session-id", "")], json!({})),
            "header `x-session-id`: value is empty",
        ),
        (
            hint_err(&[("x-dp-rank", "-1")], json!({})),
            "header `x-dp-rank`: `-1` is not a DP rank (expected an integer from 0 to 4294967295)",
        ),
        (
            hint_err(&[("x-dynamo-prefill-dp-rank", "one")], json!({})),
            "header `x-dynamo-prefill-dp-rank`: `one` is not a DP rank (expected an integer from 0 to 4294967295)",
        ),
        (
            hint_err(&[], json!({"routing": {"prefill_dp_rank": 1.5}})),
            "field `routing.prefill_dp_rank`: `1.5` is not a DP rank (expected an integer from 0 to 4294967295)",
        ),
        (
            hint_err(&[], json!({"nvext": {"dp_rank": 4294967296u64}})),
            "field `nvext.dp_rank`: `4294967296` is not a DP rank (expected an integer from 0 to 4294967295)",
        ),
        (
            hint_err(
                &[
                    ("x-worker-instance-id", "decode-0"),
                    ("x-dynamo-worker-instance-id", "decode-1"),
                ],
                json!({}),
            ),
            "header `x-worker-instance-id` is `decode-0` but header `x-dynamo-worker-instance-id` is `decode-1` (give one value)",
        ),
        (
            hint_err(&[("x-dp-rank", "1"), ("x-data-parallel-rank", "2")], json!({})),
            "header `x-dp-rank` is `1` but header `x-data-parallel-rank` is `2` (give one value)",
        ),
        (
            hint_err(
                &[],
                json!({"nvext": {"prefill_worker_id": 3}, "routing": {"prefill_instance_id": "p-1"}}),
            ),
            "field `nvext.prefill_worker_id` is `3` but field `routing.prefill_instance_id` is `p-1` (give one value)",
        ),
        (
            hint_err(&[], json!({"nvext": {"backend_instance_id": true}})),
            "field `nvext.backend_instance_id` must be a string or a non-negative integer",
        ),
        (
            hint_err(&[], json!({"nvext": {"backend_instance_id": -4}})),
            "field `nvext.backend_instance_id` must be a string or a non-negative integer",
        ),
        (
            hint_err(&[], json!({"routing": {"dp_rank": [1]}})),
            "field `routing.dp_rank` must be a non-negative integer",
        ),
        (
            hint_err(&[], json!({"nvext": "fast"})),
            "field `nvext` must be an object",
        ),
        (
            hint_err(&[], json!({"routing": 1})),
            "field `routing` must be an object",
        ),
        (
            hint_err(&[("x-session-id", &"s".repeat(257))], json!({})),
            "header `x-session-id`: value is 257 characters long (at most 256)",
        ),
    ];
    for (err, want) in &cases {
        assert_eq!(err.to_string(), *want);
        assert_eq!(err.status(), 400);
    }
    let variants = |f: fn(&HintError) -> bool| cases.iter().filter(|(e, _)| f(e)).count();
    assert!(variants(|e| matches!(e, HintError::Empty { .. })) > 0);
    assert!(variants(|e| matches!(e, HintError::InvalidDpRank { .. })) > 0);
    assert!(variants(|e| matches!(e, HintError::Conflict { .. })) > 0);
    assert!(variants(|e| matches!(e, HintError::WrongType { .. })) > 0);
    assert!(variants(|e| matches!(e, HintError::TooLong { .. })) > 0);
}

#[test]
fn hint_errors_quote_long_values_cut_short() {
    let long = "9".repeat(100);
    assert_eq!(
        hint_err(&[("x-dp-rank", &long)], json!({})).to_string(),
        format!(
            "header `x-dp-rank`: `{}…` is not a DP rank (expected an integer from 0 to 4294967295)",
            "9".repeat(64)
        )
    );
}

#[test]
fn nulls_count_as_absent() {
    let h = parse(
        &[],
        json!({"nvext": null, "routing": {"dp_rank": null, "worker_instance_id": null}}),
    )
    .unwrap();
    assert!(h.is_empty());
}

// ---------------------------------------------------------------------------------------------
// PinError messages and statuses

#[test]
fn pin_error_messages_name_the_header_and_the_endpoint() {
    let cases: Vec<(PinError, pdgate_scheduler::PinFault, &str)> = vec![
        (
            resolve(Phase::Decode, &hints(&[("x-dp-rank", "2")]))
                .check()
                .unwrap_err(),
            pdgate_scheduler::PinFault::Invalid,
            "header `x-dp-rank`: DP rank 2 is given without an endpoint to pin (`x-worker-instance-id` or `x-decode-instance-id`)",
        ),
        (
            resolve(
                Phase::Prefill,
                &parse(&[], json!({"nvext": {"prefill_dp_rank": 1}})).unwrap(),
            )
            .check()
            .unwrap_err(),
            pdgate_scheduler::PinFault::Invalid,
            "field `nvext.prefill_dp_rank`: DP rank 1 is given without an endpoint to pin (`x-prefill-instance-id`)",
        ),
        (
            pin_err(&pin("decode-9", None, "x-worker-instance-id", None), Phase::Decode),
            pdgate_scheduler::PinFault::Invalid,
            "header `x-worker-instance-id`: endpoint `decode-9` is not known",
        ),
        (
            pin_err(&pin("pod-z", Some(0), "x-worker-instance-id", Some("x-dp-rank")), Phase::Decode),
            pdgate_scheduler::PinFault::Invalid,
            "header `x-worker-instance-id`: endpoint `pod-z` is not known",
        ),
        (
            pin_err(&pin("pod-a", Some(3), "x-worker-instance-id", Some("x-dp-rank")), Phase::Decode),
            pdgate_scheduler::PinFault::Invalid,
            "header `x-dp-rank`: endpoint `pod-a` has no DP rank 3 (known ranks: 0, 1)",
        ),
        (
            pin_err(&pin("decode-0", Some(1), "x-decode-instance-id", Some("routing.dp_rank")), Phase::Decode),
            pdgate_scheduler::PinFault::Invalid,
            "field `routing.dp_rank`: endpoint `decode-0` has no DP rank 1 (it has no DP ranks)",
        ),
        (
            pin_err(&pin("pod-b", Some(0), "x-prefill-instance-id", Some("x-prefill-dp-rank")), Phase::Prefill),
            pdgate_scheduler::PinFault::Invalid,
            "header `x-prefill-dp-rank`: endpoint `pod-b` has no DP rank 0 (known ranks: 2)",
        ),
        (
            pin_err(&pin("decode-0", None, "x-prefill-instance-id", None), Phase::Prefill),
            pdgate_scheduler::PinFault::Invalid,
            "header `x-prefill-instance-id`: endpoint `decode-0` has role `decode`, which cannot run the prefill phase",
        ),
        (
            pin_err(&pin("plain-0", None, "nvext.prefill_worker_id", None), Phase::Prefill),
            pdgate_scheduler::PinFault::Invalid,
            "field `nvext.prefill_worker_id`: endpoint `plain-0` has no role label, which cannot run the prefill phase",
        ),
        (
            pin_err(&pin("prefill-0", None, "x-worker-instance-id", None), Phase::Decode),
            pdgate_scheduler::PinFault::Invalid,
            "header `x-worker-instance-id`: endpoint `prefill-0` has role `prefill`, which cannot run the decode phase",
        ),
        (
            pin_err(&pin("prefill-0", None, "x-dynamo-worker-instance-id", None), Phase::Aggregated),
            pdgate_scheduler::PinFault::Invalid,
            "header `x-dynamo-worker-instance-id`: endpoint `prefill-0` has role `prefill`, which cannot run the aggregated phase",
        ),
        (
            pin_err(&pin("encode-0", None, "x-worker-instance-id", None), Phase::Aggregated),
            pdgate_scheduler::PinFault::Invalid,
            "header `x-worker-instance-id`: endpoint `encode-0` has role `encode`, which cannot run the aggregated phase",
        ),
        (
            pin_err(&pin("decode-7", None, "x-worker-instance-id", None), Phase::Decode),
            pdgate_scheduler::PinFault::Unavailable,
            "header `x-worker-instance-id`: endpoint `decode-7` is not ready",
        ),
        (
            pin_err(&pin("decode-8", None, "nvext.backend_instance_id", None), Phase::Aggregated),
            pdgate_scheduler::PinFault::Unavailable,
            "field `nvext.backend_instance_id`: endpoint `decode-8` is terminating",
        ),
    ];
    for (err, status, want) in &cases {
        assert_eq!(err.to_string(), *want);
        assert_eq!(err.fault(), *status, "{want}");
    }
    let reasons: std::collections::BTreeSet<&str> =
        cases.iter().map(|(e, _, _)| e.reason()).collect();
    assert_eq!(
        reasons.into_iter().collect::<Vec<_>>(),
        [
            "not_ready",
            "rank_without_endpoint",
            "unknown_endpoint",
            "unknown_rank",
            "wrong_role"
        ]
    );
}

#[test]
fn a_wrong_role_is_reported_before_readiness() {
    let mut p = ep("prefill-9", Some("prefill"));
    p.ready = false;
    let snap = snapshot(vec![p]);
    let err = validate(
        &pin("prefill-9", None, "x-worker-instance-id", None),
        Phase::Decode,
        &snap,
    )
    .unwrap_err();
    assert_eq!(err.fault(), pdgate_scheduler::PinFault::Invalid);
    assert!(matches!(
        err,
        PinError::WrongRole {
            role: Some(Role::Prefill),
            phase: Phase::Decode,
            ..
        }
    ));
}

#[test]
fn unknown_values_are_quoted_cut_short() {
    let long = "e".repeat(80);
    let err = pin_err(
        &pin(&long, None, "x-worker-instance-id", None),
        Phase::Decode,
    );
    assert_eq!(
        err.to_string(),
        format!(
            "header `x-worker-instance-id`: endpoint `{}…` is not known",
            "e".repeat(64)
        )
    );
}

// ---------------------------------------------------------------------------------------------
// validation success paths

#[test]
fn ranks_resolve_by_name_suffix_or_by_the_endpoint_rank_field() {
    let snap = fleet();
    let name = |p: &Pin, phase| validate(p, phase, &snap).map(|s| s.endpoint.name.clone());
    // <pod>-rank-<i>
    let h = hints(&[("x-worker-instance-id", "pod-a"), ("x-dp-rank", "1")]);
    assert_eq!(
        name(&pin_for(Phase::Decode, &h).unwrap(), Phase::Decode),
        Ok("pod-a-rank-1".into())
    );
    // the rank endpoint named directly, with or without its rank
    assert_eq!(
        name(
            &pin("pod-a-rank-0", None, "x-worker-instance-id", None),
            Phase::Decode
        ),
        Ok("pod-a-rank-0".into())
    );
    assert_eq!(
        name(
            &pin(
                "pod-a-rank-0",
                Some(0),
                "x-worker-instance-id",
                Some("x-dp-rank")
            ),
            Phase::Decode
        ),
        Ok("pod-a-rank-0".into())
    );
    // the endpoint named <pod> whose dp_rank is the one asked
    let h = hints(&[
        ("x-prefill-instance-id", "pod-b"),
        ("x-prefill-dp-rank", "2"),
    ]);
    assert_eq!(
        name(&pin_for(Phase::Prefill, &h).unwrap(), Phase::Prefill),
        Ok("pod-b".into())
    );
    // a pod whose only endpoints are its ranks is not an endpoint itself
    assert!(matches!(
        validate(
            &pin("pod-a", None, "x-worker-instance-id", None),
            Phase::Decode,
            &snap
        ),
        Err(PinError::Unknown { .. })
    ));
}

#[test]
fn each_phase_validates_against_its_own_pool() {
    let snap = fleet();
    let ok = |e: &str, phase| {
        validate(&pin(e, None, "x-worker-instance-id", None), phase, &snap).is_ok()
    };
    assert!(ok("prefill-0", Phase::Prefill) && ok("both-0", Phase::Prefill));
    assert!(!ok("plain-0", Phase::Prefill) && !ok("decode-0", Phase::Prefill));
    for phase in [Phase::Decode, Phase::Aggregated] {
        assert!(ok("decode-0", phase) && ok("both-0", phase) && ok("plain-0", phase));
        assert!(!ok("prefill-0", phase) && !ok("encode-0", phase));
    }
    assert!(ok("encode-0", Phase::Encode) && !ok("decode-0", Phase::Encode));
    // the rule is the role filters' rule
    assert!(phase_accepts(Phase::Decode, None) && !phase_accepts(Phase::Prefill, None));
}
