//! The pooled upstream HTTP client: sends one leg within its [`LegTimeouts`] and classifies
//! what went wrong as a [`FailureKind`] (the failure rule, `failure.rs`, decides what follows).
//! Used by both dispatchers (engines and per-role routers) and by a coordinator's
//! `/v1/models`.

use crate::dispatch::leg_body::LegBody;
use crate::dispatch::timeouts::LegTimeouts;
use bytes::Bytes;
use http::{HeaderMap, Method, Request};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use pdgate_coordinator::{DispatchError, FailureKind, PhaseResponse};
use std::time::Duration;
use tokio::time::Instant;

/// Keep-alive HTTP/1.1 client shared by every leg and by the metrics scraper.
#[derive(Clone)]
pub struct Upstream {
    client: Client<HttpConnector, Full<Bytes>>,
    connect_timeout: Duration,
    pool: PoolSettings,
}

/// The upstream connection pool (`--upstream-max-idle-per-host`,
/// `--upstream-idle-timeout-ms`; llm-d coordinator `gateway.max_idle_conns_per_host`,
/// `gateway.idle_conn_timeout`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolSettings {
    /// Idle keep-alive connections kept per upstream host.
    pub max_idle_per_host: usize,
    /// How long an idle connection is kept.
    pub idle_timeout: Duration,
}

/// Default of `--upstream-max-idle-per-host`.
pub const DEFAULT_MAX_IDLE_PER_HOST: usize = 256;

impl Default for PoolSettings {
    fn default() -> Self {
        PoolSettings {
            max_idle_per_host: DEFAULT_MAX_IDLE_PER_HOST,
            idle_timeout: pdgate_fleet::scrape::client::DEFAULT_POOL_IDLE_TIMEOUT,
        }
    }
}

impl Upstream {
    /// A client whose TCP connects time out after `connect_timeout`, pooling as `pool` says.
    pub fn new(connect_timeout: Duration, pool: PoolSettings) -> Self {
        Upstream {
            client: pdgate_fleet::scrape::client::pooled_client(
                connect_timeout,
                pool.max_idle_per_host,
                pool.idle_timeout,
            ),
            connect_timeout,
            pool,
        }
    }

    /// A client with the same settings and an empty connection pool of its own.
    pub fn fresh_pool(&self) -> Self {
        Upstream::new(self.connect_timeout, self.pool)
    }

    /// Sends one request within `t` and returns its head with the body: streamed (idle and
    /// total bounds armed) when `t.streamed`, else read whole, up to `max_bytes` (legs:
    /// [`MAX_ANSWER_BYTES`]), within the body timeout and the deadline. `endpoint` names the
    /// target in errors.
    ///
    /// Errors ([`FailureKind`]): `ConnectRefused`, `ConnectTimeout`, `Reset` (the connection
    /// failed after sending), `HeadTimeout` (streamed) or `Deadline` (non-streamed) when no
    /// head came in time, `BodyTimeout`, `Deadline` or `BodyBroken` while reading a
    /// non-streamed body; a non-streamed body over `max_bytes` fails as `BodyBroken`.
    #[allow(clippy::too_many_arguments)]
    pub async fn send(
        &self,
        endpoint: &str,
        method: Method,
        uri: String,
        headers: HeaderMap,
        body: Bytes,
        t: LegTimeouts,
        max_bytes: usize,
    ) -> Result<PhaseResponse<LegBody>, DispatchError> {
        let started = Instant::now();
        let mut req = Request::builder()
            .method(method)
            .uri(uri)
            .body(Full::new(body))
            .map_err(|e| {
                DispatchError::new(FailureKind::ConnectRefused, endpoint, e.to_string())
            })?;
        *req.headers_mut() = headers;
        let head = match tokio::time::timeout(t.head, self.client.request(req)).await {
            Err(_) => {
                let kind = if t.streamed {
                    FailureKind::HeadTimeout
                } else {
                    FailureKind::Deadline
                };
                let detail = format!("no response head after {} ms", t.head.as_millis());
                return Err(DispatchError::new(kind, endpoint, detail));
            }
            Ok(Err(e)) => return Err(classify_client_error(endpoint, &e)),
            Ok(Ok(resp)) => resp,
        };
        let (parts, body) = head.into_parts();
        let body = if t.streamed {
            let deadline = t
                .total
                .map(|d| crate::dispatch::leg_body::after(started, d));
            LegBody::streamed(body, t.body, deadline)
        } else {
            let left = t.total.map(|d| d.saturating_sub(started.elapsed()));
            LegBody::full(read_whole(endpoint, body, t.body, left, max_bytes).await?)
        };
        Ok(PhaseResponse {
            served: endpoint.to_string(),
            status: parts.status.as_u16(),
            headers: parts.headers,
            body,
        })
    }

