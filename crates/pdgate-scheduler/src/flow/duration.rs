//! Go `time.Duration` strings as llm-d's config uses them (`defaultRequestTTL: 30s`,
//! `metricsStalenessThreshold: 200ms`): a sequence of decimal numbers each with a unit `ns`,
//! `us` (`µs`), `ms`, `s`, `m`, `h`, e.g. `1h30m`, `1.5s`; `0` alone is zero. Source: Go
//! `time.ParseDuration`.

use serde::de::{Deserialize, Deserializer};
use std::time::Duration;

/// Parses a Go duration (see the module docs); negative durations are refused.
///
/// Errors: a message naming the text and what is wrong.
pub fn parse(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let bad = |why: &str| format!("duration `{t}` {why} (expected e.g. `30s`, `500ms`, `1m`)");
    if t == "0" {
        return Ok(Duration::ZERO);
    }
    if t.starts_with('-') {
        return Err(bad("must not be negative"));
    }
    let mut rest = t.strip_prefix('+').unwrap_or(t);
    if rest.is_empty() {
        return Err(bad("is empty"));
    }
    let mut total = 0f64;
    while !rest.is_empty() {
        let n = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(|| bad("has a number without a unit"))?;
        let value: f64 = rest[..n].parse().map_err(|_| bad("is not a number"))?;
        rest = &rest[n..];
        let u = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let secs = match &rest[..u] {
            "ns" => 1e-9,
            "us" | "µs" | "μs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            "" => return Err(bad("has a number without a unit")),
            other => return Err(bad(&format!("has an unknown unit `{other}`"))),
        };
        total += value * secs;
        rest = &rest[u..];
    }
    Duration::try_from_secs_f64(total).map_err(|_| bad("is too large"))
}

/// A [`Duration`] read from a Go duration string.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GoDuration(pub Duration);

impl<'de> Deserialize<'de> for GoDuration {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        parse(&s).map(GoDuration).map_err(serde::de::Error::custom)
    }
}

impl serde::Serialize for GoDuration {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format(self.0))
    }
}

/// Formats `d` the way Go prints simple durations (`30s`, `200ms`, `1m0s` is written `60s`).
pub fn format(d: Duration) -> String {
    let ms = d.as_millis();
    if ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else {
        format!("{ms}ms")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations() {
        assert_eq!(parse("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse("200ms"), Ok(Duration::from_millis(200)));
        assert_eq!(parse("1m"), Ok(Duration::from_secs(60)));
        assert_eq!(parse("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse("0s"), Ok(Duration::ZERO));
        assert_eq!(parse("0"), Ok(Duration::ZERO));
        assert!(parse("-1s").unwrap_err().contains("negative"));
        assert!(parse("10").unwrap_err().contains("without a unit"));
        assert!(parse("5d").unwrap_err().contains("unknown unit `d`"));
        assert_eq!(format(Duration::from_secs(60)), "60s");
        assert_eq!(format(Duration::from_millis(200)), "200ms");
    }
}
