//! Kubernetes label-selector strings (`labels.Parse`), the screener's `scope.labelSelector`.
//!
//! Grammar: requirements separated by `,` (AND), each one of `k=v`, `k==v`, `k!=v`,
//! `k in (a,b)`, `k notin (a,b)`, `k` (exists) or `!k` (does not exist); whitespace around
//! tokens is ignored. `k=` / `k!=` compare with the empty value. `k!=v` and `notin` also match
//! endpoints without the label (Kubernetes semantics). The empty string selects everything.
//! The set-based `>`/`<` operators are not supported. Keys and values are validated like
//! Kubernetes (via [`LabelSelector::validate`]).

use crate::plugins::label_selector_filter::{LabelSelector, Operator, Requirement};
use std::collections::BTreeMap;
use std::fmt;

/// A parsed label-selector string.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Selector {
    text: String,
    inner: LabelSelector,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tok<'a> {
    /// A key, a value, or the words `in` / `notin`.
    Word(&'a str),
    Not,
    Eq,
    DoubleEq,
    NotEq,
    Open,
    Close,
    Comma,
    Gt,
    Lt,
}

impl fmt::Display for Tok<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self {
            Tok::Word(w) => return write!(f, "`{w}`"),
            Tok::Not => "`!`",
            Tok::Eq => "`=`",
            Tok::DoubleEq => "`==`",
            Tok::NotEq => "`!=`",
            Tok::Open => "`(`",
            Tok::Close => "`)`",
            Tok::Comma => "`,`",
            Tok::Gt => "`>`",
            Tok::Lt => "`<`",
        };
        f.write_str(s)
    }
}

fn lex(s: &str) -> Vec<Tok<'_>> {
    let special = |c: char| c.is_whitespace() || "!=(),<>".contains(c);
    let mut out = Vec::new();
    let mut rest = s;
    while let Some(c) = rest.chars().next() {
        let (tok, len) = match c {
            c if c.is_whitespace() => {
                rest = &rest[c.len_utf8()..];
                continue;
            }
            '!' if rest.starts_with("!=") => (Tok::NotEq, 2),
            '!' => (Tok::Not, 1),
            '=' if rest.starts_with("==") => (Tok::DoubleEq, 2),
            '=' => (Tok::Eq, 1),
            '(' => (Tok::Open, 1),
            ')' => (Tok::Close, 1),
            ',' => (Tok::Comma, 1),
            '>' => (Tok::Gt, 1),
            '<' => (Tok::Lt, 1),
            _ => {
                let len = rest.find(special).unwrap_or(rest.len());
                (Tok::Word(&rest[..len]), len)
            }
        };
        out.push(tok);
        rest = &rest[len..];
    }
    out
}

struct Parser<'a> {
    toks: Vec<Tok<'a>>,
    at: usize,
}

impl<'a> Parser<'a> {
    fn peek(&self) -> Option<Tok<'a>> {
        self.toks.get(self.at).copied()
    }

    fn next(&mut self) -> Option<Tok<'a>> {
        let t = self.peek();
        self.at += 1;
        t
    }

    fn found(t: Option<Tok<'_>>) -> String {
        t.map_or_else(|| "the end".to_string(), |t| t.to_string())
    }

    /// One requirement (the cursor is at its first token).
    fn requirement(&mut self) -> Result<Requirement, String> {
        let req = |key: &str, operator, values: Vec<String>| Requirement {
            key: key.to_string(),
            operator,
            values,
        };
        let key = match self.next() {
            Some(Tok::Not) => {
                return match self.next() {
                    Some(Tok::Word(k)) => Ok(req(k, Operator::DoesNotExist, vec![])),
                    t => Err(format!(
                        "expected a label key after `!`, found {}",
                        Self::found(t)
                    )),
                }
            }
            Some(Tok::Word(k)) => k,
            t => return Err(format!("expected a label key, found {}", Self::found(t))),
        };
        match self.peek() {
            None | Some(Tok::Comma) => Ok(req(key, Operator::Exists, vec![])),
            Some(Tok::Eq | Tok::DoubleEq) => {
                self.at += 1;
                Ok(req(key, Operator::In, vec![self.exact_value(key)?]))
            }
            Some(Tok::NotEq) => {
                self.at += 1;
                Ok(req(key, Operator::NotIn, vec![self.exact_value(key)?]))
            }
            Some(Tok::Word(w @ ("in" | "notin"))) => {
                self.at += 1;
                let values = self.set(key, w)?;
                let op = if w == "in" {
                    Operator::In
                } else {
                    Operator::NotIn
                };
                Ok(req(key, op, values))
            }
            Some(t @ (Tok::Gt | Tok::Lt)) => Err(format!(
                "operator {t} (after `{key}`) is not supported; use =, ==, !=, in, notin, exists or !"
            )),
            t => Err(format!(
                "expected an operator or `,` after `{key}`, found {}",
                Self::found(t)
            )),
        }
    }

    /// The value after `=`, `==` or `!=`; empty at a `,` or the end.
    fn exact_value(&mut self, key: &str) -> Result<String, String> {
        match self.peek() {
            None | Some(Tok::Comma) => Ok(String::new()),
            Some(Tok::Word(v)) => {
                self.at += 1;
                Ok(v.to_string())
            }
            t => Err(format!(
                "expected a value for `{key}`, found {}",
                Self::found(t)
            )),
        }
    }

    /// `( v1, v2, … )` after `in` / `notin`.
    fn set(&mut self, key: &str, op: &str) -> Result<Vec<String>, String> {
        match self.next() {
            Some(Tok::Open) => {}
            t => {
                return Err(format!(
                    "expected `(` after `{key} {op}`, found {}",
                    Self::found(t)
                ))
            }
        }
        if self.peek() == Some(Tok::Close) {
            return Err(format!("`{key} {op} ()` needs at least one value"));
        }
        let mut values = Vec::new();
        loop {
            match self.next() {
                Some(Tok::Word(v)) => values.push(v.to_string()),
                t => {
                    return Err(format!(
                        "expected a value in `{key} {op} (…)`, found {}",
                        Self::found(t)
                    ))
                }
            }
            match self.next() {
                Some(Tok::Comma) => {}
                Some(Tok::Close) => return Ok(values),
                t => {
                    return Err(format!(
                        "expected `,` or `)` in `{key} {op} (…)`, found {}",
                        Self::found(t)
                    ))
                }
            }
        }
    }
}

