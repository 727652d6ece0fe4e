//! A JSON object kept as its bytes plus the byte span of each top-level value: no tree.
//!
//! A request body is scanned once with serde_json's borrowed `RawValue` (which validates the
//! JSON without allocating for skipped values), and each top-level field is remembered as
//! `(key, start..end)` into the body's [`Bytes`]. Fields are parsed only when read
//! ([`RawObject::raw`], [`RawObject::get`], [`RawObject::get_as`]), so a 60 MB `prompt` of
//! token ids costs its bytes and nothing else until [`crate::openai`] decodes it straight into
//! a `Vec<u32>` (issue 10: peak memory a small multiple of the body).
//!
//! A key given twice at the top level is refused ([`RawObject::parse`]): a JSON reader that
//! keeps the first copy and one that keeps the last (the router's view and an engine's) would
//! otherwise act on different values.

use bytes::Bytes;
use serde::de::{Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};
use std::fmt;
use std::ops::Range;

/// Longest key quoted in a [`RawObjectError::DuplicateKey`] message, bytes.
pub const MAX_QUOTED_KEY_BYTES: usize = 64;

/// Why bytes are not a [`RawObject`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RawObjectError {
    /// Not JSON; serde_json's message with line and column.
    #[error("{0}")]
    InvalidJson(String),
    /// JSON, but not an object.
    #[error("not a JSON object")]
    NotAnObject,
    /// A top-level key given twice (quoted up to [`MAX_QUOTED_KEY_BYTES`]).
    #[error("field `{0}` is given more than once")]
    DuplicateKey(String),
    /// More top-level fields than [`MAX_FIELDS`].
    #[error("more than {MAX_FIELDS} top-level fields")]
    TooManyFields,
}

/// Most top-level fields a [`RawObject`] takes: an OpenAI request has a few dozen, and each
/// field costs about 100 bytes of index, so 5 million one-character keys (a 64 MB body)
/// would cost 10× the body.
pub const MAX_FIELDS: usize = 4096;

/// A JSON object: its bytes and, in order, each top-level key with the span of its value.
#[derive(Clone)]
pub struct RawObject {
    bytes: Bytes,
    fields: Vec<(Box<str>, Range<usize>)>,
    /// Key → position in `fields`, for objects of more than [`INDEXED_FROM`] fields (a body
    /// of 80,000 keys must cost linear time, not quadratic; SipHash, as the keys are the
    /// client's).
    index: Option<std::collections::HashMap<Box<str>, usize>>,
}

/// Objects with more fields than this get a hash index (below it a scan is cheaper).
const INDEXED_FROM: usize = 16;

impl fmt::Debug for RawObject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map()
            .entries(self.fields.iter().map(|(k, r)| (k, r.len())))
            .finish()
    }
}

struct Spans<'de>(Vec<(String, &'de RawValue)>);

/// Collects the entries; at most `max` of them (else the error says so).
struct SpansVisitor {
    max: usize,
}

/// The message of the visitor's error for too many fields (recognised in [`scan`]).
const TOO_MANY: &str = "pdgate: too many top-level fields";

impl<'de> Visitor<'de> for SpansVisitor {
    type Value = Spans<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Spans<'de>, A::Error> {
        let mut out = Vec::with_capacity(map.size_hint().unwrap_or(8));
        while let Some((k, v)) = map.next_entry::<String, &'de RawValue>()? {
            if out.len() == self.max {
                return Err(serde::de::Error::custom(TOO_MANY));
            }
            out.push((k, v));
        }
        Ok(Spans(out))
    }
}

impl RawObject {
    /// Scans `bytes` (one JSON object, surrounding whitespace allowed).
    ///
    /// Errors: [`RawObjectError`] — invalid JSON (trailing characters included), another JSON
    /// value than an object, or a top-level key given twice.
    pub fn parse(bytes: Bytes) -> Result<Self, RawObjectError> {
        let spans = scan_at_most(&bytes, MAX_FIELDS)?;
        let mut fields: Vec<(Box<str>, Range<usize>)> = Vec::with_capacity(spans.len());
        let mut index = (spans.len() > INDEXED_FROM)
            .then(|| std::collections::HashMap::with_capacity(spans.len()));
        for (key, span) in spans {
            let repeated = match &mut index {
                Some(ix) => ix
                    .insert(Box::<str>::from(key.as_str()), fields.len())
                    .is_some(),
                None => fields.iter().any(|(k, _)| **k == *key),
            };
            if repeated {
                return Err(RawObjectError::DuplicateKey(quoted(&key)));
            }
            fields.push((key.into(), span));
        }
        Ok(RawObject {
            bytes,
            fields,
            index,
        })
    }

