//! Header rules, in one place (design.md §5.3): what a client may send on, what reaches the
//! upstream on each leg, and what the client sees back.

use http::header::{HeaderName, HeaderValue};
use http::HeaderMap;
use pdgate_api::headers;

/// Hop-by-hop headers (RFC 9110 §7.6.1) plus those the proxy recomputes; never forwarded.
/// `Expect` is among them: the router answers a client's `100-continue` itself (hyper, when
/// it reads the body) and sends each leg's body whole, so an engine is never asked to.
/// `X-Forwarded-*` are forwarded as the client (in practice the gateway in front) sent them:
/// pdgate neither adds nor rewrites them, so the engines' logs see what the gateway saw.
const HOP_BY_HOP: &[&str] = &[
    "expect",
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "host",
    "content-length",
];

/// Response headers captured from phase responses and sent on later phase requests, by
/// default (`forward_response_headers`, design.md §5.3).
pub const DEFAULT_FORWARD_RESPONSE_HEADERS: &[&str] = &[headers::DISAGG_REVISION];

fn is_hop_by_hop(name: &HeaderName) -> bool {
    HOP_BY_HOP.contains(&name.as_str())
}

/// A `forward_response_headers` list that cannot be used (checked at start). The message names
/// the entry; the caller names where the list came from (the flag or the coordinator file's key).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ForwardRulesError {
    /// Not a valid HTTP header name.
    #[error("`{0}` is not a valid header name")]
    Invalid(String),
    /// Listed twice (names compare case-insensitively).
    #[error("`{0}` is listed twice")]
    Duplicate(String),
    /// A hop-by-hop or router-owned header cannot be forwarded.
    #[error("`{0}` is hop-by-hop or router-owned and cannot be forwarded")]
    Reserved(String),
}

/// The coordinator's header rules for one deployment: which response headers are captured
/// from every phase response (2xx and the 412 of a conditional-decode miss) and sent on all
/// later phase requests (design.md §5.3, llm-d coordinator `forward_response_headers`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForwardRules {
    names: Vec<HeaderName>,
}

impl Default for ForwardRules {
    /// `[x-llm-d-disagg-revision]`.
    fn default() -> Self {
        ForwardRules {
            names: DEFAULT_FORWARD_RESPONSE_HEADERS
                .iter()
                .map(|n| HeaderName::from_static(n))
                .collect(),
        }
    }
}

impl ForwardRules {
    /// Rules forwarding exactly `names` (a configured list replaces the default; an empty
    /// list forwards nothing).
    ///
    /// Errors: an invalid, duplicate, hop-by-hop or router-owned name.
    pub fn new<S: AsRef<str>>(names: &[S]) -> Result<Self, ForwardRulesError> {
        let mut out: Vec<HeaderName> = Vec::with_capacity(names.len());
        for n in names {
            let raw = n.as_ref().trim();
            let name = HeaderName::from_bytes(raw.as_bytes())
                .map_err(|_| ForwardRulesError::Invalid(raw.to_string()))?;
            if is_hop_by_hop(&name)
                || headers::is_internal(name.as_str())
                || name.as_str() == headers::REQUEST_ID
            {
                return Err(ForwardRulesError::Reserved(raw.to_string()));
            }
            if out.contains(&name) {
                return Err(ForwardRulesError::Duplicate(raw.to_string()));
            }
            out.push(name);
        }
        Ok(ForwardRules { names: out })
    }

