//! Connections of the EPP's gRPC ports (ext_proc, health), let in under limits before tonic
//! sees them (issue 26):
//!
//! - each holds a connection slot ([`pdgate_core::front::Door`]): over the port's limit, a
//!   connection is closed at once (and counted, `pdgate_client_connections_refused_total`);
//! - it must send the whole HTTP/2 client preface within the header timeout
//!   (`--client-header-timeout-ms`), else it is closed (counted,
//!   `pdgate_client_timeouts_total{kind="header"}`): tonic's HTTP/2 handshake has no timeout
//!   of its own, so a half-open connection would hold its slot and descriptor forever;
//!   anything but the preface (an HTTP/1 request, noise) is closed at once;
//! - after the handshake, HTTP/2 keepalive pings (set on the tonic server) close a
//!   connection whose peer vanished.
//!
//! The preface read is given back to tonic first ([`GuardedIo`]), so the handshake is tonic's
//! as before.

use pdgate_core::front::{Accepted, Door, Slot};
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

/// The HTTP/2 client connection preface (RFC 9113 §3.4).
pub const H2_PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Connections whose preface came, queued for tonic's accept loop.
const READY_QUEUE: usize = 64;

/// A connection let in: the preface already read (replayed first), then the socket; its
/// slot is freed when tonic drops it.
pub struct GuardedIo {
    replayed: usize,
    tcp: TcpStream,
    _slot: Slot,
}

impl AsyncRead for GuardedIo {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.replayed < H2_PREFACE.len() {
            let rest = &H2_PREFACE[self.replayed..];
            let n = rest.len().min(buf.remaining());
            buf.put_slice(&rest[..n]);
            self.replayed += n;
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.tcp).poll_read(cx, buf)
    }
}

impl AsyncWrite for GuardedIo {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.tcp).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tcp).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tcp).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.tcp).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.tcp.is_write_vectored()
    }
}

impl tonic::transport::server::Connected for GuardedIo {
    type ConnectInfo = tonic::transport::server::TcpConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.tcp.connect_info()
    }
}

/// The connections `door` lets in, for `tonic`'s `serve_with_incoming*`. Dropping the stream
/// (tonic does when it stops accepting) stops the accept loop and closes the port.
pub fn incoming(door: Door) -> Incoming {
    let (tx, rx) = mpsc::channel(READY_QUEUE);
    // The handshakes hold no reference to the door: dropping the stream closes the port at
    // once, whatever handshakes are still under way.
    let timeout = door.limits.header_timeout;
    let metrics = door.metrics().clone();
    let task = tokio::spawn(async move {
        loop {
            let accepted = door.accept().await;
            let (tx, metrics) = (tx.clone(), metrics.clone());
            tokio::spawn(async move {
                if let Some(io) = handshake(accepted, timeout, &metrics).await {
                    let _ = tx.send(Ok(io)).await;
                }
            });
        }
    });
    Incoming {
        ready: ReceiverStream::new(rx),
        accept: task,
    }
}

/// Reads the preface within the header timeout.
async fn handshake(
    accepted: Accepted,
    timeout: std::time::Duration,
    metrics: &pdgate_core::metrics::Metrics,
) -> Option<GuardedIo> {
    let Accepted { mut tcp, slot, .. } = accepted;
    let mut preface = [0u8; 24];
    let read = tokio::time::timeout(timeout, tcp.read_exact(&mut preface));
    match read.await {
        Ok(Ok(_)) if &preface == H2_PREFACE => Some(GuardedIo {
            replayed: 0,
            tcp,
            _slot: slot,
        }),
        Ok(_) => None, // not HTTP/2, or closed: nothing to serve
        Err(_) => {
            pdgate_core::front::count_header_timeout(metrics);
            None
        }
    }
}

/// The stream of [`incoming`].
pub struct Incoming {
    ready: ReceiverStream<io::Result<GuardedIo>>,
    accept: tokio::task::JoinHandle<()>,
}

impl futures_util::Stream for Incoming {
    type Item = io::Result<GuardedIo>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        Pin::new(&mut self.ready).poll_next(cx)
    }
}

impl Drop for Incoming {
    fn drop(&mut self) {
        self.accept.abort();
    }
}
