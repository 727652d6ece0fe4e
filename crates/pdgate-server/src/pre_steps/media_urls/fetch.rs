//! One image download: resolve the host once, refuse blocked addresses, connect to an address
//! that was checked (so DNS rebinding cannot swap it), send `GET` over HTTP/1.1, follow up to
//! [`MAX_REDIRECTS`] redirects by hand (each hop's host and addresses checked again), and read
//! at most `max_download_bytes` of body. The whole of it, redirects included, runs under
//! `download_timeout`, as llm-d's `http.Client.Timeout` does.
//!
//! No proxy is used (llm-d honours `HTTP(S)_PROXY`). https is spoken with rustls, checking the
//! server's certificate against the system's root certificates (`rustls-native-certs`); a
//! system without any fails https downloads with [`MediaError::TlsUnavailable`].

use super::guard::{blocked, AddressPolicy, BlockReason, Target, TargetError};
use super::{MediaError, MediaUrlSettings, PartLocation};
use bytes::Bytes;
use http::{header, Request, Response, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use std::net::{IpAddr, SocketAddr};
use tokio::net::TcpStream;

/// Redirects followed per download (llm-d's Go client follows 10; a 6th here fails the download).
pub const MAX_REDIRECTS: usize = 5;

/// Content type of a download whose response names none (llm-d's `defaultContentType`).
pub const DEFAULT_CONTENT_TYPE: &str = "application/octet-stream";

/// A downloaded image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Download {
    /// The response's `Content-Type`, or [`DEFAULT_CONTENT_TYPE`].
    pub content_type: String,
    /// The body, at most `max_download_bytes`.
    pub data: Vec<u8>,
}

/// Downloads `target` for the part at `at`, under the settings' timeout.
pub(super) async fn download(
    settings: &MediaUrlSettings,
    at: PartLocation,
    target: Target,
) -> Result<Download, MediaError> {
    match tokio::time::timeout(settings.download_timeout, follow(settings, at, target)).await {
        Ok(r) => r,
        Err(_) => Err(MediaError::Timeout {
            at,
            after_ms: settings.download_timeout.as_millis() as u64,
        }),
    }
}

/// Aborts the task driving a connection when the download is done with it.
struct ConnTask(tokio::task::JoinHandle<()>);

impl Drop for ConnTask {
    fn drop(&mut self) {
        self.0.abort();
    }
}

async fn follow(
    settings: &MediaUrlSettings,
    at: PartLocation,
    mut target: Target,
) -> Result<Download, MediaError> {
    let mut redirects = 0;
    loop {
        let (resp, conn) = get(settings, at, &target).await?;
        let location = resp
            .headers()
            .get(header::LOCATION)
            .and_then(|v| v.to_str().ok());
        if let (true, Some(location)) = (resp.status().is_redirection(), location) {
            if redirects == MAX_REDIRECTS {
                return Err(MediaError::TooManyRedirects {
                    at,
                    max: MAX_REDIRECTS,
                });
            }
            redirects += 1;
            let next = target.join(location);
            drop((resp, conn));
            target = redirect_target(settings, at, &next)?;
            continue;
        }
        if resp.status() != StatusCode::OK {
            return Err(MediaError::Status {
                at,
                host: target.host.clone(),
                status: resp.status().as_u16(),
            });
        }
        let data = read_capped(settings, at, &target, resp).await?;
        drop(conn);
        return Ok(data);
    }
}

/// The target of a redirect, checked as the first URL is (scheme, form, allowed host).
fn redirect_target(
    settings: &MediaUrlSettings,
    at: PartLocation,
    url: &str,
) -> Result<Target, MediaError> {
    let target = Target::parse(url).map_err(|e| match e {
        TargetError::Scheme(scheme) => MediaError::Scheme { at, scheme },
        TargetError::Invalid(reason) => MediaError::InvalidUrl {
            at,
            reason: format!("redirect: {reason}"),
        },
    })?;
    if !super::guard::host_allowed(&target.host, &settings.allowed_domains) {
        return Err(MediaError::HostNotAllowed {
            at,
            host: target.host,
            redirect: true,
        });
    }
    Ok(target)
}

/// One request: resolve, check, connect, send; the response head and the connection's task.
async fn get(
    settings: &MediaUrlSettings,
    at: PartLocation,
    target: &Target,
) -> Result<(Response<Incoming>, ConnTask), MediaError> {
    let addrs = resolve(settings, at, target).await?;
    let stream = connect(at, target, &addrs).await?;
    let transport = |e: hyper::Error| MediaError::Transport {
        at,
        host: target.host.clone(),
        detail: e.to_string(),
    };
    let (mut sender, task) = match target.https {
        false => handshake(stream).await.map_err(transport)?,
        true => {
            let tls = tls_connect(at, target, stream).await?;
            handshake(tls).await.map_err(transport)?
        }
    };
    let req = Request::get(target.path_and_query.as_str())
        .header(header::HOST, target.host_header.as_str())
        .header(header::USER_AGENT, "pdgate")
        .header(header::ACCEPT, "image/*, */*;q=0.8")
        .body(Empty::<Bytes>::new())
        .map_err(|e| MediaError::InvalidUrl {
            at,
            reason: e.to_string(),
        })?;
    let resp = sender.send_request(req).await.map_err(transport)?;
    Ok((resp, task))
}

/// An HTTP/1 connection over `io`: its sender, and its task (aborted when dropped).
async fn handshake<S>(io: S) -> Result<(SendRequest<Empty<Bytes>>, ConnTask), hyper::Error>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io)).await?;
    let task = ConnTask(tokio::spawn(async move {
        let _ = conn.await;
    }));
    Ok((sender, task))
}