    /// The forwarded names, lowercase, in configured order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.names.iter().map(HeaderName::as_str)
    }

    /// True when `name` (lowercase) is forwarded.
    pub fn forwards(&self, name: &str) -> bool {
        self.names.iter().any(|n| n == name)
    }

    /// Headers to send upstream on every leg: the client's headers minus hop-by-hop,
    /// router-owned (internal) headers, client copies of forwarded names (the coordinator
    /// alone sets those, from phase responses), and the router-consumed `Prefer` and profile
    /// headers (the coordinator sets them per leg: `Prefer` on its conditional-decode probe,
    /// `x-llm-d-epp-profile` towards per-role routers) and `Accept-Encoding` (the router reads
    /// what it relays, so it asks for identity); plus `x-request-id`.
    pub fn upstream_request_headers(
        &self,
        client: &HeaderMap,
        request_id: &HeaderValue,
    ) -> HeaderMap {
        let mut out = HeaderMap::with_capacity(client.len() + 1);
        // Headers the client names in `Connection` are hop-by-hop too (RFC 9110 §7.6.1).
        let nominated: Vec<&str> = client
            .get_all(http::header::CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .collect();
        for (name, value) in client {
            let n = name.as_str();
            if is_hop_by_hop(name)
                || nominated.iter().any(|t| t.eq_ignore_ascii_case(n))
                || headers::is_internal(n)
                || self.forwards(n)
                || n == headers::REQUEST_ID
                || n == headers::PREFER
                || n == headers::EPP_PROFILE
                || n == headers::EPP_PROFILE_LEGACY
                // The router reads the answers it relays (SSE lines, error lines, router-owned
                // fields), so engines answer it uncompressed.
                || name == http::header::ACCEPT_ENCODING
            {
                continue;
            }
            out.append(name.clone(), value.clone());
        }
        out.insert(headers::REQUEST_ID, request_id.clone());
        out
    }

    /// The forwarded headers of one phase's responses. With several responses (a fan-out of
    /// parallel legs), per name the most frequent value wins and ties go to the earliest
    /// response (`responses` in arrival order); a response without the name does not vote.
    pub fn capture(&self, responses: &[&HeaderMap]) -> HeaderMap {
        let mut out = HeaderMap::new();
        for name in &self.names {
            // (value, votes, first position)
            let mut tally: Vec<(&HeaderValue, usize, usize)> = Vec::new();
            for (pos, r) in responses.iter().enumerate() {
                if let Some(v) = r.get(name) {
                    match tally.iter_mut().find(|(t, _, _)| *t == v) {
                        Some(entry) => entry.1 += 1,
                        None => tally.push((v, 1, pos)),
                    }
                }
            }
            let best = tally
                .iter()
                .max_by(|a, b| a.1.cmp(&b.1).then(b.2.cmp(&a.2)));
            if let Some((v, _, _)) = best {
                out.insert(name.clone(), (*v).clone());
            }
        }
        out
    }

    /// Adds headers captured so far to a leg's headers, replacing any value there.
    pub fn apply(captured: &HeaderMap, leg: &mut HeaderMap) {
        for (name, value) in captured {
            leg.insert(name.clone(), value.clone());
        }
    }
}