    /// The object's bytes, as given.
    pub fn bytes(&self) -> &Bytes {
        &self.bytes
    }

    /// The top-level keys, in the order given.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.fields.iter().map(|(k, _)| &**k)
    }

    /// True when `key` is a top-level field (whatever its value, `null` included).
    pub fn contains_key(&self, key: &str) -> bool {
        self.span(key).is_some()
    }

    /// The JSON text of `key`'s value, as given (e.g. `"m"`, `[1,2]`, `null`).
    pub fn raw(&self, key: &str) -> Option<&str> {
        let span = self.span(key)?;
        let bytes = &self.bytes[span];
        // SAFETY: every span is the text of a `&RawValue` that serde_json handed out as a
        // `&str` of these very bytes when the object was scanned ([`scan`]), so it is UTF-8.
        Some(unsafe { std::str::from_utf8_unchecked(bytes) })
    }

    /// `key`'s value as a tree; meant for small fields (a whole prompt would defeat the type).
    pub fn get(&self, key: &str) -> Option<Value> {
        serde_json::from_str(self.raw(key)?).ok()
    }

    /// `key`'s value as a tree, for a request field the caller then checks: `Ok(None)` when
    /// absent.
    ///
    /// Errors: [`crate::RequestError::UnreadableField`] naming `key` when its value is valid
    /// JSON text that serde_json cannot build a tree of (nested deeper than its 128 levels, a
    /// lone surrogate `\uD800` escape), so that it is not mistaken for an absent field.
    pub fn field(&self, key: &'static str) -> Result<Option<Value>, crate::RequestError> {
        let Some(raw) = self.raw(key) else {
            return Ok(None);
        };
        serde_json::from_str(raw)
            .map(Some)
            .map_err(|e| crate::RequestError::unreadable(key, &e))
    }

    /// `key`'s value decoded as `T` (borrowing from the body where `T` can).
    pub fn get_as<'a, T: Deserialize<'a>>(
        &'a self,
        key: &str,
    ) -> Option<Result<T, serde_json::Error>> {
        self.raw(key).map(serde_json::from_str)
    }

    /// `key`'s value as a nested [`RawObject`] (sharing this body's bytes); `None` when absent
    /// or `null`.
    ///
    /// Errors: the value is not an object, or repeats a key.
    pub fn object(&self, key: &str) -> Option<Result<RawObject, RawObjectError>> {
        let span = self.span(key)?;
        if &self.bytes[span.clone()] == b"null" {
            return None;
        }
        Some(RawObject::parse(self.bytes.slice(span)))
    }

    /// The named fields that are present, as a tree (absent names are left out).
    pub fn subset(&self, keys: &[&str]) -> Map<String, Value> {
        keys.iter()
            .filter_map(|k| Some((k.to_string(), self.get(k)?)))
            .collect()
    }

    /// The whole object as a tree (fallback and test paths only).
    pub fn to_map(&self) -> Map<String, Value> {
        self.fields
            .iter()
            .filter_map(|(k, _)| Some((k.to_string(), self.get(k)?)))
            .collect()
    }

    /// Each top-level entry as `(key, value bytes)`, in order.
    pub fn entries(&self) -> impl Iterator<Item = (&str, &[u8])> {
        self.fields
            .iter()
            .map(|(k, r)| (&**k, &self.bytes[r.clone()]))
    }

    fn span(&self, key: &str) -> Option<Range<usize>> {
        match &self.index {
            Some(ix) => ix.get(key).map(|&i| self.fields[i].1.clone()),
            None => self
                .fields
                .iter()
                .find(|(k, _)| **k == *key)
                .map(|(_, r)| r.clone()),
        }
    }
}

/// Each top-level entry of the JSON object `bytes` as `(key, value span)`, in order,
/// repeated keys included (the one scanner behind [`RawObject`] and the body patcher).
///
/// Errors: as [`RawObject::parse`] but for repeated keys.
pub fn scan(bytes: &[u8]) -> Result<Vec<(String, Range<usize>)>, RawObjectError> {
    scan_at_most(bytes, usize::MAX)
}

fn scan_at_most(bytes: &[u8], max: usize) -> Result<Vec<(String, Range<usize>)>, RawObjectError> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let spans = match de.deserialize_map(SpansVisitor { max }) {
        Ok(s) => s.0,
        Err(e) if e.to_string().starts_with(TOO_MANY) => return Err(RawObjectError::TooManyFields),
        // serde_json's own message for a non-object would name a type; say it plainly.
        Err(_)
            if bytes
                .iter()
                .find(|b| !b.is_ascii_whitespace())
                .is_some_and(|b| *b != b'{')
                && is_json(bytes) =>
        {
            return Err(RawObjectError::NotAnObject)
        }
        Err(e) => return Err(RawObjectError::InvalidJson(e.to_string())),
    };
    de.end()
        .map_err(|e| RawObjectError::InvalidJson(e.to_string()))?;
    let base = bytes.as_ptr() as usize;
    Ok(spans
        .into_iter()
        .map(|(key, value)| {
            // `value` borrows from `bytes`: its offset is the distance between the pointers.
            let start = value.get().as_ptr() as usize - base;
            (key, start..start + value.get().len())
        })
        .collect())
}

