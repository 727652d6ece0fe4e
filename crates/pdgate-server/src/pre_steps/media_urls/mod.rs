//! llm-d's coordinator step `replace-media-urls` (llm-d-router,
//! `pkg/coordinator/steps/replace_media_urls.go`): every `http(s)` image URL of a chat request
//! is downloaded and inlined as a `data:<content-type>;base64,<payload>` URI before the request
//! is routed, so engines never fetch from the network themselves.
//!
//! | setting | flag | llm-d parameter | default |
//! |---|---|---|---|
//! | step on | `--replace-media-urls` | (step listed) | off |
//! | per-download timeout | `--media-download-timeout-ms` | `download_timeout` | 10 s |
//! | downloads at once, per request | `--media-max-concurrent-downloads` | `max_concurrent_downloads` | 10 |
//! | image parts per request (0 = any) | `--media-max-entries` | `max_multimodal_entries` | 0 |
//! | bytes per download | `--media-max-download-mib` | `max_download_size` (MB = MiB) | 10 MiB |
//! | RFC 1918 addresses reachable | `--media-allow-private-networks` | `allow_private_networks` | no |
//! | hosts that may be fetched | `--media-allowed-domains` | `allowed_domains` | any |
//!
//! Order of checks, all before any download: too many image parts; each `data:` URL's form and
//! media type ([`guard::check_data_url`]); each other URL's scheme (http/https) and host
//! allow-list. Then the downloads run, at most `max_concurrent_downloads` at once; the first
//! failure ends the request (the others are dropped). See [`fetch`] for the SSRF guard's use
//! and [`scan`] for how the body is read and rewritten byte for byte.

pub mod fetch;
pub mod guard;
pub mod scan;

#[cfg(test)]
mod guard_tests;
#[cfg(test)]
mod tests;

use bytes::Bytes;
use futures_util::{StreamExt, TryStreamExt};
use guard::{BlockReason, Target, TargetError};
use std::fmt;
use std::time::Duration;

/// Default [`MediaUrlSettings::download_timeout`], ms (llm-d: `download_timeout` 10s).
pub const DEFAULT_DOWNLOAD_TIMEOUT_MS: u64 = 10_000;
/// Default [`MediaUrlSettings::max_concurrent_downloads`] (llm-d: 10).
pub const DEFAULT_MAX_CONCURRENT_DOWNLOADS: usize = 10;
/// Default [`MediaUrlSettings::max_entries`]: 0, no limit (llm-d: `max_multimodal_entries` 0).
pub const DEFAULT_MAX_ENTRIES: usize = 0;
/// Default download cap, MiB (llm-d: `max_download_size` 10, in MB of 1,048,576 bytes).
pub const DEFAULT_MAX_DOWNLOAD_MIB: u64 = 10;
/// Bytes in one MiB (llm-d's `config.BytesPerMB`).
pub const BYTES_PER_MIB: u64 = 1 << 20;
/// The largest `--media-max-download-mib`: 1 TiB.
pub const MAX_DOWNLOAD_MIB: u64 = 1 << 20;

/// How the step downloads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MediaUrlSettings {
    /// Time for one download, connect, redirects and body included.
    pub download_timeout: Duration,
    /// Downloads of one request running at once (0 is taken as 1).
    pub max_concurrent_downloads: usize,
    /// Image parts a request may hold; more → 400 before any download. 0 = no limit.
    pub max_entries: usize,
    /// Bytes one download may bring; more (by `Content-Length` or by body) → 400.
    pub max_download_bytes: u64,
    /// RFC 1918 IPv4 addresses may be fetched (every other blocked range stays blocked).
    pub allow_private_networks: bool,
    /// Host names that may be fetched, compared whole and case-blind; empty = any host.
    /// Checked on every redirect too.
    pub allowed_domains: Vec<String>,
    /// Lets downloads reach loopback addresses, which are otherwise always refused. For tests
    /// whose servers listen on 127.0.0.1 only: no flag or configuration sets it, and
    /// [`MediaUrlArgs::settings`] always leaves it false.
    pub allow_loopback_for_tests: bool,
}

