//! Kubernetes `resource.Quantity` values as flow-control limits use them (`maxBytes: "1Gi"`,
//! `maxRequests: 500`): a plain integer, or a decimal number with a binary suffix (`Ki`,
//! `Mi`, `Gi`, `Ti`, `Pi`, `Ei`), a decimal suffix (`m`, `k`, `M`, `G`, `T`, `P`, `E`) or an
//! exponent (`1e3`). Fractions round up to the next whole unit (a limit of `1.5k` requests is
//! 1,500; of `0.5` is 1). Source: k8s.io/apimachinery `pkg/api/resource/quantity.go`.

use serde::de::{self, Deserializer, Visitor};
use std::fmt;

/// A non-negative whole quantity (requests or bytes). 0 means "not set" where the field
/// allows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Quantity(pub u64);

/// Parses a quantity string (see the module docs).
///
/// Errors: a message naming what is wrong (empty, negative, unknown suffix, not a number,
/// too large).
pub fn parse(text: &str) -> Result<u64, String> {
    let t = text.trim();
    if t.is_empty() {
        return Err("empty quantity".into());
    }
    if t.starts_with('-') {
        return Err(format!("quantity `{t}` must be non-negative"));
    }
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+'))
        .unwrap_or(t.len());
    let (num, suffix) = t.split_at(split);
    let (num, scale) = match suffix {
        "" => (num.to_string(), 1f64),
        "Ki" => (num.into(), 1024f64),
        "Mi" => (num.into(), 1024f64.powi(2)),
        "Gi" => (num.into(), 1024f64.powi(3)),
        "Ti" => (num.into(), 1024f64.powi(4)),
        "Pi" => (num.into(), 1024f64.powi(5)),
        "Ei" => (num.into(), 1024f64.powi(6)),
        "m" => (num.into(), 1e-3),
        "k" => (num.into(), 1e3),
        "M" => (num.into(), 1e6),
        "G" => (num.into(), 1e9),
        "T" => (num.into(), 1e12),
        "P" => (num.into(), 1e15),
        "E" => (num.into(), 1e18),
        s if s.starts_with(['e', 'E']) => (format!("{num}{s}"), 1f64),
        s => return Err(format!("quantity `{t}` has an unknown suffix `{s}`")),
    };
    let v: f64 = num
        .parse()
        .map_err(|_| format!("quantity `{t}` is not a number"))?;
    let v = (v * scale).ceil();
    if !v.is_finite() || v >= u64::MAX as f64 {
        return Err(format!("quantity `{t}` is too large"));
    }
    Ok(v as u64)
}

impl<'de> serde::Deserialize<'de> for Quantity {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Quantity;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a quantity: a non-negative integer or a string such as \"1Gi\"")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Quantity, E> {
                Ok(Quantity(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Quantity, E> {
                u64::try_from(v)
                    .map(Quantity)
                    .map_err(|_| E::custom(format!("quantity {v} must be non-negative")))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Quantity, E> {
                parse(&v.to_string()).map(Quantity).map_err(E::custom)
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Quantity, E> {
                parse(v).map(Quantity).map_err(E::custom)
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    use super::parse;

    #[test]
    fn suffixes_exponents_and_errors() {
        assert_eq!(parse("1024"), Ok(1024));
        assert_eq!(parse("1Gi"), Ok(1 << 30));
        assert_eq!(parse("10Gi"), Ok(10 << 30));
        assert_eq!(parse("500Mi"), Ok(500 << 20));
        assert_eq!(parse("1k"), Ok(1000));
        assert_eq!(parse("1.5k"), Ok(1500));
        assert_eq!(parse("0.5"), Ok(1));
        assert_eq!(parse("1e3"), Ok(1000));
        assert_eq!(parse("500m"), Ok(1)); // 0.5 rounds up
        assert_eq!(parse("2000m"), Ok(2));
        assert_eq!(parse("0"), Ok(0));
        assert!(parse("-1").unwrap_err().contains("non-negative"));
        assert!(parse("1Qi").unwrap_err().contains("unknown suffix `Qi`"));
        assert!(parse("abc").is_err());
        assert!(parse("").is_err());
        assert!(parse("99E").unwrap_err().contains("too large"));
    }
}
