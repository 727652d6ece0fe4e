//! Phase-aware pins (design.md §5.3): the phase × hint matrix, hint parsing errors, pin
//! validation errors, precedence, aliases, and the seed bug.

use pdgate_api::hints::{HintError, RoutingHints};
use pdgate_api::{Phase, Role};
use pdgate_scheduler::pins::{check_ranks, phase_accepts, pin_for, resolve, validate};
use pdgate_scheduler::{Endpoint, EndpointLoad, EndpointState, Pin, PinError, Resolved, Snapshot};
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::sync::Arc;

// ---------------------------------------------------------------------------------------------
// helpers

fn obj(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => panic!("not an object"),
    }
}

fn parse(headers: &[(&str, &str)], body: Value) -> Result<RoutingHints, HintError> {
    let body = obj(body);
    RoutingHints::parse(
        |name| headers.iter().find(|(k, _)| *k == name).map(|(_, v)| *v),
        &body,
    )
}

fn hints(headers: &[(&str, &str)]) -> RoutingHints {
    parse(headers, json!({})).unwrap()
}

fn hint_err(headers: &[(&str, &str)], body: Value) -> HintError {
    parse(headers, body).unwrap_err()
}

struct Ep {
    name: &'static str,
    role: Option<&'static str>,
    ready: bool,
    terminating: bool,
    dp_rank: Option<u32>,
}

fn ep(name: &'static str, role: Option<&'static str>) -> Ep {
    Ep {
        name,
        role,
        ready: true,
        terminating: false,
        dp_rank: None,
    }
}

fn snapshot(eps: Vec<Ep>) -> Snapshot {
    let endpoints = eps
        .into_iter()
        .map(|e| {
            let mut labels = BTreeMap::new();
            if let Some(r) = e.role {
                labels.insert("llm-d.ai/role".to_string(), r.to_string());
            }
            let mut endpoint = Endpoint::new(e.name, format!("{}:8000", e.name), labels);
            endpoint.ready = e.ready;
            endpoint.terminating = e.terminating;
            endpoint.dp_rank = e.dp_rank;
            Arc::new(EndpointState {
                endpoint,
                load: Arc::new(EndpointLoad::default()),
            })
        })
        .collect();
    Snapshot {
        endpoints,
        version: 1,
    }
}

/// A typical P/D fleet plus odd cases.
fn fleet() -> Snapshot {
    let mut rank0 = ep("pod-a-rank-0", Some("decode"));
    rank0.dp_rank = Some(0);
    let mut rank1 = ep("pod-a-rank-1", Some("decode"));
    rank1.dp_rank = Some(1);
    let mut by_field = ep("pod-b", Some("prefill"));
    by_field.dp_rank = Some(2);
    let mut not_ready = ep("decode-7", Some("decode"));
    not_ready.ready = false;
    let mut terminating = ep("decode-8", Some("decode"));
    terminating.terminating = true;
    snapshot(vec![
        ep("prefill-0", Some("prefill")),
        ep("decode-0", Some("decode")),
        ep("both-0", Some("prefill-decode")),
        ep("plain-0", None),
        ep("encode-0", Some("encode")),
        rank0,
        rank1,
        by_field,
        not_ready,
        terminating,
    ])
}

fn pin(endpoint: &str, rank: Option<u32>, source: &str, rank_source: Option<&str>) -> Pin {
    Pin {
        endpoint: endpoint.to_string(),
        dp_rank: rank,
        source: source.to_string(),
        rank_source: rank_source.map(str::to_string),
    }
}

fn pin_err(p: &Pin, phase: Phase) -> PinError {
    validate(p, phase, &fleet()).unwrap_err()
}

// ---------------------------------------------------------------------------------------------
// the phase × hint matrix

/// Which hints a case carries.
#[derive(Clone, Copy, Debug)]
struct Case {
    worker: bool,
    prefill: bool,
    decode: bool,
    rank: bool,
    prefill_rank: bool,
}

impl Case {
    fn all() -> Vec<Case> {
        (0u8..32)
            .map(|bits| Case {
                worker: bits & 1 != 0,
                prefill: bits & 2 != 0,
                decode: bits & 4 != 0,
                rank: bits & 8 != 0,
                prefill_rank: bits & 16 != 0,
            })
            .collect()
    }
}

