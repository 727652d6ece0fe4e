//! Client routing hints: endpoint pins, data-parallel ranks and the session id, parsed once per
//! request from headers and body (design.md §5.3; NVIDIA Dynamo's `nvext` request extension).
//!
//! [`RoutingHints::parse`] reads every hint, checks its syntax and remembers where it came from
//! (the header name actually used, or the body path), so that later errors can name it. It does
//! not decide which phase a hint applies to: that is `pdgate_scheduler::pins`, the one
//! phase-aware resolver.
//!
//! Sources, per hint (the first header present of a group wins over every body field):
//!
//! | hint | headers (name, then aliases) | body fields |
//! |---|---|---|
//! | worker pin | `x-worker-instance-id`, `x-dynamo-worker-instance-id` | `nvext.backend_instance_id`, `routing.worker_instance_id` |
//! | prefill pin | `x-prefill-instance-id`, `x-dynamo-prefill-instance-id` | `nvext.prefill_worker_id`, `routing.prefill_instance_id` |
//! | decode pin | `x-decode-instance-id`, `x-dynamo-decode-instance-id` | `nvext.decode_worker_id`, `routing.decode_instance_id` |
//! | DP rank | `x-dp-rank`, `x-dynamo-dp-rank`, `x-data-parallel-rank` | `nvext.dp_rank`, `routing.dp_rank` |
//! | prefill DP rank | `x-prefill-dp-rank`, `x-dynamo-prefill-dp-rank` | `nvext.prefill_dp_rank`, `routing.prefill_dp_rank` |
//! | session id | `x-session-id` | — |
//!
//! Precedence is per hint: a header wins over the body; within the headers of one group, or
//! within the body fields of one hint, every value given must agree (else [`HintError::Conflict`]).
//! Every source is checked even when another one wins, so a malformed field is always reported.

use crate::headers;
use crate::raw_object::RawObject;
use serde_json::Value;
use std::fmt;

/// Longest accepted `x-session-id`, in characters (Unicode scalar values).
pub const MAX_SESSION_ID_CHARS: usize = 256;

/// Longest client value that error messages quote, in characters; longer values are cut and
/// end in `…`.
pub const MAX_SHOWN_CHARS: usize = 64;

/// Worker pin headers (Decode and Aggregated phases): the name, then its Dynamo alias.
pub const WORKER_PIN_HEADERS: &[&str] = &[
    headers::WORKER_INSTANCE_ID,
    headers::DYNAMO_WORKER_INSTANCE_ID,
];
/// Prefill pin headers (Prefill phase only).
pub const PREFILL_PIN_HEADERS: &[&str] = &[
    headers::PREFILL_INSTANCE_ID,
    headers::DYNAMO_PREFILL_INSTANCE_ID,
];
/// Decode pin headers (Decode phase first, Aggregated as a fallback).
pub const DECODE_PIN_HEADERS: &[&str] = &[
    headers::DECODE_INSTANCE_ID,
    headers::DYNAMO_DECODE_INSTANCE_ID,
];
/// DP rank headers (with the worker or decode pin).
pub const DP_RANK_HEADERS: &[&str] = &[
    headers::DP_RANK,
    headers::DYNAMO_DP_RANK,
    headers::DATA_PARALLEL_RANK,
];
/// Prefill DP rank headers (with the prefill pin).
pub const PREFILL_DP_RANK_HEADERS: &[&str] =
    &[headers::PREFILL_DP_RANK, headers::DYNAMO_PREFILL_DP_RANK];

/// Every header [`RoutingHints::parse`] reads, lower case.
pub const HINT_HEADERS: &[&str] = &[
    headers::WORKER_INSTANCE_ID,
    headers::DYNAMO_WORKER_INSTANCE_ID,
    headers::PREFILL_INSTANCE_ID,
    headers::DYNAMO_PREFILL_INSTANCE_ID,
    headers::DECODE_INSTANCE_ID,
    headers::DYNAMO_DECODE_INSTANCE_ID,
    headers::DP_RANK,
    headers::DYNAMO_DP_RANK,
    headers::DATA_PARALLEL_RANK,
    headers::PREFILL_DP_RANK,
    headers::DYNAMO_PREFILL_DP_RANK,
    headers::SESSION_ID,
];

