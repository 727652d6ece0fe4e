//! Header rules, in one place (design.md §5.3): what a client may send on, what reaches the
//! upstream on each leg, and what the client sees back.

use http::header::{HeaderName, HeaderValue};
use http::HeaderMap;
use pdgate_api::headers;

/// Hop-by-hop headers (RFC 9110 §7.6.1) plus those the proxy recomputes; never forwarded.
const HOP_BY_HOP: &[&str] = &[
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

/// Headers to send upstream on every leg: the client's headers minus hop-by-hop, router-owned
/// (internal) headers, client copies of forwarded response headers, and `Prefer` (a router
/// consumes it; the coordinator sets it on its conditional-decode probe only); plus
/// `x-request-id`.
pub fn upstream_request_headers(client: &HeaderMap, request_id: &HeaderValue) -> HeaderMap {
    let mut out = HeaderMap::with_capacity(client.len() + 1);
    for (name, value) in client {
        let n = name.as_str();
        if is_hop_by_hop(name)
            || headers::is_internal(n)
            || DEFAULT_FORWARD_RESPONSE_HEADERS.contains(&n)
            || n == headers::REQUEST_ID
            || n == headers::PREFER
        {
            continue;
        }
        out.append(name.clone(), value.clone());
    }
    out.insert(headers::REQUEST_ID, request_id.clone());
    out
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
        ]);
        let up = upstream_request_headers(&client, &HeaderValue::from_static("rid"));
        let mut names: Vec<_> = up.keys().map(|k| k.as_str().to_string()).collect();
        names.sort();
        assert_eq!(names, ["authorization", "x-custom", "x-request-id"]);
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
}
