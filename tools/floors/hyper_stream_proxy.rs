//! Floor for `tools/stream-memory.sh`: a bare hyper streaming reverse proxy — hyper's own
//! HTTP/1 server and low-level client (`client::conn::http1`, one upstream connection per
//! stream), thread-per-core like pdgate (SO_REUSEPORT, current-thread runtimes, LocalSet),
//! mimalloc, the request body collected, the answer streamed through; no parsing, no
//! scheduling. Not part of the workspace: build it as the `main.rs` of a scratch crate with
//! hyper 1 (client, http1, server), hyper-util 0.1 (tokio), http-body-util, tokio (full), bytes
//! and mimalloc. Usage: `hyper_stream_proxy PORT BACKEND...` (round robin).
#[global_allocator]
static A: mimalloc::MiMalloc = mimalloc::MiMalloc;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper::{body::Incoming, Request};
use hyper_util::rt::TokioIo;
use std::cell::{Cell, RefCell};
use std::rc::Rc;

struct Pool {
    backends: Vec<String>,
    idle: Vec<RefCell<Vec<SendRequest<Full<Bytes>>>>>,
    rr: Cell<usize>,
}

async fn sender(pool: &Pool, i: usize) -> SendRequest<Full<Bytes>> {
    while let Some(mut s) = pool.idle[i].borrow_mut().pop() {
        if s.ready().await.is_ok() {
            return s;
        }
    }
    let tcp = tokio::net::TcpStream::connect(&pool.backends[i]).await.unwrap();
    tcp.set_nodelay(true).unwrap();
    let (s, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp)).await.unwrap();
    tokio::task::spawn_local(async move {
        let _ = conn.await;
    });
    s
}

fn main() {
    let port: u16 = std::env::args().nth(1).unwrap().parse().unwrap();
    let backends: Vec<String> = std::env::args().skip(2).collect();
    let mut hs = vec![];
    for _ in 0..2 {
        let backends = backends.clone();
        hs.push(std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            let local = tokio::task::LocalSet::new();
            local.block_on(&rt, async move {
                let s = tokio::net::TcpSocket::new_v4().unwrap();
                s.set_reuseport(true).unwrap();
                s.bind(format!("127.0.0.1:{port}").parse().unwrap()).unwrap();
                let l = s.listen(1024).unwrap();
                let pool = Rc::new(Pool {
                    idle: backends.iter().map(|_| RefCell::new(Vec::new())).collect(),
                    backends,
                    rr: Cell::new(0),
                });
                loop {
                    let (tcp, _) = l.accept().await.unwrap();
                    tcp.set_nodelay(true).unwrap();
                    let pool = pool.clone();
                    tokio::task::spawn_local(async move {
                        let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
                            let pool = pool.clone();
                            async move {
                                let (parts, body) = req.into_parts();
                                let body = body.collect().await?.to_bytes();
                                let i = pool.rr.get() % pool.backends.len();
                                pool.rr.set(i + 1);
                                let mut up = Request::builder().method(parts.method).uri(parts.uri.path());
                                for (k, v) in parts.headers.iter() {
                                    up = up.header(k, v);
                                }
                                let mut s = sender(&pool, i).await;
                                let _ = &pool.idle;
                                let resp = s.send_request(up.body(Full::new(body)).unwrap()).await?;
                                // Streamed through; the connection is not pooled (one per stream).
                                Ok::<_, hyper::Error>(resp)
                            }
                        });
                        let _ = hyper::server::conn::http1::Builder::new()
                            .serve_connection(TokioIo::new(tcp), svc)
                            .await;
                    });
                }
            });
        }));
    }
    for h in hs {
        h.join().unwrap();
    }
}
