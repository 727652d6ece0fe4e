//! Mooncake trace loading (design.md §7): one JSON object per line,
//! `{"timestamp": ms, "input_length": tokens, "output_length": tokens, "hash_ids": [ids]}`.
//!
//! Source: kvcache-ai/Mooncake, FAST25-release/traces (Apache-2.0).

use serde::Serialize;
use serde_json::{Map, Value};
use std::io::BufRead;
use std::path::{Path, PathBuf};

/// One trace request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TraceRecord {
    /// Arrival time in ms from the start of the trace.
    pub timestamp: u64,
    /// Prompt length in tokens.
    pub input_length: u32,
    /// Output length in tokens.
    pub output_length: u32,
    /// One id per 512-token prompt block; equal ids at equal positions mean a shared prefix.
    pub hash_ids: Vec<u64>,
}

/// A trace that cannot be read. Line numbers are 1-based.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// The file could not be opened or read.
    #[error("trace {path}: {reason}")]
    Io {
        /// The trace file.
        path: PathBuf,
        /// The IO error (shown in the message, so not chained as a source).
        reason: std::io::Error,
    },
    /// A line is not a JSON object.
    #[error("trace line {line}: not a JSON object: {message}")]
    InvalidJson {
        /// 1-based line number.
        line: usize,
        /// serde's message.
        message: String,
    },
    /// A required field is absent.
    #[error("trace line {line}: missing field `{field}`")]
    MissingField {
        /// 1-based line number.
        line: usize,
        /// Field name.
        field: &'static str,
    },
    /// A field has the wrong type.
    #[error("trace line {line}: field `{field}` {expected}")]
    InvalidField {
        /// 1-based line number.
        line: usize,
        /// Field name.
        field: &'static str,
        /// What was expected.
        expected: &'static str,
    },
}

/// Reads a Mooncake JSONL trace, keeping the first `limit` records when given. Blank lines are
/// skipped (they still count for line numbers).
///
/// Errors: [`TraceError::Io`] naming the path, or the first bad line's error.
pub fn load_mooncake(path: &Path, limit: Option<usize>) -> Result<Vec<TraceRecord>, TraceError> {
    let io = |reason| TraceError::Io {
        path: path.to_path_buf(),
        reason,
    };
    let reader = std::io::BufReader::new(std::fs::File::open(path).map_err(io)?);
    let mut out = Vec::new();
    for (i, line) in reader.lines().enumerate() {
        if limit.is_some_and(|l| out.len() >= l) {
            break;
        }
        let line = line.map_err(io)?;
        if let Some(rec) = parse_line(i + 1, &line)? {
            out.push(rec);
        }
    }
    Ok(out)
}

/// Parses trace text already in memory (same rules as [`load_mooncake`]).
pub fn parse_mooncake(text: &str, limit: Option<usize>) -> Result<Vec<TraceRecord>, TraceError> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if limit.is_some_and(|l| out.len() >= l) {
            break;
        }
        if let Some(rec) = parse_line(i + 1, line)? {
            out.push(rec);
        }
    }
    Ok(out)
}

/// Parses line number `line` (1-based); `Ok(None)` for a blank line.
pub fn parse_line(line: usize, text: &str) -> Result<Option<TraceRecord>, TraceError> {
    if text.trim().is_empty() {
        return Ok(None);
    }
    let value: Value = serde_json::from_str(text).map_err(|e| TraceError::InvalidJson {
        line,
        message: e.to_string(),
    })?;
    let Value::Object(obj) = value else {
        return Err(TraceError::InvalidJson {
            line,
            message: "expected an object".into(),
        });
    };
    let hash_ids = match obj.get("hash_ids") {
        None | Some(Value::Null) => {
            return Err(TraceError::MissingField {
                line,
                field: "hash_ids",
            })
        }
        Some(Value::Array(ids)) => ids
            .iter()
            .map(Value::as_u64)
            .collect::<Option<Vec<u64>>>()
            .ok_or(TraceError::InvalidField {
                line,
                field: "hash_ids",
                expected: "must be an array of non-negative integers",
            })?,
        Some(_) => {
            return Err(TraceError::InvalidField {
                line,
                field: "hash_ids",
                expected: "must be an array of non-negative integers",
            })
        }
    };
    Ok(Some(TraceRecord {
        timestamp: timestamp(line, &obj)?,
        input_length: count(line, &obj, "input_length")?,
        output_length: count(line, &obj, "output_length")?,
        hash_ids,
    }))
}

