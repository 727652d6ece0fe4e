//! The pooled upstream HTTP client and the in-process [`Dispatcher`]: each phase leg goes
//! straight to the endpoint the scheduler picked.

use bytes::Bytes;
use http::{HeaderMap, Method, Request};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;
use pdgate_coordinator::{DispatchError, Dispatcher, PhaseRequest, PhaseResponse};
use std::time::Duration;

/// Keep-alive HTTP/1.1 client shared by every leg and by the metrics scraper.
#[derive(Clone)]
pub struct Upstream {
    client: Client<HttpConnector, Full<Bytes>>,
    /// Time allowed for a response head (and for collecting a whole prefill body).
    timeout: Duration,
}

impl Upstream {
    /// A client whose legs time out after `timeout` without a response head.
    pub fn new(timeout: Duration) -> Self {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(90))
            .pool_max_idle_per_host(256)
            .build(connector);
        Upstream { client, timeout }
    }

    /// A client with the same settings and an empty connection pool of its own.
    pub fn fresh_pool(&self) -> Self {
        Upstream::new(self.timeout)
    }

    /// Sends one request and returns the response head.
    pub async fn send(
        &self,
        endpoint: &str,
        method: Method,
        uri: String,
        headers: HeaderMap,
        body: Bytes,
        timeout: Duration,
    ) -> Result<PhaseResponse<Incoming>, DispatchError> {
        let mut req = Request::builder()
            .method(method)
            .uri(uri)
            .body(Full::new(body))
            .map_err(|e| DispatchError::Connect {
                endpoint: endpoint.to_string(),
                reason: e.to_string(),
            })?;
        *req.headers_mut() = headers;
        match tokio::time::timeout(timeout, self.client.request(req)).await {
            Err(_) => Err(DispatchError::Timeout {
                endpoint: endpoint.to_string(),
                timeout_ms: timeout.as_millis() as u64,
            }),
            Ok(Err(e)) => Err(DispatchError::Connect {
                endpoint: endpoint.to_string(),
                reason: error_chain(&e),
            }),
            Ok(Ok(resp)) => {
                let (parts, body) = resp.into_parts();
                Ok(PhaseResponse {
                    status: parts.status.as_u16(),
                    headers: parts.headers,
                    body,
                })
            }
        }
    }

    /// `GET http://{address}{path}` and its whole body, for scraping.
    pub async fn get(
        &self,
        endpoint: &str,
        address: &str,
        path: &str,
        timeout: Duration,
    ) -> Result<(u16, Bytes), DispatchError> {
        let resp = self
            .send(
                endpoint,
                Method::GET,
                format!("http://{address}{path}"),
                HeaderMap::new(),
                Bytes::new(),
                timeout,
            )
            .await?;
        let body = self.collect(endpoint, resp.body).await?;
        Ok((resp.status, body))
    }
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

impl Dispatcher for Upstream {
    type Body = Incoming;

    async fn dispatch(&self, req: PhaseRequest) -> Result<PhaseResponse<Incoming>, DispatchError> {
        let uri = format!("http://{}{}", req.target.address, req.api.path());
        let mut headers = req.headers;
        headers.insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static("application/json"),
        );
        self.send(
            &req.target.name,
            Method::POST,
            uri,
            headers,
            req.body,
            self.timeout,
        )
        .await
    }

    async fn collect(&self, endpoint: &str, body: Incoming) -> Result<Bytes, DispatchError> {
        match tokio::time::timeout(self.timeout, body.collect()).await {
            Err(_) => Err(DispatchError::Timeout {
                endpoint: endpoint.to_string(),
                timeout_ms: self.timeout.as_millis() as u64,
            }),
            Ok(Err(e)) => Err(DispatchError::Body {
                endpoint: endpoint.to_string(),
                reason: error_chain(&e),
            }),
            Ok(Ok(c)) => Ok(c.to_bytes()),
        }
    }
}
