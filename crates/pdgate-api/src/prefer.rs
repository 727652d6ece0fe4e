//! Parser for the `Prefer` request header ([`crate::headers::PREFER`], RFC 7240 §2).
//!
//! Used for conditional decode: a coordinator sends the decode leg with
//! `Prefer: if-available`, asking the decode router to serve it only when the prompt prefix is
//! cached enough (otherwise 412). Pure: no IO, never panics on malformed input.
//!
//! Grammar (RFC 7240 §2, RFC 7230 §3.2.6, §7):
//! `Prefer = 1#preference`;
//! `preference = token [ BWS "=" BWS word ] *( OWS ";" [ OWS parameter ] )`;
//! `parameter = token [ BWS "=" BWS word ]`; `word = token / quoted-string`.

/// The `if-available` preference token: serve the request only if it can be served cheaply
/// (conditional decode).
pub const IF_AVAILABLE: &str = "if-available";

/// One preference of a `Prefer` header (RFC 7240 §2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Preference {
    /// Preference token, lower-cased (tokens are case-insensitive, RFC 7240 §2).
    pub name: String,
    /// Value, unquoted. `None` when absent or zero-length (RFC 7240 §2: `foo=""` is `foo`).
    pub value: Option<String>,
    /// Parameters in header order: lower-cased name, unquoted value (`None` as for `value`).
    pub params: Vec<(String, Option<String>)>,
}

/// Parses every `Prefer` header value (one `&str` per header line) into preferences
/// (RFC 7240 §2).
///
/// Empty list elements (`a,,b`) are ignored; commas inside quoted strings do not split.
/// A malformed element (name not an RFC 7230 token, bad value or parameter, unterminated
/// quote) is skipped. When a preference name appears more than once, only the first occurrence
/// is kept (RFC 7240 §2).
pub fn parse_prefer<'a>(values: impl IntoIterator<Item = &'a str>) -> Vec<Preference> {
    let mut out: Vec<Preference> = Vec::new();
    let elements = values.into_iter().flat_map(|v| split_unquoted(v, ','));
    // An empty element has no token name, so `parse_element` drops it like a malformed one.
    for pref in elements.filter_map(parse_element) {
        if !out.iter().any(|p| p.name == pref.name) {
            out.push(pref);
        }
    }
    out
}

/// True when the preference `name` (case-insensitive) is present in any of the `Prefer` header
/// values (RFC 7240 §2). Its value and parameters are not looked at.
pub fn prefers<'a>(values: impl IntoIterator<Item = &'a str>, name: &str) -> bool {
    parse_prefer(values)
        .iter()
        .any(|p| p.name.eq_ignore_ascii_case(name))
}

/// One list element: `preference *( OWS ";" [ OWS parameter ] )`.
fn parse_element(element: &str) -> Option<Preference> {
    let mut parts = split_unquoted(element, ';').into_iter();
    let (name, value) = parse_pair(parts.next()?)?;
    // `[ OWS parameter ]`: an empty parameter slot (`a;;b`, trailing `;`) is allowed.
    let params = parts.filter(|p| !trim_ows(p).is_empty()).map(parse_pair);
    let params = params.collect::<Option<Vec<_>>>()?;
    Some(Preference {
        name,
        value,
        params,
    })
}

/// `token [ BWS "=" BWS word ]`, surrounded by optional whitespace.
fn parse_pair(s: &str) -> Option<(String, Option<String>)> {
    let (name, value) = match s.split_once('=') {
        Some((n, v)) => (trim_ows(n), Some(trim_ows(v))),
        None => (trim_ows(s), None),
    };
    if !is_token(name) {
        return None;
    }
    let value = match value {
        None | Some("") => None,
        Some(v) if v.starts_with('"') => unquote(v)?,
        Some(v) if is_token(v) => Some(v.to_owned()),
        Some(_) => return None,
    };
    Some((name.to_ascii_lowercase(), value))
}

/// Decodes a quoted-string that spans all of `s`; `Some(None)` for `""` (RFC 7240 §2).
fn unquote(s: &str) -> Option<Option<String>> {
    let mut chars = s.strip_prefix('"')?.chars();
    let mut out = String::new();
    while let Some(c) = chars.next() {
        match c {
            '"' => {
                // The closing quote must end the word.
                return chars
                    .next()
                    .is_none()
                    .then(|| (!out.is_empty()).then_some(out));
            }
            '\\' => out.push(chars.next().filter(|&e| is_quotable(e))?),
            c if is_quotable(c) => out.push(c),
            _ => return None,
        }
    }
    None
}

