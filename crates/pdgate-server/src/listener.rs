//! The accept loop: client connections under [`ClientLimits`] (issue 10).
//!
//! - **Connection slots**, shared by every server thread: a connection over
//!   [`ClientLimits::max_connections`] is answered `503` with `Connection: close` and closed at
//!   once, so a flood of idle or slow connections never takes the descriptors that `/health`
//!   and normal requests need for longer than the header timeout that frees them.
//! - **Header timeout** (from accept until the first byte, here; then hyper's HTTP/1
//!   header-read timer, which also runs whenever the connection falls idle after a
//!   response): a connection that never sends a byte, a slowloris client, or a keep-alive
//!   connection nobody uses, is closed after [`ClientLimits::header_timeout`].
//! - **Accept errors** (`EMFILE`, `ENFILE`, …) pause the loop for [`ACCEPT_BACKOFF`] and are
//!   logged at most once a second; the loop never stops.
//!
//! HTTP/1 and HTTP/2 (prior knowledge) are both served by hyper-util's auto builder, with
//! hyper's own HTTP/2 limits.

use crate::app::AppState;
use crate::client_limits::ClientLimits;
use axum::extract::ConnectInfo;
use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};

/// Pause after a failed accept (descriptors exhausted, …).
pub const ACCEPT_BACKOFF: Duration = Duration::from_millis(20);

/// What a connection over the limit is told before it is closed: a whole HTTP/1.1 503 with
/// the OpenAI error body.
static REFUSAL: std::sync::LazyLock<Vec<u8>> = std::sync::LazyLock::new(|| {
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

/// Client connections open now, over every server thread.
#[derive(Debug, Default)]
pub struct ConnectionSlots {
    open: AtomicUsize,
}

/// One open client connection; frees its slot on drop.
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

/// Serves `app` on `listener` under `state`'s client limits until the task is aborted.
pub async fn accept_loop(listener: TcpListener, app: Router, state: Arc<AppState>) {
    let limits: ClientLimits = state.client_limits;
    let mut builder = Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout);
    let builder = Arc::new(builder);
    loop {
        let (tcp, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                state.metrics.accept_errors.inc();
                if crate::log_limit::allow(&crate::log_limit::ACCEPT_ERRORS) {
                    tracing::warn!(error = %e, open = state.connections.open(),
                        "accept failed; pausing {} ms", ACCEPT_BACKOFF.as_millis());
                }
                tokio::time::sleep(ACCEPT_BACKOFF).await;
                continue;
            }
        };
        // Responses are written whole; Nagle would only delay the last segment of each.
        let _ = tcp.set_nodelay(true);
        let Some(slot) = state.connections.take(limits.max_connections) else {
            state.metrics.client_connections_refused.inc();
            if crate::log_limit::allow(&crate::log_limit::CONNECTIONS_REFUSED) {
                tracing::warn!(
                    max = limits.max_connections,
                    "client connection refused: too many open (--max-client-connections)"
                );
            }
            tokio::spawn(refuse(tcp));
            continue;
        };
        let svc = WithPeer {
            app: app.clone(),
            peer,
        };
        let builder = builder.clone();
        let state = state.clone();
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
                    count_header_timeout(&state);
                }
                return;
            }
            let conn = builder.serve_connection_with_upgrades(TokioIo::new(tcp), svc);
            if let Err(e) = conn.await {
                let timed_out = e
                    .downcast_ref::<hyper::Error>()
                    .is_some_and(hyper::Error::is_timeout);
                if timed_out {
                    count_header_timeout(&state);
                }
            }
        });
    }
}

/// Counts a connection closed for not sending its headers in time.
fn count_header_timeout(state: &AppState) {
    state
        .metrics
        .client_timeouts
        .with_label_values(&["header"])
        .inc();
}

/// The routes, with each request told its connection's source address (as
/// `axum::extract::ConnectInfo<SocketAddr>`: the trust boundary reads it, [`crate::trust`]).
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

/// Tells a connection over the limit so, and closes it (at most 1 s spent on it).
async fn refuse(mut tcp: TcpStream) {
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        tcp.write_all(&REFUSAL).await?;
        tcp.shutdown().await
    })
    .await;
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
        assert!(head.contains(&format!("content-length: {}", body.len())));
        let v: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(v["error"]["code"], 503);
    }
}