impl Default for MediaUrlSettings {
    fn default() -> Self {
        MediaUrlSettings {
            download_timeout: Duration::from_millis(DEFAULT_DOWNLOAD_TIMEOUT_MS),
            max_concurrent_downloads: DEFAULT_MAX_CONCURRENT_DOWNLOADS,
            max_entries: DEFAULT_MAX_ENTRIES,
            max_download_bytes: DEFAULT_MAX_DOWNLOAD_MIB * BYTES_PER_MIB,
            allow_private_networks: false,
            allowed_domains: Vec::new(),
            allow_loopback_for_tests: false,
        }
    }
}

/// The flags of the step (flattened into `pdgate serve`).
#[derive(Debug, Clone, PartialEq, clap::Args)]
pub struct MediaUrlArgs {
    /// Download every http(s) image URL of a chat request and inline it as a data: URI before
    /// routing (llm-d's coordinator step replace-media-urls).
    #[arg(long)]
    pub replace_media_urls: bool,
    /// Time for one image download, redirects and body included, ms; later → 504.
    #[arg(long, default_value_t = DEFAULT_DOWNLOAD_TIMEOUT_MS,
          value_parser = clap::value_parser!(u64).range(1..=crate::dispatch::timeouts::MAX_TIMEOUT_SECS * 1000))]
    pub media_download_timeout_ms: u64,
    /// Image downloads of one request running at once.
    #[arg(long, default_value_t = DEFAULT_MAX_CONCURRENT_DOWNLOADS,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=4096))]
    pub media_max_concurrent_downloads: usize,
    /// Image parts a request may hold; more → 400. 0 = no limit.
    #[arg(long, default_value_t = DEFAULT_MAX_ENTRIES)]
    pub media_max_entries: usize,
    /// Bytes one image download may bring, MiB; more → 400.
    #[arg(long, default_value_t = DEFAULT_MAX_DOWNLOAD_MIB,
          value_parser = clap::value_parser!(u64).range(1..=MAX_DOWNLOAD_MIB))]
    pub media_max_download_mib: u64,
    /// Let image downloads reach RFC 1918 addresses (10/8, 172.16/12, 192.168/16). Loopback,
    /// link-local, 100.64/10, IPv6 unique-local and multicast stay blocked.
    #[arg(long)]
    pub media_allow_private_networks: bool,
    /// Host names image downloads may reach, comma-separated, compared whole and case-blind
    /// (redirects included) [default: any host].
    #[arg(long, value_delimiter = ',', value_parser = allowed_domain)]
    pub media_allowed_domains: Vec<String>,
}

/// One `allowed_domains` entry (`--media-allowed-domains`, or the coordinator file's
/// `replace-media-urls` step) as it is compared with a URL's host: trimmed, lowercased.
///
/// Errors: an empty entry (dropping it could leave an empty list, which means any host), or
/// one that is not a bare host name or IP address (a scheme, port, path, wildcard or space
/// could never equal a URL's host).
pub fn allowed_domain(entry: &str) -> Result<String, String> {
    let d = entry.trim().to_ascii_lowercase();
    if d.is_empty() {
        return Err("an empty entry (leave the list out to allow any host)".into());
    }
    let name = d
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_'));
    if !name && d.parse::<std::net::IpAddr>().is_err() {
        return Err(format!(
            "`{entry}` is not a host name or IP address (no scheme, port, path or wildcard)"
        ));
    }
    Ok(d)
}

impl MediaUrlArgs {
    /// The step's settings; `None` when `--replace-media-urls` is off. Domains come checked
    /// and normalised by [`allowed_domain`].
    pub fn settings(&self) -> Option<MediaUrlSettings> {
        self.replace_media_urls.then(|| MediaUrlSettings {
            download_timeout: Duration::from_millis(self.media_download_timeout_ms),
            max_concurrent_downloads: self.media_max_concurrent_downloads.max(1),
            max_entries: self.media_max_entries,
            max_download_bytes: self.media_max_download_mib.saturating_mul(BYTES_PER_MIB),
            allow_private_networks: self.media_allow_private_networks,
            allowed_domains: self.media_allowed_domains.clone(),
            allow_loopback_for_tests: false,
        })
    }
}