impl Selector {
    /// Parses and validates a selector string.
    ///
    /// Errors: what is wrong and where, e.g. "expected a label key, found `,`" or
    /// "`Bad_` is not a valid label key (…)".
    pub fn parse(text: &str) -> Result<Selector, String> {
        let mut p = Parser {
            toks: lex(text),
            at: 0,
        };
        let mut exprs = Vec::new();
        if !p.toks.is_empty() {
            loop {
                exprs.push(p.requirement()?);
                match p.next() {
                    None => break,
                    Some(Tok::Comma) => {}
                    t => {
                        return Err(format!(
                            "expected `,` or the end after requirement {}, found {}",
                            exprs.len(),
                            Parser::found(t)
                        ))
                    }
                }
            }
        }
        let inner = LabelSelector {
            match_labels: BTreeMap::new(),
            match_expressions: exprs,
        };
        inner.validate().map_err(|e| e.message)?;
        Ok(Selector {
            text: text.to_string(),
            inner,
        })
    }

    /// True when `labels` satisfy every requirement (always, for the empty selector).
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.inner.matches(labels)
    }

    /// The selector as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The equivalent structured selector (`matchExpressions` only, in written order).
    pub fn as_label_selector(&self) -> &LabelSelector {
        &self.inner
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// Names of the label sets `sel` matches among a fixed fleet.
    fn run(sel: &str) -> Vec<&'static str> {
        let fleet = [
            ("a", labels(&[("set", "s1"), ("tier", "gold")])),
            ("b", labels(&[("set", "s1"), ("tier", "silver")])),
            ("c", labels(&[("set", "s2")])),
            ("d", labels(&[])),
        ];
        let s = Selector::parse(sel).unwrap_or_else(|e| panic!("{sel:?}: {e}"));
        fleet
            .iter()
            .filter(|(_, l)| s.matches(l))
            .map(|(n, _)| *n)
            .collect()
    }

    #[test]
    fn kubernetes_selector_string_semantics() {
        assert_eq!(run(""), ["a", "b", "c", "d"]);
        assert_eq!(run("   "), ["a", "b", "c", "d"]);
        assert_eq!(run("set=s1"), ["a", "b"]);
        assert_eq!(run("set == s1"), ["a", "b"]);
        assert_eq!(run("set!=s1"), ["c", "d"]);
        assert_eq!(run("tier in (gold, bronze)"), ["a"]);
        assert_eq!(run("tier notin (gold)"), ["b", "c", "d"]);
        assert_eq!(run("tier"), ["a", "b"]);
        assert_eq!(run("!tier"), ["c", "d"]);
        assert_eq!(run("set=s1,tier!=gold"), ["b"]);
        assert_eq!(run(" set in (s1,s2) , !tier "), ["c"]);
        assert_eq!(run("tier="), Vec::<&str>::new());
        let s = Selector::parse("set=s1").unwrap();
        assert_eq!(s.as_str(), "set=s1");
        assert_eq!(s.as_label_selector().match_expressions.len(), 1);
    }

    #[test]
    fn malformed_selectors_say_what_is_wrong() {
        let err = |s: &str| Selector::parse(s).unwrap_err();
        assert_eq!(err("a=b,"), "expected a label key, found the end");
        assert_eq!(err(",a"), "expected a label key, found `,`");
        assert_eq!(
            err("a=b c"),
            "expected `,` or the end after requirement 1, found `c`"
        );
        assert_eq!(err("a in b"), "expected `(` after `a in`, found `b`");
        assert_eq!(err("a in ()"), "`a in ()` needs at least one value");
        assert_eq!(
            err("a in (x"),
            "expected `,` or `)` in `a in (…)`, found the end"
        );
        assert_eq!(
            err("a in (x,)"),
            "expected a value in `a in (…)`, found `)`"
        );
        assert_eq!(err("!"), "expected a label key after `!`, found the end");
        assert_eq!(err("a=(b)"), "expected a value for `a`, found `(`");
        assert!(err("a>1").starts_with("operator `>` (after `a`) is not supported"));
        assert!(err("Bad.Prefix/x=1").contains("is not a valid label key"));
        assert!(err("a=-x").contains("is not a valid label value"));
    }
}
