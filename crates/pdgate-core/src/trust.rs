//! The trust boundary for coordinator-to-router headers (issue 10 item 2).
//!
//! A per-role router takes orders from its coordinator through headers: the scheduling
//! profile (`x-llm-d-epp-profile`, legacy `epp-profile`), the forwarded revision header(s)
//! (`x-llm-d-disagg-revision` by default), the revision decision id, and
//! `Prefer: if-available` (the conditional-decode probe). From anyone else they would let a
//! client pick a phase itself — e.g. reach a prefill engine with `do_remote_decode` and
//! leave KV leases nobody pulls. So they are honoured only from a **trusted caller**, which
//! is either
//!
//! - a caller whose source address is in `--trusted-coordinator-networks` (CIDRs; for
//!   llm-d's own coordinator, or a coordinator sidecar on loopback), or
//! - a caller that presents the shared secret of `--coordinator-token-file` in
//!   `x-pdgate-coordinator-token` (a pdgate coordinator given the same file sends it on
//!   every leg to its routers; compared in constant time).
//!
//! The default trusts nobody. An untrusted caller's copies are dropped before anything reads
//! them (the request is then an ordinary client request), counted in
//! `pdgate_untrusted_headers_dropped_total{header}` and logged (rate-limited). The token
//! header itself is router-owned ([`pdgate_api::headers::INTERNAL`]): never sent to an
//! engine, never returned to a client.

use http::HeaderMap;
use ipnet::IpNet;
use pdgate_api::headers;
use std::net::IpAddr;
use std::path::Path;
use std::sync::Arc;

/// The scheduling-profile headers (a coordinator's choice of phase).
pub const PROFILE_HEADERS: &[&str] = &[headers::EPP_PROFILE, headers::EPP_PROFILE_LEGACY];

/// Shortest accepted token, bytes.
pub const MIN_TOKEN_BYTES: usize = 16;

/// Who is trusted to send coordinator headers.
#[derive(Debug, Clone, Default)]
pub struct TrustedCallers {
    networks: Vec<IpNet>,
    token: Option<Arc<str>>,
}

impl TrustedCallers {
    /// Trusts callers from `networks` and callers presenting `token`.
    ///
    /// Errors: a token shorter than [`MIN_TOKEN_BYTES`] or not visible ASCII.
    pub fn new(networks: Vec<IpNet>, token: Option<&str>) -> Result<Self, String> {
        if let Some(t) = token {
            if t.len() < MIN_TOKEN_BYTES || !t.bytes().all(|b| b.is_ascii_graphic()) {
                return Err(format!(
                    "coordinator token must be at least {MIN_TOKEN_BYTES} visible ASCII characters"
                ));
            }
        }
        Ok(TrustedCallers {
            networks,
            token: token.map(Arc::from),
        })
    }

    /// Reads the token from `path` (surrounding whitespace trimmed).
    ///
    /// Errors: the file cannot be read, or the token is invalid (as [`Self::new`]).
    pub fn token_from_file(networks: Vec<IpNet>, path: &Path) -> Result<Self, String> {
        let text = pdgate_fleet::file_read::read_regular_file(path, 4096)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        Self::new(networks, Some(text.trim())).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// The token a coordinator sends on its legs to routers, when configured.
    pub fn token(&self) -> Option<&str> {
        self.token.as_deref()
    }

    /// True when the caller at `peer` (its source address; `None` when unknown) with
    /// `headers` may send coordinator headers.
    pub fn trusts(&self, peer: Option<IpAddr>, headers: &HeaderMap) -> bool {
        let by_network = peer.is_some_and(|ip| {
            let ip = canonical(ip);
            self.networks.iter().any(|n| n.contains(&ip))
        });
        by_network
            || self.token.as_deref().is_some_and(|t| {
                headers
                    .get(headers::COORDINATOR_TOKEN)
                    .is_some_and(|v| constant_time_eq(v.as_bytes(), t.as_bytes()))
            })
    }
}

/// An IPv4-mapped IPv6 address as its IPv4 address (a dual-stack listener reports them so).
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// Equality whose time depends only on the lengths.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Parses `--trusted-coordinator-networks` items: CIDRs, or single addresses (a /32 or
/// /128).
///
/// Errors: the item that is neither, named.
pub fn parse_networks(items: &[String]) -> Result<Vec<IpNet>, String> {
    items
        .iter()
        .map(|s| s.trim())
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.parse::<IpNet>()
                .or_else(|_| s.parse::<IpAddr>().map(IpNet::from))
                .map_err(|_| {
                    format!("--trusted-coordinator-networks: `{s}` is not a CIDR or an address")
                })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn with_token(t: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(
            headers::COORDINATOR_TOKEN,
            HeaderValue::from_str(t).unwrap(),
        );
        h
    }

    #[test]
    fn nobody_is_trusted_by_default() {
        let t = TrustedCallers::default();
        assert!(!t.trusts(Some("127.0.0.1".parse().unwrap()), &HeaderMap::new()));
        assert!(!t.trusts(None, &with_token("anything-at-all-123")));
    }

    #[test]
    fn networks_and_the_token_each_grant_trust() {
        let nets = parse_networks(&["10.0.0.0/8".into(), " 127.0.0.1 ".into()]).unwrap();
        let t = TrustedCallers::new(nets, Some("s3cret-s3cret-s3cret")).unwrap();
        let none = HeaderMap::new();
        assert!(t.trusts(Some("10.1.2.3".parse().unwrap()), &none));
        assert!(t.trusts(Some("::ffff:10.1.2.3".parse().unwrap()), &none));
        assert!(t.trusts(Some("127.0.0.1".parse().unwrap()), &none));
        assert!(!t.trusts(Some("127.0.0.2".parse().unwrap()), &none));
        assert!(!t.trusts(Some("192.168.0.1".parse().unwrap()), &none));
        assert!(t.trusts(None, &with_token("s3cret-s3cret-s3cret")));
        assert!(!t.trusts(None, &with_token("s3cret-s3cret-s3creT")));
        assert!(!t.trusts(None, &with_token("s3cret")));
        assert_eq!(
            parse_networks(&["10.0.0.0/33".into()]).unwrap_err(),
            "--trusted-coordinator-networks: `10.0.0.0/33` is not a CIDR or an address"
        );
        assert!(TrustedCallers::new(vec![], Some("short")).is_err());
        assert!(TrustedCallers::new(vec![], Some("has a space in it!!")).is_err());
    }
}