fn is_json(bytes: &[u8]) -> bool {
    serde_json::from_slice::<serde::de::IgnoredAny>(bytes).is_ok()
}

fn quoted(key: &str) -> String {
    if key.len() <= MAX_QUOTED_KEY_BYTES {
        return key.to_string();
    }
    let mut end = MAX_QUOTED_KEY_BYTES;
    while !key.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &key[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(s: &str) -> RawObject {
        RawObject::parse(Bytes::from(s.to_string())).unwrap()
    }

    #[test]
    fn spans_give_each_value_as_written() {
        let o = obj(r#" {"model" : "m", "prompt":[1, 2,3], "x":{"k":"\u00e9"}, "n":null} "#);
        assert_eq!(o.keys().collect::<Vec<_>>(), ["model", "prompt", "x", "n"]);
        assert_eq!(o.raw("model"), Some(r#""m""#));
        assert_eq!(o.raw("prompt"), Some("[1, 2,3]"));
        assert_eq!(o.raw("x"), Some(r#"{"k":"\u00e9"}"#));
        assert_eq!(o.get("x"), Some(serde_json::json!({"k": "é"})));
        assert_eq!(o.raw("n"), Some("null"));
        assert!(o.contains_key("n") && !o.contains_key("absent"));
        assert_eq!(o.get_as::<&str>("model").unwrap().unwrap(), "m");
        assert_eq!(o.subset(&["model", "absent"]), {
            let mut m = Map::new();
            m.insert("model".into(), "m".into());
            m
        });
        assert_eq!(o.to_map().len(), 4);
    }

    #[test]
    fn refuses_what_is_not_one_object() {
        let e = |s: &str| RawObject::parse(Bytes::from(s.to_string())).unwrap_err();
        assert_eq!(e("[1]"), RawObjectError::NotAnObject);
        assert_eq!(e(" \"s\""), RawObjectError::NotAnObject);
        assert_eq!(
            e("{nope").to_string(),
            "key must be a string at line 1 column 2"
        );
        assert_eq!(
            e("{} {}").to_string(),
            "trailing characters at line 1 column 4"
        );
        assert!(matches!(e(""), RawObjectError::InvalidJson(_)));
        assert_eq!(
            e(r#"{"model":"a","x":1,"model":"b"}"#),
            RawObjectError::DuplicateKey("model".into())
        );
        let long = "k".repeat(100);
        let RawObjectError::DuplicateKey(k) = e(&format!(r#"{{"{long}":1,"{long}":2}}"#)) else {
            panic!()
        };
        assert_eq!(k, format!("{}…", "k".repeat(64)));
    }

    #[test]
    fn many_keys_are_indexed_and_a_late_repeat_is_found() {
        let n = MAX_FIELDS;
        let keys: Vec<String> = (0..n).map(|i| format!(r#""k{i}":{i}"#)).collect();
        let o = obj(&format!("{{{}}}", keys.join(",")));
        assert_eq!(o.raw("k4095"), Some("4095"));
        assert_eq!(o.raw("k0"), Some("0"));
        assert!(!o.contains_key("k4096"));
        let over = RawObject::parse(Bytes::from(format!(r#"{{{},"k":1}}"#, keys.join(","))));
        assert_eq!(
            over.unwrap_err().to_string(),
            "more than 4096 top-level fields"
        );
        let e = RawObject::parse(Bytes::from(format!(
            r#"{{{},"k7":1}}"#,
            keys[..n - 1].join(",")
        )));
        assert_eq!(e.unwrap_err(), RawObjectError::DuplicateKey("k7".into()));
        assert_eq!(
            scan(format!("{{{}}}", keys.join(",")).as_bytes())
                .unwrap()
                .len(),
            n
        );
    }

    #[test]
    fn deep_values_are_skipped_without_recursion_limits_hurting_the_scan() {
        // serde_json skips a value iteratively; only reading it would meet the depth limit.
        let deep = format!(
            r#"{{"m":"x","d":{}{}}}"#,
            "[".repeat(10_000),
            "]".repeat(10_000)
        );
        let o = obj(&deep);
        assert_eq!(o.raw("m"), Some(r#""x""#));
        assert_eq!(o.get("d"), None);
    }
}