/// Where an image part stands: `messages[message].content[part]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartLocation {
    /// Index in `messages`.
    pub message: usize,
    /// Index in that message's `content`.
    pub part: usize,
}

impl fmt::Display for PartLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "messages[{}].content[{}].image_url.url",
            self.message, self.part
        )
    }
}

/// Why the step failed the request. Messages name the field and the host, never the query.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MediaError {
    /// More image parts than `max_entries` (llm-d's message).
    #[error("too many multimodal entries: got {got}, max {max}")]
    TooManyEntries {
        /// Image parts in the request.
        got: usize,
        /// The limit.
        max: usize,
    },
    /// A `data:` URL without `;base64`, a media type, or with one not an image type taken.
    #[error("{at}: invalid data URL: {reason}")]
    DataUrl {
        /// The part.
        at: PartLocation,
        /// What is wrong.
        reason: String,
    },
    /// Not an absolute URL with a host.
    #[error("{at}: invalid URL: {reason}")]
    InvalidUrl {
        /// The part.
        at: PartLocation,
        /// What is wrong.
        reason: String,
    },
    /// A scheme other than http, https or data (on a redirect too).
    #[error("{at}: scheme {scheme:?} not allowed (http, https or data only)")]
    Scheme {
        /// The part.
        at: PartLocation,
        /// The scheme, lowercased.
        scheme: String,
    },
    /// The host is not in `allowed_domains`.
    #[error("{at}: {} host {host:?} not allowed", if *redirect { "redirect" } else { "URL" })]
    HostNotAllowed {
        /// The part.
        at: PartLocation,
        /// The host refused.
        host: String,
        /// It was a redirect's target.
        redirect: bool,
    },
    /// Every address of the host is in a blocked range.
    #[error("{at}: host {host:?} resolves to a blocked address ({reason})")]
    Blocked {
        /// The part.
        at: PartLocation,
        /// The host refused.
        host: String,
        /// The first refused address's range.
        reason: BlockReason,
    },
    /// The image is larger than `max_download_bytes`.
    #[error("{at}: image larger than {max_bytes} bytes")]
    TooLarge {
        /// The part.
        at: PartLocation,
        /// The cap.
        max_bytes: u64,
    },
    /// The host name did not resolve.
    #[error("{at}: cannot resolve host {host:?}: {detail}")]
    Resolve {
        /// The part.
        at: PartLocation,
        /// The host.
        host: String,
        /// The resolver's error.
        detail: String,
    },
    /// Connecting, sending or reading failed.
    #[error("{at}: download from {host:?} failed: {detail}")]
    Transport {
        /// The part.
        at: PartLocation,
        /// The host.
        host: String,
        /// The I/O or HTTP error.
        detail: String,
    },
    /// The download answered a status other than 200 (llm-d takes 200 only).
    #[error("{at}: download from {host:?} answered HTTP {status}")]
    Status {
        /// The part.
        at: PartLocation,
        /// The host.
        host: String,
        /// Its status.
        status: u16,
    },
    /// More than [`fetch::MAX_REDIRECTS`] redirects.
    #[error("{at}: more than {max} redirects")]
    TooManyRedirects {
        /// The part.
        at: PartLocation,
        /// The limit.
        max: usize,
    },
    /// An https URL: this build has no TLS client (pdgate-server depends on no TLS crate).
    #[error(
        "{at}: cannot download from {host:?} over https: no system root certificates, or not a TLS server name"
    )]
    TlsUnavailable {
        /// The part.
        at: PartLocation,
        /// The host.
        host: String,
    },
    /// The download did not finish within `download_timeout`.
    #[error("{at}: download did not finish within {after_ms} ms")]
    Timeout {
        /// The part.
        at: PartLocation,
        /// The timeout, ms.
        after_ms: u64,
    },
}