const WORKER_PIN_FIELDS: &[&str] = &["nvext.backend_instance_id", "routing.worker_instance_id"];
const PREFILL_PIN_FIELDS: &[&str] = &["nvext.prefill_worker_id", "routing.prefill_instance_id"];
const DECODE_PIN_FIELDS: &[&str] = &["nvext.decode_worker_id", "routing.decode_instance_id"];
const DP_RANK_FIELDS: &[&str] = &["nvext.dp_rank", "routing.dp_rank"];
const PREFILL_DP_RANK_FIELDS: &[&str] = &["nvext.prefill_dp_rank", "routing.prefill_dp_rank"];
/// Body objects that carry hints: Dynamo's `nvext` and pdgate's own `routing`.
const CONTAINERS: &[&str] = &["nvext", "routing"];

const ID_EXPECTED: &str = "a string or a non-negative integer";
const RANK_EXPECTED: &str = "a non-negative integer";
const OBJECT_EXPECTED: &str = "an object";

/// One hint value and where it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hint<T> {
    /// The value: an endpoint name (a JSON number is read as its decimal string), a DP rank, or
    /// the session id. Surrounding whitespace is removed from strings.
    pub value: T,
    /// Where it was read: the lower-case header name actually used (e.g.
    /// `x-dynamo-worker-instance-id`) or the dotted body path (e.g. `nvext.prefill_worker_id`).
    /// Header names start with `x-`, body paths never do; [`describe`] relies on it.
    pub source: &'static str,
}

/// Every routing hint of one request, parsed once at ingress by [`RoutingHints::parse`].
///
/// Which hint applies to which phase is decided by `pdgate_scheduler::pins` (design.md §5.3,
/// "Pins are phase-aware"), never here.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RoutingHints {
    /// Worker pin: endpoint for the Decode phase (after the decode pin) and the Aggregated
    /// phase (before it). Dynamo `x-worker-instance-id` / `nvext.backend_instance_id`.
    pub worker_pin: Option<Hint<String>>,
    /// Prefill pin: endpoint for the Prefill phase only. Dynamo `x-prefill-instance-id` /
    /// `nvext.prefill_worker_id`.
    pub prefill_pin: Option<Hint<String>>,
    /// Decode pin: endpoint for the Decode phase (first choice) and the Aggregated phase
    /// (fallback). `x-decode-instance-id` / Dynamo `nvext.decode_worker_id`.
    pub decode_pin: Option<Hint<String>>,
    /// DP rank that goes with the worker or decode pin. Dynamo `x-dp-rank` / `nvext.dp_rank`.
    pub dp_rank: Option<Hint<u32>>,
    /// DP rank that goes with the prefill pin. Dynamo `x-prefill-dp-rank` /
    /// `nvext.prefill_dp_rank`.
    pub prefill_dp_rank: Option<Hint<u32>>,
    /// `x-session-id` (at most [`MAX_SESSION_ID_CHARS`] characters); headers only, as in
    /// Dynamo. Only parsed here; affinity is someone else's job.
    pub session_id: Option<Hint<String>>,
}