/// `timestamp`: a non-negative number of ms (fractions are rounded down).
fn timestamp(line: usize, obj: &Map<String, Value>) -> Result<u64, TraceError> {
    const FIELD: &str = "timestamp";
    match obj.get(FIELD) {
        None | Some(Value::Null) => Err(TraceError::MissingField { line, field: FIELD }),
        Some(Value::Number(n)) => n
            .as_u64()
            .or_else(|| n.as_f64().filter(|f| *f >= 0.0).map(|f| f as u64))
            .ok_or(TraceError::InvalidField {
                line,
                field: FIELD,
                expected: "must be a non-negative number of ms",
            }),
        Some(_) => Err(TraceError::InvalidField {
            line,
            field: FIELD,
            expected: "must be a non-negative number of ms",
        }),
    }
}

/// A token count field: a non-negative integer that fits in u32.
fn count(line: usize, obj: &Map<String, Value>, field: &'static str) -> Result<u32, TraceError> {
    let bad = TraceError::InvalidField {
        line,
        field,
        expected: "must be a non-negative integer (tokens)",
    };
    match obj.get(field) {
        None | Some(Value::Null) => Err(TraceError::MissingField { line, field }),
        Some(v) => v.as_u64().and_then(|v| u32::try_from(v).ok()).ok_or(bad),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_fields_and_skips_blank_lines() {
        let text = "{\"timestamp\": 3, \"input_length\": 10, \"output_length\": 2, \"hash_ids\": [0, 7]}\n\n{\"timestamp\": 4.9, \"input_length\": 1, \"output_length\": 0, \"hash_ids\": []}\n";
        let recs = parse_mooncake(text, None).unwrap();
        assert_eq!(
            recs,
            vec![
                TraceRecord {
                    timestamp: 3,
                    input_length: 10,
                    output_length: 2,
                    hash_ids: vec![0, 7]
                },
                TraceRecord {
                    timestamp: 4,
                    input_length: 1,
                    output_length: 0,
                    hash_ids: vec![]
                },
            ]
        );
        assert_eq!(parse_mooncake(text, Some(1)).unwrap().len(), 1);
    }

    #[test]
    fn errors_name_line_and_field() {
        let ok = r#"{"timestamp": 0, "input_length": 1, "output_length": 1, "hash_ids": [0]}"#;
        let err = |bad: &str| {
            parse_mooncake(&format!("{ok}\n{ok}\n{bad}\n"), None)
                .unwrap_err()
                .to_string()
        };
        assert_eq!(
            err(r#"{"timestamp": 0, "input_length": 1, "output_length": 1}"#),
            "trace line 3: missing field `hash_ids`"
        );
        assert_eq!(
            err(r#"{"timestamp": 0, "input_length": -1, "output_length": 1, "hash_ids": []}"#),
            "trace line 3: field `input_length` must be a non-negative integer (tokens)"
        );
        assert_eq!(
            err(r#"{"timestamp": 0, "input_length": 1, "output_length": 1, "hash_ids": ["a"]}"#),
            "trace line 3: field `hash_ids` must be an array of non-negative integers"
        );
        assert_eq!(
            err(r#"{"input_length": 1, "output_length": 1, "hash_ids": []}"#),
            "trace line 3: missing field `timestamp`"
        );
        assert!(err("{oops").starts_with("trace line 3: not a JSON object: "));
        assert_eq!(
            err("[1]"),
            "trace line 3: not a JSON object: expected an object"
        );
    }

    #[test]
    fn missing_file_names_the_path() {
        let e = load_mooncake(Path::new("/nonexistent/t.jsonl"), None).unwrap_err();
        assert!(e.to_string().starts_with("trace /nonexistent/t.jsonl: "));
    }
}
