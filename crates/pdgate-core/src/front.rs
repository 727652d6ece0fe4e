//! What both front ends' doors share (issues 10 and 26), so a protection added here holds on
//! `pdgate serve` and `pdgate epp` alike:
//!
//! - **Request header limits** ([`MAX_REQUEST_HEADERS`], [`MAX_REQUEST_HEADER_BYTES`]): serve
//!   gives them to hyper (HTTP/1 `max_headers` and read buffer, HTTP/2 header list); the EPP
//!   checks the header list Envoy forwards against them before it keeps any.
//! - **Connection slots** ([`ConnectionSlots`]): connections open at once on a port (or a set
//!   of ports); one more is refused at accept ([`Refusal`]) and closed at once.
//! - **The accept loop** ([`Door`], [`serve_http`]): accept errors (`EMFILE`, …) pause it for
//!   [`ACCEPT_BACKOFF`] and are logged at most once a second; it never stops. A connection must
//!   send its first byte within the header timeout (then hyper's HTTP/1 header-read timer
//!   takes over, which also closes idle keep-alive connections), else it is closed.
//! - **Status labels** ([`status_label`], [`bounded_status_label`]): the one rule for the
//!   `status` label of every counter, whatever front counts it.
//!
//! Serve's main port (its `/metrics` and `/health` included) and the EPP's metrics port are
//! served by [`serve_http`]; the EPP's gRPC ports use [`Door`] with their own handshake.

use crate::client_limits::ClientLimits;
use crate::metrics::Metrics;
use axum::extract::ConnectInfo;
use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};

/// Most header fields of one request (pseudo-headers not counted): hyper's HTTP/1 default,
/// which `pdgate serve` always had, now stated once for both fronts. More → 431. It also keeps
/// the EPP far from `http::HeaderMap`'s capacity (32,768 entries; over it, insertion panics).
pub const MAX_REQUEST_HEADERS: usize = 100;

/// Most bytes of one request's header list (names and values; pseudo-headers included),
/// 64 KiB: above Envoy's default `max_request_headers_kb` (60 KiB), so whatever a default
/// Envoy forwards fits, and far below what one ext_proc message may carry (4 MiB). Serve's
/// HTTP/2 header list and HTTP/1 head buffer use the same bound. More → 431.
pub const MAX_REQUEST_HEADER_BYTES: usize = 64 << 10;

/// Pause after a failed accept (descriptors exhausted, …).
pub const ACCEPT_BACKOFF: Duration = Duration::from_millis(20);

/// The `status` label of a response status: the code itself for 100..=599 (every standard
/// class), `"other"` for anything else (an engine's or a data plane's 600..=999, 0, 65535):
/// a label has at most 501 values, whoever sent the status.
pub fn status_label(status: u16) -> &'static str {
    static LABELS: LazyLock<Vec<String>> =
        LazyLock::new(|| (100..=599u16).map(|s| s.to_string()).collect());
    match status {
        100..=599 => LABELS[usize::from(status - 100)].as_str(),
        _ => "other",
    }
}

/// [`status_label`] for a label already written out: a three-digit status in 100..=599 is
/// kept, as is `"error"` (a leg that got no response); anything else is `"other"`.
pub fn bounded_status_label(label: &str) -> &str {
    match label.parse::<u16>() {
        Ok(s) if label.len() == 3 && (100..=599).contains(&s) => label,
        _ if label == "error" => label,
        _ => "other",
    }
}

/// Connections open now on the ports that share these slots.
#[derive(Debug, Default)]
pub struct ConnectionSlots {
    open: AtomicUsize,
}

/// One open connection; frees its slot on drop.
#[derive(Debug)]
pub struct Slot(Arc<ConnectionSlots>);

impl ConnectionSlots {
    /// Connections open now.
    pub fn open(&self) -> usize {
        self.open.load(Ordering::Relaxed)
    }

