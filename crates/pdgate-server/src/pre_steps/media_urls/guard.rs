//! What a download may reach: the URL forms taken (http and https only), the host allow-list
//! and the addresses refused (the SSRF guard), plus the check of inline `data:` URLs. All pure:
//! no I/O here. The rules are those of llm-d's `addressGuard` and `parseDataURI`
//! (`pkg/coordinator/steps/replace_media_urls.go`), with multicast, broadcast, the reserved
//! 240/4, NAT64 and IPv4-compatible IPv6 refused as well.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Media types an inline `data:` URL may carry (llm-d's `allowedImageContentTypes`).
pub const DATA_URL_MEDIA_TYPES: [&str; 4] = ["image/jpeg", "image/png", "image/gif", "image/webp"];

/// Why an address is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockReason {
    /// `0.0.0.0/8` or `::`.
    Unspecified,
    /// `127.0.0.0/8` or `::1`.
    Loopback,
    /// `169.254.0.0/16` (cloud metadata at 169.254.169.254 included) or `fe80::/10`.
    LinkLocal,
    /// `100.64.0.0/10`, carrier-grade NAT (RFC 6598).
    SharedAddressSpace,
    /// `fc00::/7`, IPv6 unique-local; refused even with private networks allowed.
    UniqueLocal,
    /// `224.0.0.0/4` or `ff00::/8`.
    Multicast,
    /// `240.0.0.0/4` (broadcast 255.255.255.255 included) or IPv4-compatible `::/96`.
    Reserved,
    /// RFC 1918 (`10/8`, `172.16/12`, `192.168/16`) without `allow_private_networks`.
    Private,
}

impl BlockReason {
    /// A short name for logs and error messages.
    pub fn as_str(self) -> &'static str {
        match self {
            BlockReason::Unspecified => "unspecified",
            BlockReason::Loopback => "loopback",
            BlockReason::LinkLocal => "link-local",
            BlockReason::SharedAddressSpace => "shared address space 100.64/10",
            BlockReason::UniqueLocal => "IPv6 unique-local",
            BlockReason::Multicast => "multicast",
            BlockReason::Reserved => "reserved or broadcast",
            BlockReason::Private => "private network",
        }
    }
}

impl fmt::Display for BlockReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which of the optional ranges pass.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AddressPolicy {
    /// RFC 1918 IPv4 ranges pass.
    pub allow_private_networks: bool,
    /// Loopback passes: set only by tests (see `MediaUrlSettings::allow_loopback_for_tests`).
    pub allow_loopback: bool,
}

/// `Some(reason)` when a download may not connect to `ip`. An IPv4-mapped (`::ffff:a.b.c.d`)
/// NAT64 (`64:ff9b::a.b.c.d`) or 6to4 (`2002:a.b.c.d::`) IPv6 address is judged by the IPv4
/// address it carries.
pub fn blocked(ip: IpAddr, policy: AddressPolicy) -> Option<BlockReason> {
    match ip {
        IpAddr::V4(v4) => blocked_v4(v4, policy),
        IpAddr::V6(v6) => blocked_v6(v6, policy),
    }
}

fn blocked_v4(ip: Ipv4Addr, policy: AddressPolicy) -> Option<BlockReason> {
    let [a, b, ..] = ip.octets();
    match a {
        0 => Some(BlockReason::Unspecified),
        127 if policy.allow_loopback => None,
        127 => Some(BlockReason::Loopback),
        169 if b == 254 => Some(BlockReason::LinkLocal),
        100 if b & 0xc0 == 64 => Some(BlockReason::SharedAddressSpace),
        224..=239 => Some(BlockReason::Multicast),
        240..=255 => Some(BlockReason::Reserved),
        _ if ip.is_private() && !policy.allow_private_networks => Some(BlockReason::Private),
        _ => None,
    }
}

fn blocked_v6(ip: Ipv6Addr, policy: AddressPolicy) -> Option<BlockReason> {
    if let Some(v4) = ip.to_ipv4_mapped() {
        return blocked_v4(v4, policy);
    }
    let s = ip.segments();
    if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        let [x, y] = [s[6].to_be_bytes(), s[7].to_be_bytes()];
        return blocked_v4(Ipv4Addr::new(x[0], x[1], y[0], y[1]), policy);
    }
    // 6to4 (2002:a.b.c.d::/48) carries an IPv4 address too (RFC 3056).
    if s[0] == 0x2002 {
        let [x, y] = [s[1].to_be_bytes(), s[2].to_be_bytes()];
        return blocked_v4(Ipv4Addr::new(x[0], x[1], y[0], y[1]), policy);
    }
    if ip.is_unspecified() {
        Some(BlockReason::Unspecified)
    } else if ip.is_loopback() {
        (!policy.allow_loopback).then_some(BlockReason::Loopback)
    } else if s[..6] == [0; 6] {
        Some(BlockReason::Reserved)
    } else if s[0] & 0xffc0 == 0xfe80 {
        Some(BlockReason::LinkLocal)
    } else if s[0] & 0xfe00 == 0xfc00 {
        Some(BlockReason::UniqueLocal)
    } else if s[0] & 0xff00 == 0xff00 {
        Some(BlockReason::Multicast)
    } else {
        None
    }
}

/// Whether `host` (no brackets, no port) may be fetched: always when `allowed` is empty,
/// else when it equals one entry, ASCII case ignored (llm-d lowercases both sides).
pub fn host_allowed(host: &str, allowed: &[String]) -> bool {
    allowed.is_empty() || allowed.iter().any(|d| d.eq_ignore_ascii_case(host))
}