/// A malformed routing hint; always answered 400 (design.md §5.5), with a message that names
/// the header or body field at fault.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HintError {
    /// The header or field is present but empty (or only whitespace).
    ///
    /// Display: ``header `x-worker-instance-id`: value is empty``.
    Empty {
        /// Header name or body path.
        source: &'static str,
    },
    /// A DP rank that is not an integer from 0 to 4294967295.
    ///
    /// Display: ``header `x-dp-rank`: `-1` is not a DP rank (expected an integer from 0 to
    /// 4294967295)``.
    InvalidDpRank {
        /// Header name or body path.
        source: &'static str,
        /// The value as given (a JSON number in its JSON spelling).
        value: String,
    },
    /// One hint given twice with different values: a header under its name and an alias, or
    /// two body fields (`nvext.…` and `routing.…`).
    ///
    /// Display: ``header `x-worker-instance-id` is `a` but header
    /// `x-dynamo-worker-instance-id` is `b` (give one value)``.
    Conflict {
        /// The source read first (the header name before its aliases, `nvext` before `routing`).
        first: &'static str,
        /// Its value.
        first_value: String,
        /// The source that disagrees.
        second: &'static str,
        /// Its value.
        second_value: String,
    },
    /// A body field (or the `nvext` / `routing` object itself) with the wrong JSON type.
    ///
    /// Display: ``field `nvext.backend_instance_id` must be a string or a non-negative
    /// integer``.
    WrongType {
        /// Body path, e.g. `nvext.backend_instance_id`, or `nvext`.
        source: &'static str,
        /// What it must be, e.g. "an object".
        expected: &'static str,
    },
    /// A value longer than allowed (the session id).
    ///
    /// Display: ``header `x-session-id`: value is 300 characters long (at most 256)``.
    TooLong {
        /// Header name.
        source: &'static str,
        /// Length given, in characters.
        len: usize,
        /// Longest allowed, in characters.
        max: usize,
    },
}

impl HintError {
    /// HTTP status to answer with: always 400 (design.md §5.5, "bad pin").
    pub fn status(&self) -> u16 {
        400
    }

    /// The header name or body path at fault (for a conflict, the second source).
    pub fn source_name(&self) -> &'static str {
        match self {
            HintError::Empty { source }
            | HintError::InvalidDpRank { source, .. }
            | HintError::WrongType { source, .. }
            | HintError::TooLong { source, .. } => source,
            HintError::Conflict { second, .. } => second,
        }
    }
}

impl fmt::Display for HintError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HintError::Empty { source } => write!(f, "{}: value is empty", describe(source)),
            HintError::InvalidDpRank { source, value } => write!(
                f,
                "{}: `{}` is not a DP rank (expected an integer from 0 to {})",
                describe(source),
                shown(value),
                u32::MAX
            ),
            HintError::Conflict {
                first,
                first_value,
                second,
                second_value,
            } => write!(
                f,
                "{} is `{}` but {} is `{}` (give one value)",
                describe(first),
                shown(first_value),
                describe(second),
                shown(second_value)
            ),
            HintError::WrongType { source, expected } => {
                write!(f, "{} must be {expected}", describe(source))
            }
            HintError::TooLong { source, len, max } => write!(
                f,
                "{}: value is {len} characters long (at most {max})",
                describe(source)
            ),
        }
    }
}

impl std::error::Error for HintError {}

/// Names a hint source the way error messages do: ``header `x-dp-rank` `` for a header name
/// (starts with `x-`), ``field `nvext.dp_rank` `` for a body path.
pub fn describe(source: &str) -> String {
    if source.starts_with("x-") {
        format!("header `{source}`")
    } else {
        format!("field `{source}`")
    }
}

/// A client value as error messages quote it: control characters and quotes escaped, cut to
/// [`MAX_SHOWN_CHARS`] characters (then ending in `…`).
pub fn shown(value: &str) -> String {
    let mut out: String = value
        .chars()
        .take(MAX_SHOWN_CHARS)
        .flat_map(char::escape_debug)
        .collect();
    if value.chars().nth(MAX_SHOWN_CHARS).is_some() {
        out.push('…');
    }
    out
}