    /// `GET http://{address}{path}` and its whole body within `timeout`, for scraping; a
    /// body over [`MAX_SCRAPE_BYTES`] fails as `BodyBroken`.
    pub async fn get(
        &self,
        endpoint: &str,
        address: &str,
        path: &str,
        timeout: Duration,
    ) -> Result<(u16, Bytes), DispatchError> {
        let t = LegTimeouts {
            streamed: false,
            head: timeout,
            body: timeout,
            total: Some(timeout),
        };
        let resp = self
            .send(
                endpoint,
                Method::GET,
                format!("http://{address}{path}"),
                HeaderMap::new(),
                Bytes::new(),
                t,
                MAX_SCRAPE_BYTES,
            )
            .await?;
        let body = resp.body.into_full().unwrap_or_default();
        Ok((resp.status, body))
    }
}

/// Largest non-streamed engine answer read (prefill answers, error bodies, `n > 1`
/// completions), bytes: 64 MiB, the default cap of a client request body.
pub const MAX_ANSWER_BYTES: usize = 64 << 20;

pub use pdgate_fleet::scrape::client::MAX_SCRAPE_BYTES;

/// Reads a whole body of at most `max_bytes`: each wait bounded by `body` and the whole by
/// `left` (the rest of the leg's deadline).
///
/// Errors: `BodyTimeout` (the body stalled), `Deadline` (the leg's deadline passed first),
/// `BodyBroken` (the connection failed mid-body, or the body is over `max_bytes`: what was
/// read so far is dropped).
pub async fn read_whole(
    endpoint: &str,
    body: hyper::body::Incoming,
    body_timeout: Duration,
    left: Option<Duration>,
    max_bytes: usize,
) -> Result<Bytes, DispatchError> {
    let (limit, kind) = match left {
        Some(l) if l < body_timeout => (l, FailureKind::Deadline),
        _ => (body_timeout, FailureKind::BodyTimeout),
    };
    let body = http_body_util::Limited::new(body, max_bytes);
    match tokio::time::timeout(limit, body.collect()).await {
        Err(_) => Err(DispatchError::new(
            kind,
            endpoint,
            format!("body not complete {} ms after the head", limit.as_millis()),
        )),
        Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => Err(DispatchError::new(
            FailureKind::BodyBroken,
            endpoint,
            format!("answer over {max_bytes} bytes"),
        )),
        Ok(Err(e)) => Err(DispatchError::new(
            FailureKind::BodyBroken,
            endpoint,
            error_chain(&*e),
        )),
        Ok(Ok(c)) => Ok(c.to_bytes()),
    }
}

/// Connect failures (refused, or timed out: an `io::ErrorKind::TimedOut` in the chain) apart
/// from failures after the request was sent (`Reset`).
fn classify_client_error(endpoint: &str, e: &hyper_util::client::legacy::Error) -> DispatchError {
    let kind = if e.is_connect() {
        let mut timed_out = false;
        let mut cur: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(e);
        while let Some(c) = cur {
            if let Some(io) = c.downcast_ref::<std::io::Error>() {
                timed_out |= io.kind() == std::io::ErrorKind::TimedOut;
            }
            cur = c.source();
        }
        if timed_out {
            FailureKind::ConnectTimeout
        } else {
            FailureKind::ConnectRefused
        }
    } else {
        FailureKind::Reset
    };
    DispatchError::new(kind, endpoint, error_chain(e))
}

pub use pdgate_fleet::scrape::client::error_chain;