/// The TLS client config: the system's root certificates (`rustls-native-certs`), loaded
/// once; `None` when the system has none.
fn tls_config() -> Option<std::sync::Arc<tokio_rustls::rustls::ClientConfig>> {
    static CONFIG: std::sync::OnceLock<Option<std::sync::Arc<tokio_rustls::rustls::ClientConfig>>> =
        std::sync::OnceLock::new();
    CONFIG
        .get_or_init(|| {
            let mut roots = tokio_rustls::rustls::RootCertStore::empty();
            let found = rustls_native_certs::load_native_certs();
            let (added, _) = roots.add_parsable_certificates(found.certs);
            if added == 0 {
                tracing::warn!("no system root certificates: https image downloads will fail");
                return None;
            }
            let provider = tokio_rustls::rustls::crypto::ring::default_provider();
            let config = tokio_rustls::rustls::ClientConfig::builder_with_provider(provider.into())
                .with_safe_default_protocol_versions()
                .ok()?
                .with_root_certificates(roots)
                .with_no_client_auth();
            Some(std::sync::Arc::new(config))
        })
        .clone()
}

/// TLS over `stream` to `target.host`, its certificate checked against the system's roots.
///
/// Errors: no roots or a bad server name ([`MediaError::TlsUnavailable`]); a failed handshake
/// (a bad certificate included) as [`MediaError::Transport`].
async fn tls_connect(
    at: PartLocation,
    target: &Target,
    stream: TcpStream,
) -> Result<tokio_rustls::client::TlsStream<TcpStream>, MediaError> {
    let unavailable = || MediaError::TlsUnavailable {
        at,
        host: target.host.clone(),
    };
    let config = tls_config().ok_or_else(unavailable)?;
    let host = target.host.trim_start_matches('[').trim_end_matches(']');
    let name = tokio_rustls::rustls::pki_types::ServerName::try_from(host.to_string())
        .map_err(|_| unavailable())?;
    tokio_rustls::TlsConnector::from(config)
        .connect(name, stream)
        .await
        .map_err(|e| MediaError::Transport {
            at,
            host: target.host.clone(),
            detail: format!("TLS: {e}"),
        })
}

/// The addresses of the target that pass the guard, in resolver order. None passing: the
/// first refused address's reason.
async fn resolve(
    settings: &MediaUrlSettings,
    at: PartLocation,
    target: &Target,
) -> Result<Vec<SocketAddr>, MediaError> {
    let all: Vec<SocketAddr> = match target.host.parse::<IpAddr>() {
        Ok(ip) => vec![SocketAddr::new(ip, target.port)],
        Err(_) => tokio::net::lookup_host((target.host.as_str(), target.port))
            .await
            .map_err(|e| MediaError::Resolve {
                at,
                host: target.host.clone(),
                detail: e.to_string(),
            })?
            .collect(),
    };
    let policy = AddressPolicy {
        allow_private_networks: settings.allow_private_networks,
        allow_loopback: settings.allow_loopback_for_tests,
    };
    let mut refused: Option<BlockReason> = None;
    let passing: Vec<SocketAddr> = all
        .into_iter()
        .filter(|a| match blocked(a.ip(), policy) {
            Some(reason) => {
                refused.get_or_insert(reason);
                false
            }
            None => true,
        })
        .collect();
    match (passing.is_empty(), refused) {
        (false, _) => Ok(passing),
        (true, Some(reason)) => Err(MediaError::Blocked {
            at,
            host: target.host.clone(),
            reason,
        }),
        (true, None) => Err(MediaError::Resolve {
            at,
            host: target.host.clone(),
            detail: "no addresses".into(),
        }),
    }
}

/// A connection to the first checked address that takes one.
async fn connect(
    at: PartLocation,
    target: &Target,
    addrs: &[SocketAddr],
) -> Result<TcpStream, MediaError> {
    let mut last = String::from("no addresses");
    for addr in addrs {
        match TcpStream::connect(addr).await {
            Ok(s) => {
                let _ = s.set_nodelay(true);
                return Ok(s);
            }
            Err(e) => last = format!("connect: {e}"),
        }
    }
    Err(MediaError::Transport {
        at,
        host: target.host.clone(),
        detail: last,
    })
}

/// The body, refused when its `Content-Length` or its bytes pass the cap (reading stops at the
/// first chunk that passes it).
async fn read_capped(
    settings: &MediaUrlSettings,
    at: PartLocation,
    target: &Target,
    resp: Response<Incoming>,
) -> Result<Download, MediaError> {
    let cap = settings.max_download_bytes;
    let too_large = || MediaError::TooLarge { at, max_bytes: cap };
    let declared = resp
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|n| n > cap) {
        return Err(too_large());
    }
    let content_type = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty())
        .unwrap_or(DEFAULT_CONTENT_TYPE)
        .to_string();
    let mut data = Vec::with_capacity(declared.unwrap_or(0).min(cap).min(1 << 20) as usize);
    let mut body = resp.into_body();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| MediaError::Transport {
            at,
            host: target.host.clone(),
            detail: e.to_string(),
        })?;
        if let Ok(chunk) = frame.into_data() {
            if data.len() as u64 + chunk.len() as u64 > cap {
                return Err(too_large());
            }
            data.extend_from_slice(&chunk);
        }
    }
    Ok(Download { content_type, data })
}

/// Standard base64 (RFC 4648 §4, with padding), as Go's `base64.StdEncoding`.
pub fn base64_encode(data: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for (i, shift) in [18u32, 12, 6, 0].into_iter().enumerate() {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[((n >> shift) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}