impl RoutingHints {
    /// Parses every routing hint of a request, once.
    ///
    /// `header` looks a header up by its lower-case name and returns its value (the caller
    /// decides what a repeated or non-UTF-8 header yields; `None` means absent). `body` is the
    /// request's JSON object; hints are read from its `nvext` (Dynamo) and `routing` (pdgate)
    /// objects. A `null` counts as absent. Endpoint ids may be JSON strings or non-negative
    /// integers (read as their decimal string, since pdgate names endpoints by name); DP ranks
    /// may be integers or decimal strings.
    ///
    /// Errors ([`HintError`], all 400, naming the header or field): an empty value, a DP rank
    /// that is not an integer in `0..=u32::MAX`, a header given under its name and an alias
    /// (or two body fields) with different values, a body field or `nvext`/`routing` of the
    /// wrong JSON type, an `x-session-id` over [`MAX_SESSION_ID_CHARS`] characters. Headers are
    /// checked before the body, in the order of the table in the module docs.
    pub fn parse<'h>(
        header: impl Fn(&str) -> Option<&'h str>,
        body: &RawObject,
    ) -> Result<RoutingHints, HintError> {
        let header = &header;
        let h_worker = header_group(header, WORKER_PIN_HEADERS, id_from_header)?;
        let h_prefill = header_group(header, PREFILL_PIN_HEADERS, id_from_header)?;
        let h_decode = header_group(header, DECODE_PIN_HEADERS, id_from_header)?;
        let h_rank = header_group(header, DP_RANK_HEADERS, rank_from_header)?;
        let h_prefill_rank = header_group(header, PREFILL_DP_RANK_HEADERS, rank_from_header)?;
        let session_id = header_group(header, &[headers::SESSION_ID], session_from_header)?;

        let mut containers: Vec<(&'static str, RawObject)> = Vec::new();
        for &container in CONTAINERS {
            let wrong = HintError::WrongType {
                source: container,
                expected: OBJECT_EXPECTED,
            };
            match body.object(container) {
                None => {}
                Some(Ok(obj)) => containers.push((container, obj)),
                Some(Err(_)) => return Err(wrong),
            }
        }
        let body = &containers[..];
        let b_worker = body_group(body, WORKER_PIN_FIELDS, id_from_json, ID_EXPECTED)?;
        let b_prefill = body_group(body, PREFILL_PIN_FIELDS, id_from_json, ID_EXPECTED)?;
        let b_decode = body_group(body, DECODE_PIN_FIELDS, id_from_json, ID_EXPECTED)?;
        let b_rank = body_group(body, DP_RANK_FIELDS, rank_from_json, RANK_EXPECTED)?;
        let b_prefill_rank =
            body_group(body, PREFILL_DP_RANK_FIELDS, rank_from_json, RANK_EXPECTED)?;

        Ok(RoutingHints {
            worker_pin: h_worker.or(b_worker),
            prefill_pin: h_prefill.or(b_prefill),
            decode_pin: h_decode.or(b_decode),
            dp_rank: h_rank.or(b_rank),
            prefill_dp_rank: h_prefill_rank.or(b_prefill_rank),
            session_id,
        })
    }

    /// True when the request carries no hint at all.
    pub fn is_empty(&self) -> bool {
        *self == RoutingHints::default()
    }
}

