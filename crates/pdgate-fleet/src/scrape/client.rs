//! The scraper's own HTTP client: `GET http://{address}{path}` and the whole body, bounded
//! in time and bytes. Separate from the front ends' upstream clients (whose pools carry
//! inference legs), so that the fleet crate needs neither front end.

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Limited};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;
use std::time::Duration;

/// Largest `/metrics` read from an engine, bytes (a vLLM `/metrics` is about 100 KB). Its
/// `/v1/models` is read within [`super::models::MAX_MODELS_BYTES`].
pub const MAX_SCRAPE_BYTES: usize = 8 << 20;

/// Why a scrape `GET` failed, as far as the engine's health is concerned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GetError {
    /// No HTTP answer: the connection failed or closed, or the timeout passed, before a
    /// response head arrived (an unusable address also lands here). Only this counts towards
    /// taking an endpoint out of the candidates ([`super::health::UNREADY_AFTER`]).
    NoAnswer(String),
    /// A head arrived but not the whole body (broken, or timed out while reading it).
    Body(String),
    /// The body is longer than the limit of the read, bytes.
    OverLimit(usize),
}

impl std::fmt::Display for GetError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GetError::NoAnswer(m) | GetError::Body(m) => f.write_str(m),
            GetError::OverLimit(limit) => write!(f, "answer over {limit} bytes"),
        }
    }
}

/// Keep-alive HTTP/1.1 client for engine scrapes.
#[derive(Clone)]
pub struct ScrapeClient {
    client: Client<HttpConnector, Empty<Bytes>>,
}

/// How long an idle keep-alive connection is kept by default (Go's `http.Transport` and
/// llm-d's `gateway.idle_conn_timeout` default alike).
pub const DEFAULT_POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(90);

/// A keep-alive HTTP/1.1 client (no Nagle delay, idle connections kept `idle_timeout`, at
/// most `max_idle_per_host` of them per host) whose TCP connects time out after
/// `connect_timeout`: the one client setup of the scraper and of the front ends' upstreams.
pub fn pooled_client<B>(
    connect_timeout: Duration,
    max_idle_per_host: usize,
    idle_timeout: Duration,
) -> Client<HttpConnector, B>
where
    B: hyper::body::Body + Send,
    B::Data: Send,
{
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    connector.set_connect_timeout(Some(connect_timeout));
    Client::builder(TokioExecutor::new())
        .pool_idle_timeout(idle_timeout)
        .pool_max_idle_per_host(max_idle_per_host)
        .build(connector)
}

impl ScrapeClient {
    /// A client whose TCP connects time out after `connect_timeout` (one idle connection per
    /// engine is all a scrape every interval needs).
    pub fn new(connect_timeout: Duration) -> Self {
        ScrapeClient {
            client: pooled_client(connect_timeout, 1, DEFAULT_POOL_IDLE_TIMEOUT),
        }
    }

    /// `GET http://{address}{path}`: the status and whole body (at most
    /// [`MAX_SCRAPE_BYTES`]) within `timeout` for head and body together.
    ///
    /// Errors: a message naming what failed (connect, status line, body over the limit,
    /// timed out after `timeout` ms).
    pub async fn get(
        &self,
        address: &str,
        path: &str,
        timeout: Duration,
    ) -> Result<(u16, Bytes), String> {
        (self
            .get_limited(address, path, timeout, MAX_SCRAPE_BYTES)
            .await)
            .map_err(|e| e.to_string())
    }

    /// [`Self::get`] with a body of at most `max_bytes`, and errors that tell an engine that
    /// did not answer from one whose answer was unusable.
    ///
    /// Errors: [`GetError`], whose message names what failed.
    pub async fn get_limited(
        &self,
        address: &str,
        path: &str,
        timeout: Duration,
        max_bytes: usize,
    ) -> Result<(u16, Bytes), GetError> {
        let uri: http::Uri = format!("http://{address}{path}")
            .parse()
            .map_err(|e: http::uri::InvalidUri| GetError::NoAnswer(e.to_string()))?;
        let headed = std::sync::atomic::AtomicBool::new(false);
        let exchange = async {
            let resp =
                (self.client.get(uri).await).map_err(|e| GetError::NoAnswer(error_chain(&e)))?;
            headed.store(true, std::sync::atomic::Ordering::Relaxed);
            let status = resp.status().as_u16();
            let body = Limited::new(resp.into_body(), max_bytes)
                .collect()
                .await
                .map_err(|e| {
                    if e.is::<http_body_util::LengthLimitError>() {
                        GetError::OverLimit(max_bytes)
                    } else {
                        GetError::Body(error_chain(&*e))
                    }
                })?;
            Ok((status, body.to_bytes()))
        };
        match tokio::time::timeout(timeout, exchange).await {
            Ok(r) => r,
            Err(_) => {
                let m = format!("timed out after {} ms", timeout.as_millis());
                match headed.load(std::sync::atomic::Ordering::Relaxed) {
                    true => Err(GetError::Body(m)),
                    false => Err(GetError::NoAnswer(m)),
                }
            }
        }
    }
}

/// `e` and its sources, joined by `: `.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}
