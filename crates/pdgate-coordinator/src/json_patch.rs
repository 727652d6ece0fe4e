//! Top-level field edits on a JSON object's bytes, without a DOM: every value the edit does
//! not touch is copied byte for byte, in the client's key order. The phase bodies
//! (design.md §5.2) are built this way, so a prefill or decode leg costs one scan and one copy
//! of the client body, however long its prompt.
//!
//! The object is scanned once ([`pdgate_api::raw_object::scan`]: borrowed slices of the input),
//! or its scan is reused ([`patch_object`]);
//! the output is `{`, each kept entry as `"key":<original value bytes>`, each set field in
//! place of the original (or appended after the last entry when new), `}`. Whitespace
//! between entries is not kept.

use pdgate_api::raw_object::{scan, RawObject};

/// One edit of a top-level field.
#[derive(Debug, Clone, Copy)]
pub enum Edit<'a> {
    /// Set the field to these JSON bytes (a serialized value).
    Set(&'a str, &'a [u8]),
    /// Set the field to these JSON bytes only when the object has it.
    Replace(&'a str, &'a [u8]),
    /// Remove the field.
    Remove(&'a str),
}

impl Edit<'_> {
    fn key(&self) -> &str {
        match self {
            Edit::Set(k, _) | Edit::Replace(k, _) | Edit::Remove(k) => k,
        }
    }
}

/// `raw` (a JSON object) with `edits` applied (see the module docs). A key given twice in
/// `raw` keeps its first position and takes the edit once; later duplicates are dropped, as
/// a JSON reader that keeps the last value would otherwise see the client's copy.
///
/// Errors: `raw` is not a JSON object (the serde_json message).
pub fn patch(raw: &[u8], edits: &[Edit<'_>]) -> Result<Vec<u8>, String> {
    let entries = scan(raw).map_err(|e| e.to_string())?;
    Ok(apply(
        raw.len(),
        entries.iter().map(|(k, r)| (k.as_str(), &raw[r.clone()])),
        edits,
    ))
}

/// A scanned object (its keys are unique) with `edits` applied; cannot fail.
pub fn patch_object(obj: &RawObject, edits: &[Edit<'_>]) -> Vec<u8> {
    apply(obj.bytes().len(), obj.entries(), edits)
}

fn apply<'e>(
    len: usize,
    entries: impl Iterator<Item = (&'e str, &'e [u8])>,
    edits: &[Edit<'_>],
) -> Vec<u8> {
    let mut out = Vec::with_capacity(len + 256);
    out.push(b'{');
    let mut done = vec![false; edits.len()];
    // Keys written so far (a later duplicate is dropped); hashed, so that an object of many
    // keys costs linear time.
    let mut seen: std::collections::HashSet<&str> = std::collections::HashSet::new();
    let mut first = true;
    let mut entry = |out: &mut Vec<u8>, key: &str, value: &[u8]| {
        if !first {
            out.push(b',');
        }
        first = false;
        // Serializing a string cannot fail.
        let _ = serde_json::to_writer(&mut *out, key);
        out.push(b':');
        out.extend_from_slice(value);
    };
    for (key, value) in entries {
        let edit = edits.iter().position(|e| e.key() == key);
        match edit {
            Some(i) if done[i] => continue,
            Some(i) => {
                done[i] = true;
                if let Edit::Set(k, v) | Edit::Replace(k, v) = edits[i] {
                    entry(&mut out, k, v);
                }
            }
            None if seen.contains(key) => continue,
            None => entry(&mut out, key, value),
        }
        seen.insert(key);
    }
    for (i, e) in edits.iter().enumerate() {
        if let (false, Edit::Set(k, v)) = (done[i], e) {
            entry(&mut out, k, v);
        }
    }
    out.push(b'}');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(raw: &str, edits: &[Edit<'_>]) -> String {
        String::from_utf8(patch(raw.as_bytes(), edits).unwrap()).unwrap()
    }

    #[test]
    fn untouched_values_keep_their_bytes_and_order() {
        let raw = r#"{"z": 1.50, "model":"m", "prompt":[1, 2,3], "a":{"k" : "\u00e9"}}"#;
        assert_eq!(
            p(raw, &[Edit::Set("stream", b"false")]),
            r#"{"z":1.50,"model":"m","prompt":[1, 2,3],"a":{"k" : "\u00e9"},"stream":false}"#
        );
    }

    #[test]
    fn set_replaces_in_place_and_remove_drops() {
        let raw = r#"{"stream":true,"max_tokens":50,"min_tokens":3,"x":null}"#;
        let edits = [
            Edit::Set("max_tokens", b"1"),
            Edit::Remove("min_tokens"),
            Edit::Set("stream", b"false"),
            Edit::Remove("absent"),
            Edit::Replace("x", b"7"),
            Edit::Replace("absent", b"8"),
        ];
        assert_eq!(p(raw, &edits), r#"{"stream":false,"max_tokens":1,"x":7}"#);
        assert_eq!(p("{}", &[Edit::Set("a", b"[]")]), r#"{"a":[]}"#);
        assert_eq!(p(" { } ", &[Edit::Remove("a")]), "{}");
    }

    #[test]
    fn a_duplicated_key_is_edited_once_and_its_copies_dropped() {
        let raw = r#"{"kv_transfer_params":{"remote_host":"evil"},"m":1,"kv_transfer_params":{"x":2},"m":3}"#;
        assert_eq!(
            p(raw, &[Edit::Set("kv_transfer_params", b"{}")]),
            r#"{"kv_transfer_params":{},"m":1}"#
        );
    }

    #[test]
    fn not_an_object_is_an_error() {
        assert!(patch(b"[1,2]", &[]).is_err());
        assert!(patch(b"{\"a\":", &[]).is_err());
    }
}