/// Reads one header group (name, then aliases); every value given must agree.
fn header_group<'h, T: PartialEq>(
    header: &impl Fn(&str) -> Option<&'h str>,
    names: &'static [&'static str],
    parse: fn(&'static str, &str) -> Result<T, HintError>,
) -> Result<Option<Hint<T>>, HintError> {
    let mut found: Option<(Hint<T>, &'h str)> = None;
    for &name in names {
        let Some(raw) = header(name) else { continue };
        let raw = raw.trim();
        if raw.is_empty() {
            return Err(HintError::Empty { source: name });
        }
        let value = parse(name, raw)?;
        match &found {
            None => {
                found = Some((
                    Hint {
                        value,
                        source: name,
                    },
                    raw,
                ))
            }
            Some((first, first_raw)) if first.value != value => {
                return Err(HintError::Conflict {
                    first: first.source,
                    first_value: first_raw.to_string(),
                    second: name,
                    second_value: raw.to_string(),
                })
            }
            Some(_) => {}
        }
    }
    Ok(found.map(|(hint, _)| hint))
}

/// Reads one hint's body fields (`container.key` paths, `body` the containers present);
/// every value given must agree. Only strings and numbers are decoded: any other type is
/// `WrongType` with `expected`, unread.
fn body_group<T: PartialEq>(
    body: &[(&'static str, RawObject)],
    paths: &'static [&'static str],
    parse: fn(&'static str, &Value) -> Result<T, HintError>,
    expected: &'static str,
) -> Result<Option<Hint<T>>, HintError> {
    if body.is_empty() {
        // No hint container in the body (the usual request): nothing to look up.
        return Ok(None);
    }
    let mut found: Option<(Hint<T>, Value)> = None;
    for &path in paths {
        let (container, key) = path.split_once('.').expect("body paths are dotted");
        let Some((_, obj)) = body.iter().find(|(c, _)| *c == container) else {
            continue;
        };
        let raw = match obj.raw(key) {
            None | Some("null") => continue,
            Some(r) if r.starts_with(['"', '-']) || r.starts_with(|c: char| c.is_ascii_digit()) => {
                serde_json::from_str::<Value>(r).map_err(|_| HintError::WrongType {
                    source: path,
                    expected,
                })?
            }
            Some(_) => {
                return Err(HintError::WrongType {
                    source: path,
                    expected,
                })
            }
        };
        let value = parse(path, &raw)?;
        match &found {
            None => {
                found = Some((
                    Hint {
                        value,
                        source: path,
                    },
                    raw,
                ))
            }
            Some((first, first_raw)) if first.value != value => {
                return Err(HintError::Conflict {
                    first: first.source,
                    first_value: json_text(first_raw),
                    second: path,
                    second_value: json_text(&raw),
                })
            }
            Some(_) => {}
        }
    }
    Ok(found.map(|(hint, _)| hint))
}

/// A JSON scalar as a message shows it: strings without quotes, numbers in JSON spelling.
fn json_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.trim().to_string(),
        other => other.to_string(),
    }
}

fn id_from_header(_: &'static str, raw: &str) -> Result<String, HintError> {
    Ok(raw.to_string())
}

fn session_from_header(source: &'static str, raw: &str) -> Result<String, HintError> {
    let len = raw.chars().count();
    if len > MAX_SESSION_ID_CHARS {
        return Err(HintError::TooLong {
            source,
            len,
            max: MAX_SESSION_ID_CHARS,
        });
    }
    Ok(raw.to_string())
}

/// Decimal digits only (no sign, no spaces), at most `u32::MAX`.
fn parse_rank(raw: &str) -> Option<u32> {
    if raw.is_empty() || !raw.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    raw.parse().ok()
}

fn rank_from_header(source: &'static str, raw: &str) -> Result<u32, HintError> {
    parse_rank(raw).ok_or_else(|| HintError::InvalidDpRank {
        source,
        value: raw.to_string(),
    })
}

fn id_from_json(source: &'static str, v: &Value) -> Result<String, HintError> {
    match v {
        Value::String(s) if s.trim().is_empty() => Err(HintError::Empty { source }),
        Value::String(s) => Ok(s.trim().to_string()),
        Value::Number(n) => n
            .as_u64()
            .map(|n| n.to_string())
            .ok_or(HintError::WrongType {
                source,
                expected: ID_EXPECTED,
            }),
        _ => Err(HintError::WrongType {
            source,
            expected: ID_EXPECTED,
        }),
    }
}

fn rank_from_json(source: &'static str, v: &Value) -> Result<u32, HintError> {
    let invalid = |value: String| HintError::InvalidDpRank { source, value };
    match v {
        Value::Number(n) => n
            .as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .ok_or_else(|| invalid(n.to_string())),
        Value::String(s) if s.trim().is_empty() => Err(HintError::Empty { source }),
        Value::String(s) => parse_rank(s.trim()).ok_or_else(|| invalid(s.trim().to_string())),
        _ => Err(HintError::WrongType {
            source,
            expected: RANK_EXPECTED,
        }),
    }
}

#[cfg(test)]
#[path = "hints_tests.rs"]
mod tests;
