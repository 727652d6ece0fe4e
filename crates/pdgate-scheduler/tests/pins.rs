//! Phase-aware pins (design.md §5.3): the phase × hint matrix, hint parsing errors, pin
//! validation errors, precedence, aliases, and the seed bug.

mod pins_support;

use pdgate_api::Phase;
use pdgate_scheduler::pins::{check_ranks, pin_for, resolve, validate};
use pdgate_scheduler::{PinError, Resolved};
use pins_support::*;
use serde_json::json;

#[test]
fn phase_by_hint_matrix_follows_the_table() {
    let mut checked = 0;
    for via in [&VIA_HEADERS, &VIA_DYNAMO_HEADERS, &VIA_NVEXT, &VIA_ROUTING] {
        for case in Case::all() {
            let h = hints_for(case, via);
            for phase in [Phase::Prefill, Phase::Decode, Phase::Aggregated] {
                let want = expected(phase, case, via);
                assert_eq!(
                    resolve(phase, &h),
                    want,
                    "{phase} with {case:?} via {}",
                    via.worker
                );
                assert_eq!(pin_for(phase, &h), want.pin, "{phase} {case:?}");
                checked += 1;
            }
            assert_eq!(resolve(Phase::Encode, &h), Resolved::default());
        }
    }
    assert_eq!(checked, 4 * 32 * 3);
}

#[test]
fn check_ranks_needs_each_rank_with_its_own_pin() {
    for case in Case::all() {
        let h = hints_for(case, &VIA_HEADERS);
        let want = if case.prefill_rank && !case.prefill {
            Err("header `x-prefill-dp-rank`: DP rank 5 is given without an endpoint to pin (`x-prefill-instance-id`)".to_string())
        } else if case.rank && !case.worker && !case.decode {
            Err("header `x-dp-rank`: DP rank 3 is given without an endpoint to pin (`x-worker-instance-id` or `x-decode-instance-id`)".to_string())
        } else {
            Ok(())
        };
        assert_eq!(check_ranks(&h).map_err(|e| e.to_string()), want, "{case:?}");
    }
}

// ---------------------------------------------------------------------------------------------
// the seed bug

#[test]
fn seed_bug_a_decode_worker_pin_never_constrains_prefill() {
    let h = hints(&[("x-worker-instance-id", "decode-0")]);
    let snap = fleet();
    // prefill: no pin, the scheduler chooses freely
    assert_eq!(resolve(Phase::Prefill, &h), Resolved::default());
    assert_eq!(resolve(Phase::Prefill, &h).check(), Ok(None));
    // decode: pinned to decode-0, which is valid there
    let d = pin_for(Phase::Decode, &h).unwrap();
    assert_eq!(d, pin("decode-0", None, "x-worker-instance-id", None));
    assert_eq!(
        validate(&d, Phase::Decode, &snap).unwrap().endpoint.name,
        "decode-0"
    );
    // aggregated runs on the decode pick: decode-0 is valid there too
    let a = pin_for(Phase::Aggregated, &h).unwrap();
    assert_eq!(
        validate(&a, Phase::Aggregated, &snap)
            .unwrap()
            .endpoint
            .name,
        "decode-0"
    );
    // decode-0 given as a *prefill* pin is a client mistake: 400 naming the header
    let h = hints(&[("x-prefill-instance-id", "decode-0")]);
    let p = pin_for(Phase::Prefill, &h).unwrap();
    let err = validate(&p, Phase::Prefill, &snap).unwrap_err();
    assert_eq!(err.fault(), pdgate_scheduler::PinFault::Invalid);
    assert_eq!(
        err.to_string(),
        "header `x-prefill-instance-id`: endpoint `decode-0` has role `decode`, which cannot run the prefill phase"
    );
    assert!(matches!(err, PinError::WrongRole { .. }));
    // and the prefill pin does not leak into decode
    assert_eq!(pin_for(Phase::Decode, &h), None);
    assert_eq!(pin_for(Phase::Aggregated, &h), None);
}

// ---------------------------------------------------------------------------------------------
// precedence and aliases