/// A URL a download may fetch, taken apart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// `https` rather than `http`.
    pub https: bool,
    /// The host without brackets: a name, an IPv4 or an IPv6 address.
    pub host: String,
    /// The port, explicit or the scheme's default.
    pub port: u16,
    /// The `Host` header: the host as written (IPv6 in brackets) and any explicit port.
    pub host_header: String,
    /// Path and query of the request line (`/` when the URL has none).
    pub path_and_query: String,
}

/// Why a URL is not a [`Target`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TargetError {
    /// The scheme, lowercased, is neither `http` nor `https`.
    Scheme(String),
    /// Not an absolute http(s) URL with a host.
    Invalid(String),
}

impl Target {
    /// Parses an absolute `http://` or `https://` URL (scheme case ignored; userinfo dropped;
    /// a fragment is never sent).
    pub fn parse(url: &str) -> Result<Target, TargetError> {
        let scheme = scheme_of(url)
            .ok_or_else(|| TargetError::Invalid("not an absolute URL".into()))?
            .to_ascii_lowercase();
        let https = match scheme.as_str() {
            "http" => false,
            "https" => true,
            _ => return Err(TargetError::Scheme(scheme)),
        };
        let uri: http::Uri = url
            .parse()
            .map_err(|e: http::uri::InvalidUri| TargetError::Invalid(e.to_string()))?;
        let authority = uri
            .authority()
            .ok_or_else(|| TargetError::Invalid("no host".into()))?;
        let written = authority.host();
        let host = written.trim_start_matches('[').trim_end_matches(']');
        if host.is_empty() {
            return Err(TargetError::Invalid("no host".into()));
        }
        let explicit = authority.port_u16();
        let host_header = match explicit {
            Some(p) => format!("{written}:{p}"),
            None => written.to_string(),
        };
        let path_and_query = match uri.path_and_query().map(|p| p.as_str()) {
            Some(p) if p.starts_with('/') => p.to_string(),
            Some(p) => format!("/{p}"),
            None => "/".to_string(),
        };
        Ok(Target {
            https,
            host: host.to_ascii_lowercase(),
            port: explicit.unwrap_or(if https { 443 } else { 80 }),
            host_header,
            path_and_query,
        })
    }

    /// `scheme://host[:port]/path`, without the query: safe to log.
    pub fn describe(&self) -> String {
        let path = self.path_and_query.split('?').next().unwrap_or("/");
        format!("{}://{}{}", self.scheme(), self.host_header, path)
    }

    fn scheme(&self) -> &'static str {
        if self.https {
            "https"
        } else {
            "http"
        }
    }

    /// The absolute URL a redirect's `Location` names, resolved against this target
    /// (absolute, scheme-relative `//host/…`, absolute-path, query-only and relative forms).
    pub fn join(&self, location: &str) -> String {
        let location = location.trim();
        let origin = format!("{}://{}", self.scheme(), self.host_header);
        let path = self.path_and_query.split('?').next().unwrap_or("/");
        if scheme_of(location).is_some() {
            location.to_string()
        } else if let Some(rest) = location.strip_prefix("//") {
            format!("{}://{rest}", self.scheme())
        } else if location.starts_with('/') {
            format!("{origin}{location}")
        } else if location.starts_with('?') {
            format!("{origin}{path}{location}")
        } else {
            let dir = path.rfind('/').map_or("/", |i| &path[..=i]);
            format!("{origin}{dir}{location}")
        }
    }
}

/// The scheme of an absolute URL: letters, digits, `+`, `-`, `.` before the first `:`,
/// starting with a letter.
fn scheme_of(url: &str) -> Option<&str> {
    let (scheme, _) = url.split_once(':')?;
    let mut chars = scheme.chars();
    let first_ok = chars.next().is_some_and(|c| c.is_ascii_alphabetic());
    let rest_ok = chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    (first_ok && rest_ok).then_some(scheme)
}

/// Checks an inline `data:` URL as llm-d's `parseDataURI` and `allowedImageContentType` do:
/// a comma, a `;base64` parameter and a media type among [`DATA_URL_MEDIA_TYPES`] (case and
/// surrounding spaces ignored), and a payload that is non-empty standard base64 (RFC 4648
/// alphabet, `=` padding only at the end, a length the padding makes a multiple of 4). The
/// scheme is matched without case. The error is the reason, for the client.
pub fn check_data_url(url: &str) -> Result<(), String> {
    let rest = url.get(5..).filter(|_| is_data_url(url)).unwrap_or(url);
    let (meta, payload) = rest
        .split_once(',')
        .ok_or_else(|| "missing comma in data URI".to_string())?;
    let (media_type, params) = meta.split_once(';').unwrap_or((meta, ""));
    if !params
        .split(';')
        .any(|p| p.trim().eq_ignore_ascii_case("base64"))
    {
        return Err("data URI must be base64-encoded".into());
    }
    if media_type.is_empty() {
        return Err("data URI missing media type".into());
    }
    let normal = media_type.trim().to_ascii_lowercase();
    if !DATA_URL_MEDIA_TYPES.contains(&normal.as_str()) {
        return Err(format!("data URI content type {normal:?} not allowed"));
    }
    let body = payload.trim_end_matches('=');
    let padding = payload.len() - body.len();
    let alphabet = |b: u8| b.is_ascii_alphanumeric() || b == b'+' || b == b'/';
    if body.is_empty() || padding > 2 || !body.bytes().all(alphabet) || payload.len() % 4 != 0 {
        return Err("data URI payload is not valid base64".into());
    }
    Ok(())
}

/// True when `url` is a `data:` URL (scheme without case, as URL schemes are).
pub fn is_data_url(url: &str) -> bool {
    url.get(..5)
        .is_some_and(|p| p.eq_ignore_ascii_case("data:"))
}