/// How the hints are sent, with the source names each one should report.
struct Via {
    worker: &'static str,
    prefill: &'static str,
    decode: &'static str,
    rank: &'static str,
    prefill_rank: &'static str,
}

const VIA_HEADERS: Via = Via {
    worker: "x-worker-instance-id",
    prefill: "x-prefill-instance-id",
    decode: "x-decode-instance-id",
    rank: "x-dp-rank",
    prefill_rank: "x-prefill-dp-rank",
};
const VIA_DYNAMO_HEADERS: Via = Via {
    worker: "x-dynamo-worker-instance-id",
    prefill: "x-dynamo-prefill-instance-id",
    decode: "x-dynamo-decode-instance-id",
    rank: "x-dynamo-dp-rank",
    prefill_rank: "x-dynamo-prefill-dp-rank",
};
const VIA_NVEXT: Via = Via {
    worker: "nvext.backend_instance_id",
    prefill: "nvext.prefill_worker_id",
    decode: "nvext.decode_worker_id",
    rank: "nvext.dp_rank",
    prefill_rank: "nvext.prefill_dp_rank",
};
const VIA_ROUTING: Via = Via {
    worker: "routing.worker_instance_id",
    prefill: "routing.prefill_instance_id",
    decode: "routing.decode_instance_id",
    rank: "routing.dp_rank",
    prefill_rank: "routing.prefill_dp_rank",
};

const W: &str = "worker-w";
const P: &str = "prefill-p";
const D: &str = "decode-d";
const RANK: u32 = 3;
const PREFILL_RANK: u32 = 5;

/// Builds the request for `case` sent `via`, and parses it.
fn hints_for(case: Case, via: &Via) -> RoutingHints {
    let values: [(bool, &str, String); 5] = [
        (case.worker, via.worker, W.to_string()),
        (case.prefill, via.prefill, P.to_string()),
        (case.decode, via.decode, D.to_string()),
        (case.rank, via.rank, RANK.to_string()),
        (
            case.prefill_rank,
            via.prefill_rank,
            PREFILL_RANK.to_string(),
        ),
    ];
    let mut headers: Vec<(&str, &str)> = Vec::new();
    let mut body = Map::new();
    for (present, source, value) in &values {
        if !present {
            continue;
        }
        match source.split_once('.') {
            None => headers.push((source, value.as_str())),
            Some((container, key)) => {
                let entry = body
                    .entry(container.to_string())
                    .or_insert_with(|| json!({}));
                // ranks as JSON numbers, names as strings
                let v = match value.parse::<u32>() {
                    Ok(n) => json!(n),
                    Err(_) => json!(value),
                };
                entry.as_object_mut().unwrap().insert(key.to_string(), v);
            }
        }
    }
    parse(&headers, Value::Object(body)).unwrap()
}