#[test]
fn headers_win_over_body_per_field() {
    let h = parse(
        &[
            ("x-worker-instance-id", "decode-0"),
            ("x-prefill-dp-rank", "1"),
        ],
        json!({"nvext": {"backend_instance_id": 42, "prefill_worker_id": "prefill-0",
                          "prefill_dp_rank": 7, "dp_rank": 2}}),
    )
    .unwrap();
    let w = h.worker_pin.as_ref().unwrap();
    assert_eq!(
        (w.value.as_str(), w.source),
        ("decode-0", "x-worker-instance-id")
    );
    // no prefill header: the body field stands
    let p = h.prefill_pin.as_ref().unwrap();
    assert_eq!(
        (p.value.as_str(), p.source),
        ("prefill-0", "nvext.prefill_worker_id")
    );
    let pr = h.prefill_dp_rank.as_ref().unwrap();
    assert_eq!((pr.value, pr.source), (1, "x-prefill-dp-rank"));
    let r = h.dp_rank.as_ref().unwrap();
    assert_eq!((r.value, r.source), (2, "nvext.dp_rank"));
    assert_eq!(
        pin_for(Phase::Prefill, &h),
        Some(pin(
            "prefill-0",
            Some(1),
            "nvext.prefill_worker_id",
            Some("x-prefill-dp-rank")
        ))
    );
    assert_eq!(
        pin_for(Phase::Decode, &h),
        Some(pin(
            "decode-0",
            Some(2),
            "x-worker-instance-id",
            Some("nvext.dp_rank")
        ))
    );
}

#[test]
fn a_header_wins_over_the_body_even_when_they_differ_but_the_body_is_still_checked() {
    // differing values: header wins silently
    let h = parse(&[("x-dp-rank", "1")], json!({"routing": {"dp_rank": 9}})).unwrap();
    assert_eq!(h.dp_rank.unwrap().value, 1);
    // a malformed body field is reported even though the header wins
    assert_eq!(
        hint_err(&[("x-dp-rank", "1")], json!({"routing": {"dp_rank": true}})).to_string(),
        "field `routing.dp_rank` must be a non-negative integer"
    );
}

#[test]
fn aliases_are_read_and_report_the_name_used() {
    let cases = [
        ("x-dynamo-worker-instance-id", "worker"),
        ("x-dynamo-prefill-instance-id", "prefill"),
        ("x-dynamo-decode-instance-id", "decode"),
    ];
    for (name, which) in cases {
        let h = hints(&[(name, "e-1")]);
        let got = match which {
            "worker" => h.worker_pin,
            "prefill" => h.prefill_pin,
            _ => h.decode_pin,
        }
        .unwrap();
        assert_eq!((got.value.as_str(), got.source), ("e-1", name));
    }
    for name in ["x-dynamo-dp-rank", "x-data-parallel-rank"] {
        let r = hints(&[(name, "4")]).dp_rank.unwrap();
        assert_eq!((r.value, r.source), (4, name));
    }
    let r = hints(&[("x-dynamo-prefill-dp-rank", "6")])
        .prefill_dp_rank
        .unwrap();
    assert_eq!((r.value, r.source), (6, "x-dynamo-prefill-dp-rank"));
}

#[test]
fn name_and_alias_with_the_same_value_are_fine_and_the_name_is_the_source() {
    let h = hints(&[
        ("x-worker-instance-id", "decode-0"),
        ("x-dynamo-worker-instance-id", " decode-0 "),
        ("x-dp-rank", "2"),
        ("x-dynamo-dp-rank", "02"),
    ]);
    assert_eq!(h.worker_pin.unwrap().source, "x-worker-instance-id");
    let r = h.dp_rank.unwrap();
    assert_eq!((r.value, r.source), (2, "x-dp-rank"));
    // nvext and routing agreeing (number and string spellings of one id)
    let h = parse(
        &[],
        json!({"nvext": {"decode_worker_id": 17}, "routing": {"decode_instance_id": "17"}}),
    )
    .unwrap();
    let d = h.decode_pin.unwrap();
    assert_eq!(
        (d.value.as_str(), d.source),
        ("17", "nvext.decode_worker_id")
    );
}

#[test]
fn session_id_is_parsed_with_its_source() {
    let h = hints(&[("x-session-id", "chat-1")]);
    let s = h.session_id.unwrap();
    assert_eq!((s.value.as_str(), s.source), ("chat-1", "x-session-id"));
    let max = "s".repeat(256);
    assert_eq!(
        hints(&[("x-session-id", &max)]).session_id.unwrap().value,
        max
    );
    // no pins from a session id
    let h = hints(&[("x-session-id", "chat-1")]);
    for phase in [Phase::Prefill, Phase::Decode, Phase::Aggregated] {
        assert_eq!(resolve(phase, &h), Resolved::default());
    }
}

// ---------------------------------------------------------------------------------------------
// HintError messages
