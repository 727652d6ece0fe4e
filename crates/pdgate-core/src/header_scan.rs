//! The names a request's headers carry, read once, so that the routing path's many lookups
//! by name (about forty: pin and rank aliases, profile, `Prefer`, forwarded and internal
//! names) cost a short scan of names instead of a parse and hash of each asked-for name.
//! A request usually carries a handful of headers and none of those names; a lookup then
//! never touches the header map.

use http::HeaderMap;

/// The distinct header names of one request, as lowercase strings (one pass over the map).
#[derive(Debug)]
pub struct HeaderNames<'h> {
    names: Vec<&'h str>,
    /// True when some name starts with `x-` (most names asked for do; most requests carry
    /// none, so those lookups end here).
    any_x: bool,
}

impl<'h> HeaderNames<'h> {
    /// The names present in `headers`.
    pub fn of(headers: &'h HeaderMap) -> Self {
        let names: Vec<&'h str> = headers.keys().map(|k| k.as_str()).collect();
        let any_x = names.iter().any(|n| n.starts_with("x-"));
        HeaderNames { names, any_x }
    }

    /// True when the request has a header `name` (lowercase, as the constants are).
    pub fn has(&self, name: &str) -> bool {
        if !self.any_x && name.starts_with("x-") {
            return false;
        }
        self.names.contains(&name)
    }
}

/// Removes from `headers` every header whose (lowercase) name satisfies `drop`: one pass
/// over the names it carries, and a map removal only for those it finds.
pub fn remove_where(headers: &mut HeaderMap, drop: impl Fn(&str) -> bool) {
    let found: Vec<http::HeaderName> = headers
        .keys()
        .filter(|k| drop(k.as_str()))
        .cloned()
        .collect();
    for name in found {
        headers.remove(name);
    }
}

/// The first of `names` (in order) that `h` carries with a non-empty value, trimmed; a
/// header `present` says is absent is skipped unread (`None`: read every name).
///
/// Errors: a value that is not visible ASCII → 400 naming that header.
pub fn first_value<'h>(
    h: &'h HeaderMap,
    names: &[&'static str],
    present: Option<&HeaderNames<'_>>,
) -> Result<Option<&'h str>, crate::errors::ApiError> {
    for name in names {
        if present.is_some_and(|p| !p.has(name)) {
            continue;
        }
        if let Some(v) = h.get(*name) {
            let v = v
                .to_str()
                .map_err(|_| crate::errors::ApiError::InvalidHeader {
                    header: name,
                    reason: "not a visible ASCII string".into(),
                })?;
            let v = v.trim();
            if !v.is_empty() {
                return Ok(Some(v));
            }
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    #[test]
    fn finds_present_names_only_and_removes_them() {
        let mut h = HeaderMap::new();
        h.insert("x-dp-rank", HeaderValue::from_static("1"));
        h.append("x-dp-rank", HeaderValue::from_static("1"));
        h.insert(http::header::CONTENT_TYPE, HeaderValue::from_static("a"));
        let names = HeaderNames::of(&h);
        assert!(names.has("x-dp-rank") && names.has("content-type"));
        assert!(!names.has("x-worker-instance-id") && !names.has("X-Dp-Rank"));
        remove_where(&mut h, |n| ["x-dp-rank", "x-session-id"].contains(&n));
        assert_eq!(h.len(), 1);
        assert!(h.contains_key("content-type"));
        // No `x-` name at all: such lookups end early, the others still scan.
        let names = HeaderNames::of(&h);
        assert!(!names.has("x-dp-rank") && names.has("content-type") && !names.has("prefer"));
        h.insert("x-other", HeaderValue::from_static("1"));
        h.insert("x-session-id", HeaderValue::from_static("s"));
        assert!(HeaderNames::of(&h).has("x-session-id"));
    }
}