/// Splits `s` at `sep` outside quoted strings (quoted-pair escapes honoured).
fn split_unquoted(s: &str, sep: char) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut start, mut quoted, mut escaped) = (0, false, false);
    for (i, c) in s.char_indices() {
        if escaped {
            escaped = false;
        } else if quoted && c == '\\' {
            escaped = true;
        } else if c == '"' {
            quoted = !quoted;
        } else if c == sep && !quoted {
            parts.push(&s[start..i]);
            start = i + c.len_utf8();
        }
    }
    parts.push(&s[start..]);
    parts
}

/// Strips OWS (SP / HTAB, RFC 7230 §3.2.3).
fn trim_ows(s: &str) -> &str {
    s.trim_matches([' ', '\t'])
}

/// `token = 1*tchar` (RFC 7230 §3.2.6).
fn is_token(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// Characters allowed in qdtext or after `\` in a quoted-pair, besides `"` / `\` themselves
/// (HTAB / SP / VCHAR / obs-text, RFC 7230 §3.2.6).
fn is_quotable(c: char) -> bool {
    c == '\t' || c == ' ' || c.is_ascii_graphic() || !c.is_ascii()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Renders the parse as `name[=value][;param[=value]]...`, preferences joined by ` | `.
    fn render(values: &[&str]) -> String {
        let kv = |k: &str, v: &Option<String>| v.as_ref().map_or(k.into(), |v| format!("{k}={v}"));
        let one = |p: &Preference| {
            let params = p.params.iter().map(|(k, v)| format!(";{}", kv(k, v)));
            kv(&p.name, &p.value) + &params.collect::<String>()
        };
        let prefs = parse_prefer(values.iter().copied());
        prefs.iter().map(one).collect::<Vec<_>>().join(" | ")
    }

    #[test]
    fn presence_of_if_available() {
        let cases: &[(&[&str], bool)] = &[
            (&["if-available"], true),
            (&["If-Available"], true),
            (&["respond-async, if-available"], true),
            (&["wait=10, if-available;foo=bar"], true),
            (&["return=minimal; foo=\"a,b\", if-available"], true),
            (&["respond-async", "if-available"], true),
            (&["if-available=false"], true),
            (&[" \tif-available\t ; ; "], true),
            (&["a b, if-available, c d"], true),
            (&["x=\"open, if-available", "if-available"], true),
            (&["x=\"open, if-available"], false),
            (&["if-availablex"], false),
            (&["x-if-available"], false),
            (&["\"if-available\""], false),
            (&["", ",,"], false),
            (&[], false),
        ];
        for (values, want) in cases {
            let got = prefers(values.iter().copied(), IF_AVAILABLE);
            assert_eq!(got, *want, "{values:?}");
        }
        assert!(prefers(["if-available"], "IF-AVAILABLE"));
    }

    #[test]
    fn parsed_preferences() {
        let cases: &[(&[&str], &str)] = &[
            (&["If-Available"], "if-available"),
            (
                &["wait=10, if-available;foo=bar"],
                "wait=10 | if-available;foo=bar",
            ),
            (
                &["return=minimal; foo=\"a,b\", if-available"],
                "return=minimal;foo=a,b | if-available",
            ),
            (
                &["respond-async", "if-available"],
                "respond-async | if-available",
            ),
            (&["if-available=false"], "if-available=false"),
            (&["wait=1, wait=2"], "wait=1"),
            (&["WAIT=3", "wait=4"], "wait=3"),
            (&["wait = 5 ; a = \"b\""], "wait=5;a=b"),
            (&["foo=\"\"; Bar=\"\""], "foo;bar"), // RFC 7240 §2: zero-length value = no value
            (&[r#"a="x\"y\\z,w""#], r#"a=x"y\z,w"#),
            (&["a,,b"], "a | b"),
            (&[""], ""),
            (&[",,, ,"], ""),
            (&["\"if-available\""], ""),
        ];
        for (values, want) in cases {
            assert_eq!(render(values), *want, "{values:?}");
        }
        let want = Preference {
            name: "if-available".into(),
            value: None,
            params: vec![("foo".into(), Some("bar".into()))],
        };
        assert_eq!(parse_prefer(["wait=10, if-available;foo=bar"])[1], want);
    }

    #[test]
    fn malformed_elements_are_skipped() {
        let bad = [
            "w=a b",
            "w=\"open",
            "w=\"x\"y",
            "p;bad name=1",
            "=1",
            ";x",
            "é",
            "@",
        ];
        for value in bad {
            assert_eq!(parse_prefer([value]), [], "{value:?}");
            // A bad element neither hides nor breaks its neighbours.
            let line = format!("a, {value}");
            assert_eq!(render(&[line.as_str(), "b"]), "a | b", "{line:?}");
        }
    }
}