/// (endpoint, source) a phase reads its pin from.
type EndpointFrom = Option<(&'static str, &'static str)>;
/// (rank, source) a phase reads its DP rank from.
type RankFrom = Option<(u32, &'static str)>;

/// The phase table of design.md §5.3, written out independently of the resolver:
/// (endpoint, source) of the pin, and (rank, source) read by the phase.
fn expected(phase: Phase, case: Case, via: &'static Via) -> Resolved {
    let (endpoint, rank): (EndpointFrom, RankFrom) = match phase {
        Phase::Encode => (None, None),
        Phase::Prefill => (
            if case.prefill {
                Some((P, via.prefill))
            } else {
                None
            },
            if case.prefill_rank {
                Some((PREFILL_RANK, via.prefill_rank))
            } else {
                None
            },
        ),
        Phase::Decode => (
            if case.decode {
                Some((D, via.decode))
            } else if case.worker {
                Some((W, via.worker))
            } else {
                None
            },
            if case.rank {
                Some((RANK, via.rank))
            } else {
                None
            },
        ),
        Phase::Aggregated => (
            if case.worker {
                Some((W, via.worker))
            } else if case.decode {
                Some((D, via.decode))
            } else {
                None
            },
            if case.rank {
                Some((RANK, via.rank))
            } else {
                None
            },
        ),
    };
    match endpoint {
        Some((e, src)) => Resolved {
            pin: Some(pin(e, rank.map(|r| r.0), src, rank.map(|r| r.1))),
            orphan_rank: None,
        },
        None => Resolved {
            pin: None,
            orphan_rank: rank.map(|(r, src)| (r, src.to_string())),
        },
    }
}

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
    assert_eq!(err.status(), 400);
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
    let cases: Vec<(PinError, u16, &str)> = vec![
        (
            resolve(Phase::Decode, &hints(&[("x-dp-rank", "2")]))
                .check()
                .unwrap_err(),
            400,
            "header `x-dp-rank`: DP rank 2 is given without an endpoint to pin (`x-worker-instance-id` or `x-decode-instance-id`)",
        ),
        (
            resolve(
                Phase::Prefill,
                &parse(&[], json!({"nvext": {"prefill_dp_rank": 1}})).unwrap(),
            )
            .check()
            .unwrap_err(),
            400,
            "field `nvext.prefill_dp_rank`: DP rank 1 is given without an endpoint to pin (`x-prefill-instance-id`)",
        ),
        (
            pin_err(&pin("decode-9", None, "x-worker-instance-id", None), Phase::Decode),
            400,
            "header `x-worker-instance-id`: endpoint `decode-9` is not known",
        ),
        (
            pin_err(&pin("pod-z", Some(0), "x-worker-instance-id", Some("x-dp-rank")), Phase::Decode),
            400,
            "header `x-worker-instance-id`: endpoint `pod-z` is not known",
        ),
        (
            pin_err(&pin("pod-a", Some(3), "x-worker-instance-id", Some("x-dp-rank")), Phase::Decode),
            400,
            "header `x-dp-rank`: endpoint `pod-a` has no DP rank 3 (known ranks: 0, 1)",
        ),
        (
            pin_err(&pin("decode-0", Some(1), "x-decode-instance-id", Some("routing.dp_rank")), Phase::Decode),
            400,
            "field `routing.dp_rank`: endpoint `decode-0` has no DP rank 1 (it has no DP ranks)",
        ),
        (
            pin_err(&pin("pod-b", Some(0), "x-prefill-instance-id", Some("x-prefill-dp-rank")), Phase::Prefill),
            400,
            "header `x-prefill-dp-rank`: endpoint `pod-b` has no DP rank 0 (known ranks: 2)",
        ),
        (
            pin_err(&pin("decode-0", None, "x-prefill-instance-id", None), Phase::Prefill),
            400,
            "header `x-prefill-instance-id`: endpoint `decode-0` has role `decode`, which cannot run the prefill phase",
        ),
        (
            pin_err(&pin("plain-0", None, "nvext.prefill_worker_id", None), Phase::Prefill),
            400,
            "field `nvext.prefill_worker_id`: endpoint `plain-0` has no role label, which cannot run the prefill phase",
        ),
        (
            pin_err(&pin("prefill-0", None, "x-worker-instance-id", None), Phase::Decode),
            400,
            "header `x-worker-instance-id`: endpoint `prefill-0` has role `prefill`, which cannot run the decode phase",
        ),
        (
            pin_err(&pin("prefill-0", None, "x-dynamo-worker-instance-id", None), Phase::Aggregated),
            400,
            "header `x-dynamo-worker-instance-id`: endpoint `prefill-0` has role `prefill`, which cannot run the aggregated phase",
        ),
        (
            pin_err(&pin("encode-0", None, "x-worker-instance-id", None), Phase::Aggregated),
            400,
            "header `x-worker-instance-id`: endpoint `encode-0` has role `encode`, which cannot run the aggregated phase",
        ),
        (
            pin_err(&pin("decode-7", None, "x-worker-instance-id", None), Phase::Decode),
            503,
            "header `x-worker-instance-id`: endpoint `decode-7` is not ready",
        ),
        (
            pin_err(&pin("decode-8", None, "nvext.backend_instance_id", None), Phase::Aggregated),
            503,
            "field `nvext.backend_instance_id`: endpoint `decode-8` is terminating",
        ),
    ];
    for (err, status, want) in &cases {
        assert_eq!(err.to_string(), *want);
        assert_eq!(err.status(), *status, "{want}");
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
    assert_eq!(err.status(), 400);
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