impl MediaError {
    /// The HTTP status for the client: 400 for the request's own faults and refused hosts or
    /// addresses, 504 for a timeout, 502 for any other failed download.
    pub fn status(&self) -> u16 {
        match self {
            MediaError::TooManyEntries { .. }
            | MediaError::DataUrl { .. }
            | MediaError::InvalidUrl { .. }
            | MediaError::Scheme { .. }
            | MediaError::HostNotAllowed { .. }
            | MediaError::Blocked { .. }
            | MediaError::TooLarge { .. } => 400,
            MediaError::Timeout { .. } => 504,
            MediaError::Resolve { .. }
            | MediaError::Transport { .. }
            | MediaError::Status { .. }
            | MediaError::TooManyRedirects { .. }
            | MediaError::TlsUnavailable { .. } => 502,
        }
    }
}

/// Runs the step on a chat request body. `Ok(None)`: nothing to change (no image part with an
/// http(s) URL, or not a JSON object with `messages`: the caller keeps its body). `Ok(Some)`:
/// the body with each downloaded part's `image_url.url` replaced by its `data:` URI, every
/// other byte kept. Each refused or failed download is logged once (host and path, no query).
pub async fn replace_media_urls(
    settings: &MediaUrlSettings,
    body: &[u8],
) -> Result<Option<Bytes>, MediaError> {
    if !scan::may_hold_image_parts(body) {
        return Ok(None);
    }
    let parts = scan::image_parts(body);
    if parts.is_empty() {
        return Ok(None);
    }
    let result = plan_and_fetch(settings, body, &parts).await;
    if let Err(e) = &result {
        let site = parts
            .iter()
            .find(|p| Some(p.at) == location(e))
            .and_then(|p| Target::parse(&p.url).ok())
            .map(|t| t.describe())
            .unwrap_or_default();
        if e.status() == 400 {
            tracing::info!(error = %e, url = %site, "image URL refused");
        } else {
            tracing::warn!(error = %e, url = %site, "image download failed");
        }
    }
    result
}

async fn plan_and_fetch(
    settings: &MediaUrlSettings,
    body: &[u8],
    parts: &[scan::ImagePart],
) -> Result<Option<Bytes>, MediaError> {
    if settings.max_entries > 0 && parts.len() > settings.max_entries {
        return Err(MediaError::TooManyEntries {
            got: parts.len(),
            max: settings.max_entries,
        });
    }
    let mut jobs = Vec::new();
    for p in parts {
        let at = p.at;
        if guard::is_data_url(&p.url) {
            guard::check_data_url(&p.url).map_err(|reason| MediaError::DataUrl { at, reason })?;
            continue;
        }
        let target = Target::parse(&p.url).map_err(|e| match e {
            TargetError::Scheme(scheme) => MediaError::Scheme { at, scheme },
            TargetError::Invalid(reason) => MediaError::InvalidUrl { at, reason },
        })?;
        if !guard::host_allowed(&target.host, &settings.allowed_domains) {
            return Err(MediaError::HostNotAllowed {
                at,
                host: target.host,
                redirect: false,
            });
        }
        jobs.push((p.span.clone(), at, target));
    }
    if jobs.is_empty() {
        return Ok(None);
    }
    let replacements: Vec<_> = futures_util::stream::iter(jobs)
        .map(|(span, at, target)| async move {
            let d = fetch::download(settings, at, target).await?;
            let url = format!(
                "data:{};base64,{}",
                d.content_type,
                fetch::base64_encode(&d.data)
            );
            Ok::<_, MediaError>((span, url))
        })
        .buffer_unordered(settings.max_concurrent_downloads.max(1))
        .try_collect()
        .await?;
    Ok(Some(scan::splice(body, replacements)))
}

/// The part an error names, if any.
fn location(e: &MediaError) -> Option<PartLocation> {
    match e {
        MediaError::TooManyEntries { .. } => None,
        MediaError::DataUrl { at, .. }
        | MediaError::InvalidUrl { at, .. }
        | MediaError::Scheme { at, .. }
        | MediaError::HostNotAllowed { at, .. }
        | MediaError::Blocked { at, .. }
        | MediaError::TooLarge { at, .. }
        | MediaError::Resolve { at, .. }
        | MediaError::Transport { at, .. }
        | MediaError::Status { at, .. }
        | MediaError::TooManyRedirects { at, .. }
        | MediaError::TlsUnavailable { at, .. }
        | MediaError::Timeout { at, .. } => Some(*at),
    }
}