/// Headers of the final phase response the client may see: hop-by-hop and router-owned
/// headers removed. `content-length` is kept out too; the server frames the body itself.
pub fn client_response_headers(upstream: &HeaderMap) -> HeaderMap {
    let mut out = HeaderMap::with_capacity(upstream.len() + 6);
    for (name, value) in upstream {
        if is_hop_by_hop(name) || headers::is_internal(name.as_str()) {
            continue;
        }
        out.append(name.clone(), value.clone());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut m = HeaderMap::new();
        for (k, v) in pairs {
            m.append(*k, HeaderValue::from_static(v));
        }
        m
    }

    #[test]
    fn internal_and_hop_by_hop_headers_never_pass() {
        let client = map(&[
            ("authorization", "Bearer t"),
            ("connection", "keep-alive"),
            ("host", "router"),
            ("x-llm-d-revision-decision-id", "forged"),
            ("x-gateway-destination-endpoint", "10.0.0.9:8000"),
            ("x-llm-d-disagg-revision", "forged"),
            ("x-request-id", "client-id"),
            ("x-custom", "1"),
            ("expect", "100-continue"),
            ("x-forwarded-for", "10.1.1.1"),
            ("x-foo", "hop"),
        ]);
        let mut client = client;
        client.append("connection", HeaderValue::from_static("close, X-Foo"));
        let up = ForwardRules::default()
            .upstream_request_headers(&client, &HeaderValue::from_static("rid"));
        let mut names: Vec<_> = up.keys().map(|k| k.as_str().to_string()).collect();
        names.sort();
        assert_eq!(
            names,
            [
                "authorization",
                "x-custom",
                "x-forwarded-for",
                "x-request-id"
            ]
        );
        assert_eq!(up["x-forwarded-for"], "10.1.1.1");
        assert_eq!(up["x-request-id"], "rid");

        let resp = client_response_headers(&map(&[
            ("content-type", "text/event-stream"),
            ("transfer-encoding", "chunked"),
            ("x-prefiller-host-port", "10.0.0.1:8000"),
            ("x-sim-worker", "d0"),
        ]));
        let mut names: Vec<_> = resp.keys().map(|k| k.as_str().to_string()).collect();
        names.sort();
        assert_eq!(names, ["content-type", "x-sim-worker"]);
    }

    fn names(h: &HeaderMap) -> Vec<String> {
        let mut n: Vec<_> = h.keys().map(|k| k.as_str().to_string()).collect();
        n.sort();
        n
    }

    #[test]
    fn default_replaced_and_empty_lists() {
        let client = map(&[
            ("x-llm-d-disagg-revision", "forged"),
            ("x-tenant", "t1"),
            ("x-custom", "1"),
            ("accept-encoding", "gzip, br"),
        ]);
        let rid = HeaderValue::from_static("rid");
        let phase = map(&[("x-llm-d-disagg-revision", "b"), ("x-tenant", "t9")]);

        let default = ForwardRules::default();
        assert_eq!(
            default.names().collect::<Vec<_>>(),
            ["x-llm-d-disagg-revision"]
        );
        let up = default.upstream_request_headers(&client, &rid);
        assert_eq!(names(&up), ["x-custom", "x-request-id", "x-tenant"]);
        assert_eq!(
            names(&default.capture(&[&phase])),
            ["x-llm-d-disagg-revision"]
        );

        // A configured list replaces the default: the revision is no longer captured, and the
        // client's own `x-tenant` is dropped while its revision header passes as any other.
        let replaced = ForwardRules::new(&["X-Tenant"]).unwrap();
        let up = replaced.upstream_request_headers(&client, &rid);
        assert_eq!(
            names(&up),
            ["x-custom", "x-llm-d-disagg-revision", "x-request-id"]
        );
        let got = replaced.capture(&[&phase]);
        assert_eq!(names(&got), ["x-tenant"]);
        assert_eq!(got["x-tenant"], "t9");

        // `[]` disables capture and forwarding.
        let empty = ForwardRules::new::<&str>(&[]).unwrap();
        assert!(empty.capture(&[&phase]).is_empty());
        let up = empty.upstream_request_headers(&client, &rid);
        assert_eq!(
            names(&up),
            [
                "x-custom",
                "x-llm-d-disagg-revision",
                "x-request-id",
                "x-tenant"
            ]
        );
    }

    #[test]
    fn invalid_duplicate_and_reserved_names_are_rejected_at_start() {
        assert_eq!(
            ForwardRules::new(&["bad name"]),
            Err(ForwardRulesError::Invalid("bad name".into()))
        );
        assert_eq!(
            ForwardRules::new(&["x-a", "X-A"]),
            Err(ForwardRulesError::Duplicate("X-A".into()))
        );
        for reserved in ["connection", "x-llm-d-revision-decision-id", "x-request-id"] {
            assert_eq!(
                ForwardRules::new(&[reserved]),
                Err(ForwardRulesError::Reserved(reserved.into()))
            );
        }
        assert_eq!(
            ForwardRules::new(&["x a"]).unwrap_err().to_string(),
            "`x a` is not a valid header name"
        );
    }

    #[test]
    fn fan_out_most_frequent_value_wins_ties_to_the_earliest() {
        let rules = ForwardRules::default();
        let (a, b) = (
            map(&[("x-llm-d-disagg-revision", "a")]),
            map(&[("x-llm-d-disagg-revision", "b")]),
        );
        let none = map(&[]);
        let pick = |rs: &[&HeaderMap]| {
            rules
                .capture(rs)
                .get("x-llm-d-disagg-revision")
                .map(|v| v.to_str().unwrap().to_string())
        };
        assert_eq!(pick(&[&a, &b, &b]).as_deref(), Some("b"));
        assert_eq!(pick(&[&b, &a]).as_deref(), Some("b"), "tie → earliest");
        assert_eq!(pick(&[&a, &b]).as_deref(), Some("a"), "tie → earliest");
        assert_eq!(pick(&[&none, &b, &a, &none]).as_deref(), Some("b"));
        assert_eq!(pick(&[&none]), None);
        assert_eq!(pick(&[]), None);
    }

    #[test]
    fn captured_values_replace_what_a_leg_carries() {
        let mut leg = map(&[("x-llm-d-disagg-revision", "a"), ("x-other", "1")]);
        ForwardRules::apply(&map(&[("x-llm-d-disagg-revision", "b")]), &mut leg);
        assert_eq!(leg["x-llm-d-disagg-revision"], "b");
        assert_eq!(leg.get_all("x-llm-d-disagg-revision").iter().count(), 1);
        assert_eq!(leg["x-other"], "1");
    }
}
