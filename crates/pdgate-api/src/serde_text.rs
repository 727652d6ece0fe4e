//! Wording of serde's errors for people: what a file's value should have been, never the Rust
//! type pdgate decodes it into.

/// `message` with serde's Rust type names replaced by the shape of value they stand for: the
/// names are pdgate's internals and mean nothing to whoever wrote the file.
/// - `expected struct RawPlugin`, `expected internally tagged enum Step` → `expected a mapping`;
///   `expected tuple struct X` → `expected a sequence`; `expected enum X` → `expected a string
///   or a mapping`;
/// - `expected i64` → `expected an integer`, `expected u32` → `expected a non-negative integer`,
///   `expected f64` → `expected a number`, `expected char` → `expected a character`;
/// - `integer `N` as u128` → `integer `N``.
///
/// Every config error (EPP and coordinator files), endpoints file and InferencePool spec error
/// is passed through this.
pub fn plain_expectation(message: &str) -> std::borrow::Cow<'_, str> {
    const NAMED: [(&str, &str); 4] = [
        ("internally tagged enum ", "a mapping"),
        ("tuple struct ", "a sequence"),
        ("struct ", "a mapping"),
        ("enum ", "a string or a mapping"),
    ];
    if !message.contains("expected ") && !message.contains("` as ") {
        return std::borrow::Cow::Borrowed(message);
    }
    let ident_len = |s: &str| {
        s.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(s.len())
    };
    let primitive = |name: &str| match name {
        "i8" | "i16" | "i32" | "i64" | "i128" | "isize" => Some("an integer"),
        "u8" | "u16" | "u32" | "u64" | "u128" | "usize" => Some("a non-negative integer"),
        "f32" | "f64" => Some("a number"),
        "char" => Some("a character"),
        _ => None,
    };
    let mut out = String::with_capacity(message.len());
    let mut rest = message;
    'scan: while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix("` as ") {
            let n = ident_len(after);
            if matches!(&after[..n], "u128" | "i128" | "u64" | "i64") {
                out.push('`');
                rest = &after[n..];
                continue;
            }
        }
        if let Some(after) = rest.strip_prefix("expected ") {
            for (kind, shape) in NAMED {
                if let Some(name) = after.strip_prefix(kind) {
                    let n = ident_len(name);
                    if n > 0 {
                        out.push_str("expected ");
                        out.push_str(shape);
                        rest = &name[n..];
                        continue 'scan;
                    }
                }
            }
            let n = ident_len(after);
            if let Some(shape) = primitive(&after[..n]) {
                out.push_str("expected ");
                out.push_str(shape);
                rest = &after[n..];
                continue;
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
            // Primitive types, and the width serde names an oversized integer by.
            (
                "log_level: invalid type: string \"high\", expected i64",
                "log_level: invalid type: string \"high\", expected an integer",
            ),
            (
                "invalid type: floating point `1.5`, expected u64",
                "invalid type: floating point `1.5`, expected a non-negative integer",
            ),
            (
                "x: invalid type: integer `99999999999999999999999` as u128, expected i64",
                "x: invalid type: integer `99999999999999999999999`, expected an integer",
            ),
            (
                "invalid type: string \"a\", expected f64",
                "invalid type: string \"a\", expected a number",
            ),
            ("expected u8s", "expected u8s"),
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