    /// A slot when fewer than `max` are taken.
    pub fn take(self: &Arc<Self>, max: usize) -> Option<Slot> {
        let mut n = self.open.load(Ordering::Relaxed);
        loop {
            if n >= max {
                return None;
            }
            match self
                .open
                .compare_exchange_weak(n, n + 1, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return Some(Slot(self.clone())),
                Err(now) => n = now,
            }
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The limits of one listening port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListenerLimits {
    /// Time for a new connection to send its first bytes (HTTP/1: and its whole head, and
    /// the next head after a response, so also the keep-alive idle timeout).
    pub header_timeout: Duration,
    /// Connections open at once on the ports sharing the slots; one more is refused.
    pub max_connections: usize,
}

impl From<&ClientLimits> for ListenerLimits {
    fn from(l: &ClientLimits) -> Self {
        ListenerLimits {
            header_timeout: l.header_timeout,
            max_connections: l.max_connections,
        }
    }
}

/// What a connection over the limit is told before it is closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// A whole HTTP/1.1 `503` with `Retry-After: 1` and the OpenAI error body (an HTTP port).
    Http503,
    /// Nothing: closed at once (a gRPC port: HTTP/2 has no answer before its handshake).
    Close,
}

/// The 503 of [`Refusal::Http503`].
static REFUSAL: LazyLock<Vec<u8>> = LazyLock::new(|| {
    let body = pdgate_api::ErrorBody::new(503, "too many client connections").to_bytes();
    let mut out = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n\
         connection: close\r\nretry-after: 1\r\ncontent-length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(&body);
    out
});

/// One listening port under [`ListenerLimits`]: accepts connections, each holding a [`Slot`].
pub struct Door {
    listener: TcpListener,
    /// The port's limits.
    pub limits: ListenerLimits,
    slots: Arc<ConnectionSlots>,
    metrics: Arc<Metrics>,
    refusal: Refusal,
}

/// A connection let in: its socket, peer and slot (hold it as long as the connection).
pub struct Accepted {
    /// The socket (`TCP_NODELAY` set).
    pub tcp: TcpStream,
    /// The peer's address.
    pub peer: SocketAddr,
    /// Its connection slot.
    pub slot: Slot,
}

impl Door {
    /// A door on `listener`; `slots` may be shared with other ports (they then share
    /// `limits.max_connections`). Refusals, accept errors and header timeouts are counted in
    /// `metrics` (`pdgate_client_connections_refused_total`, `pdgate_accept_errors_total`,
    /// `pdgate_client_timeouts_total{kind="header"}`).
    pub fn new(
        listener: TcpListener,
        limits: ListenerLimits,
        slots: Arc<ConnectionSlots>,
        metrics: Arc<Metrics>,
        refusal: Refusal,
    ) -> Door {
        Door {
            listener,
            limits,
            slots,
            metrics,
            refusal,
        }
    }

    /// The address listened on.
    ///
    /// Errors: the socket's address cannot be read.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// The next connection with a free slot. Accept errors pause the loop
    /// ([`ACCEPT_BACKOFF`]); a connection over the limit is refused (the [`Refusal`], at most
    /// 1 s spent on it in a task of its own) and the loop goes on.
    pub async fn accept(&self) -> Accepted {
        loop {
            let (tcp, peer) = match self.listener.accept().await {
                Ok(accepted) => accepted,
                Err(e) => {
                    self.metrics.accept_errors.inc();
                    if crate::log_limit::allow(&crate::log_limit::ACCEPT_ERRORS) {
                        tracing::warn!(error = %e, open = self.slots.open(),
                            "accept failed; pausing {} ms", ACCEPT_BACKOFF.as_millis());
                    }
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                }
            };
            // Answers are written whole; Nagle would only delay the last segment of each.
            let _ = tcp.set_nodelay(true);
            let Some(slot) = self.slots.take(self.limits.max_connections) else {
                self.metrics.client_connections_refused.inc();
                if crate::log_limit::allow(&crate::log_limit::CONNECTIONS_REFUSED) {
                    let port = self.local_addr().map(|a| a.port()).unwrap_or_default();
                    tracing::warn!(
                        port,
                        max = self.limits.max_connections,
                        "connection refused: too many open (--max-client-connections)"
                    );
                }
                tokio::spawn(refuse(tcp, self.refusal));
                continue;
            };
            return Accepted { tcp, peer, slot };
        }
    }

    /// Counts a connection closed for not sending its headers in time.
    pub fn count_header_timeout(&self) {
        count_header_timeout(&self.metrics);
    }

    /// The metrics refusals and timeouts are counted in.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }
}

/// Counts a connection closed for not sending its headers (or HTTP/2 preface) in time:
/// `pdgate_client_timeouts_total{kind="header"}`.
pub fn count_header_timeout(metrics: &Metrics) {
    metrics.client_timeouts.with_label_values(&["header"]).inc();
}

/// Tells a connection over the limit so (for [`Refusal::Http503`]), and closes it (at most
/// 1 s spent on it).
async fn refuse(mut tcp: TcpStream, refusal: Refusal) {
    if refusal == Refusal::Http503 {
        let _ = tokio::time::timeout(Duration::from_secs(1), async {
            tcp.write_all(&REFUSAL).await?;
            tcp.shutdown().await
        })
        .await;
    }
}

/// The hyper connection builder both HTTP ports use: HTTP/1 and HTTP/2 (prior knowledge),
/// the header-read timeout, at most [`MAX_REQUEST_HEADERS`] header fields and a head of at
/// most [`MAX_REQUEST_HEADER_BYTES`] (HTTP/1 read buffer; HTTP/2 header list); more is
/// answered 431 by hyper.
pub fn http_builder(limits: &ListenerLimits) -> Builder<TokioExecutor> {
    let mut builder = Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .max_headers(MAX_REQUEST_HEADERS)
        .max_buf_size(MAX_REQUEST_HEADER_BYTES);
    builder
        .http2()
        .max_header_list_size(MAX_REQUEST_HEADER_BYTES as u32);
    builder
}

/// Serves `app` through `door` until the task is aborted: each connection in a task of its
/// own, holding its slot; closed when it sends no byte within the header timeout (counted),
/// then under hyper's header-read timer ([`http_builder`]). Requests see their connection's
/// source address as `axum::extract::ConnectInfo<SocketAddr>` (serve's trust boundary reads
/// it).
pub async fn serve_http(door: Door, app: Router) {
    let limits = door.limits;
    let builder = Arc::new(http_builder(&limits));
    loop {
        let Accepted { tcp, peer, slot } = door.accept().await;
        let svc = WithPeer {
            app: app.clone(),
            peer,
        };
        let builder = builder.clone();
        let metrics = door.metrics.clone();
        tokio::spawn(async move {
            let _slot = slot;
            // hyper's header timer starts with the first byte: a connection that never sends
            // one is closed here after the same timeout.
            let mut first = [0u8; 1];
            let peeked = tokio::time::timeout(limits.header_timeout, tcp.peek(&mut first)).await;
            if !matches!(peeked, Ok(Ok(1..))) {
                // Timed out (counted), closed by the client (0 bytes) or broken: nothing to
                // serve.
                if peeked.is_err() {
                    count_header_timeout(&metrics);
                }
                return;
            }
            let conn = builder.serve_connection_with_upgrades(TokioIo::new(tcp), svc);
            if let Err(e) = conn.await {
                let timed_out = e
                    .downcast_ref::<hyper::Error>()
                    .is_some_and(hyper::Error::is_timeout);
                if timed_out {
                    count_header_timeout(&metrics);
                }
            }
        });
    }
}

/// The routes, with each request told its connection's source address.
#[derive(Clone)]
struct WithPeer {
    app: Router,
    peer: SocketAddr,
}

impl hyper::service::Service<http::Request<hyper::body::Incoming>> for WithPeer {
    type Response = axum::response::Response;
    type Error = std::convert::Infallible;
    type Future = axum::routing::future::RouteFuture<std::convert::Infallible>;

    fn call(&self, mut req: http::Request<hyper::body::Incoming>) -> Self::Future {
        req.extensions_mut().insert(ConnectInfo(self.peer));
        tower_service::Service::call(&mut self.app.clone(), req.map(axum::body::Body::new))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_bounded_and_given_back() {
        let s = Arc::new(ConnectionSlots::default());
        let a = s.take(2).unwrap();
        let _b = s.take(2).unwrap();
        assert!(s.take(2).is_none());
        drop(a);
        assert_eq!(s.open(), 1);
        assert!(s.take(2).is_some());
    }

    #[test]
    fn the_refusal_is_a_whole_http_response() {
        let text = std::str::from_utf8(&REFUSAL).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 503 "));
        assert!(head.contains("retry-after: 1"));
        assert!(head.contains(&format!("content-length: {}", body.len())));
        let v: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(v["error"]["code"], 503);
    }

    #[test]
    fn status_labels_are_bounded_by_one_rule() {
        assert_eq!(status_label(200), "200");
        assert_eq!(status_label(100), "100");
        assert_eq!(status_label(599), "599");
        assert_eq!(status_label(499), "499");
        for odd in [0, 1, 99, 600, 999, 1000, u16::MAX] {
            assert_eq!(status_label(odd), "other", "{odd}");
        }
        let distinct: std::collections::BTreeSet<&str> = (0..=u16::MAX).map(status_label).collect();
        assert_eq!(distinct.len(), 501);
        for (label, want) in [
            ("200", "200"),
            ("431", "431"),
            ("error", "error"),
            ("0", "other"),
            ("600", "other"),
            ("0200", "other"),
            ("+20", "other"),
            ("abc", "other"),
            ("", "other"),
        ] {
            assert_eq!(bounded_status_label(label), want, "{label:?}");
        }
    }
}
