//! Helpers shared by the pin tests (`pins.rs`, `pins_errors.rs`).
#![allow(dead_code)]

use pdgate_api::hints::{HintError, RoutingHints};
use pdgate_api::Phase;
use pdgate_scheduler::pins::validate;
use pdgate_scheduler::{Endpoint, EndpointLoad, EndpointState, Pin, PinError, Resolved, Snapshot};
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::sync::Arc;

// ---------------------------------------------------------------------------------------------
// helpers

pub fn obj(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => panic!("not an object"),
    }
}

pub fn parse(headers: &[(&str, &str)], body: Value) -> Result<RoutingHints, HintError> {
    let body = pdgate_api::RawObject::parse(body.to_string().into()).expect("an object");
    RoutingHints::parse(
        |name| headers.iter().find(|(k, _)| *k == name).map(|(_, v)| *v),
        &body,
    )
}

pub fn hints(headers: &[(&str, &str)]) -> RoutingHints {
    parse(headers, json!({})).unwrap()
}

pub fn hint_err(headers: &[(&str, &str)], body: Value) -> HintError {
    parse(headers, body).unwrap_err()
}

pub struct Ep {
    pub name: &'static str,
    pub role: Option<&'static str>,
    pub ready: bool,
    pub terminating: bool,
    pub dp_rank: Option<u32>,
}

pub fn ep(name: &'static str, role: Option<&'static str>) -> Ep {
    Ep {
        name,
        role,
        ready: true,
        terminating: false,
        dp_rank: None,
    }
}

pub fn snapshot(eps: Vec<Ep>) -> Snapshot {
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
pub fn fleet() -> Snapshot {
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

pub fn pin(endpoint: &str, rank: Option<u32>, source: &str, rank_source: Option<&str>) -> Pin {
    Pin {
        endpoint: endpoint.to_string(),
        dp_rank: rank,
        source: source.to_string(),
        rank_source: rank_source.map(str::to_string),
    }
}

pub fn pin_err(p: &Pin, phase: Phase) -> PinError {
    validate(p, phase, &fleet()).unwrap_err()
}

// ---------------------------------------------------------------------------------------------
// the phase × hint matrix

/// Which hints a case carries.
#[derive(Clone, Copy, Debug)]
pub struct Case {
    pub worker: bool,
    pub prefill: bool,
    pub decode: bool,
    pub rank: bool,
    pub prefill_rank: bool,
}

impl Case {
    pub fn all() -> Vec<Case> {
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
pub struct Via {
    pub worker: &'static str,
    pub prefill: &'static str,
    pub decode: &'static str,
    pub rank: &'static str,
    pub prefill_rank: &'static str,
}

pub const VIA_HEADERS: Via = Via {
    worker: "x-worker-instance-id",
    prefill: "x-prefill-instance-id",
    decode: "x-decode-instance-id",
    rank: "x-dp-rank",
    prefill_rank: "x-prefill-dp-rank",
};
pub const VIA_DYNAMO_HEADERS: Via = Via {
    worker: "x-dynamo-worker-instance-id",
    prefill: "x-dynamo-prefill-instance-id",
    decode: "x-dynamo-decode-instance-id",
    rank: "x-dynamo-dp-rank",
    prefill_rank: "x-dynamo-prefill-dp-rank",
};
pub const VIA_NVEXT: Via = Via {
    worker: "nvext.backend_instance_id",
    prefill: "nvext.prefill_worker_id",
    decode: "nvext.decode_worker_id",
    rank: "nvext.dp_rank",
    prefill_rank: "nvext.prefill_dp_rank",
};
pub const VIA_ROUTING: Via = Via {
    worker: "routing.worker_instance_id",
    prefill: "routing.prefill_instance_id",
    decode: "routing.decode_instance_id",
    rank: "routing.dp_rank",
    prefill_rank: "routing.prefill_dp_rank",
};

pub const W: &str = "worker-w";
pub const P: &str = "prefill-p";
pub const D: &str = "decode-d";
pub const RANK: u32 = 3;
pub const PREFILL_RANK: u32 = 5;

/// Builds the request for `case` sent `via`, and parses it.
pub fn hints_for(case: Case, via: &Via) -> RoutingHints {
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
pub fn expected(phase: Phase, case: Case, via: &'static Via) -> Resolved {
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
