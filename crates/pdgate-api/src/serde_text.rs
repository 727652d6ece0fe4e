//! Wording of serde's errors for people: what a file's value should have been, never the Rust
//! type pdgate decodes it into.

/// `message` with serde's Rust type names (`expected struct RawPlugin`, `expected internally
/// tagged enum Step`) replaced by the YAML shape they stand for (`expected a mapping`): the
/// type names are pdgate's internals and mean nothing to whoever wrote the file. Every config
/// error, endpoints file, InferencePool spec and tokenizer file error is passed through this.
pub fn plain_expectation(message: &str) -> std::borrow::Cow<'_, str> {
    const SHAPES: [(&str, &str); 4] = [
        ("expected internally tagged enum ", "expected a mapping"),
        ("expected tuple struct ", "expected a sequence"),
        ("expected struct ", "expected a mapping"),
        ("expected enum ", "expected a string or a mapping"),
    ];
    if !SHAPES.iter().any(|(from, _)| message.contains(from)) {
        return std::borrow::Cow::Borrowed(message);
    }
    let mut out = String::with_capacity(message.len());
    let mut rest = message;
    'scan: while !rest.is_empty() {
        for (from, to) in SHAPES {
            if let Some(after) = rest.strip_prefix(from) {
                let name_len = after
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .unwrap_or(after.len());
                if name_len > 0 {
                    out.push_str(to);
                    rest = &after[name_len..];
                    continue 'scan;
                }
            }
        }
        let c = rest.chars().next().unwrap_or_default();
        out.push(c);
        rest = &rest[c.len_utf8()..];
    }
    std::borrow::Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::plain_expectation;

    #[test]
    fn serde_type_names_become_yaml_shapes() {
        for (given, want) in [
            (
                "invalid type: sequence, expected struct RawDoc",
                "invalid type: sequence, expected a mapping",
            ),
            (
                "plugins[0]: invalid type: integer `5`, expected struct RawPlugin",
                "plugins[0]: invalid type: integer `5`, expected a mapping",
            ),
            (
                "pipeline.steps[1]: invalid type: string \"x\", expected internally tagged enum Step",
                "pipeline.steps[1]: invalid type: string \"x\", expected a mapping",
            ),
            (
                "invalid type: map, expected tuple struct Pair",
                "invalid type: map, expected a sequence",
            ),
            (
                "kind: invalid type: integer `1`, expected enum Kind",
                "kind: invalid type: integer `1`, expected a string or a mapping",
            ),
            // Non-ASCII around a name, a name at the very end, two in one message.
            (
                "é: expected struct A_b9. é expected struct C",
                "é: expected a mapping. é expected a mapping",
            ),
            // Untouched: no type name follows, or serde's own wording without one.
            ("expected struct ", "expected struct "),
            (
                "unknown field `x`, expected one of `a`, `b`",
                "unknown field `x`, expected one of `a`, `b`",
            ),
            (
                "invalid type: integer `5`, expected a sequence",
                "invalid type: integer `5`, expected a sequence",
            ),
        ] {
            assert_eq!(plain_expectation(given), want, "{given}");
        }
    }
}
