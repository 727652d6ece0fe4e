//! Floor for `tools/throughput-ab.sh` and `../shared/tools/proxy-overhead.sh`: a bare hyper
//! reverse proxy on hyper-util's pooled client (`client::legacy`, the client pdgate uses),
//! thread-per-core like pdgate (SO_REUSEPORT, two current-thread runtimes, one client pool
//! each), mimalloc, the request body collected then forwarded, round robin over the backends;
//! no parsing, no scheduling, no metrics. Not part of the workspace: build it as the `main.rs`
//! of a scratch crate with hyper 1 (client, http1, server), hyper-util 0.1 (client-legacy,
//! http1, tokio, server), http-body-util, tokio (full), bytes and mimalloc.
//! Usage: `hyper_proxy PORT BACKEND...`.
#[global_allocator]
static A: mimalloc::MiMalloc = mimalloc::MiMalloc;
use http_body_util::{BodyExt, Full};
use hyper::{body::Incoming, Request, Response};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::{TokioExecutor, TokioIo};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
static RR: AtomicUsize = AtomicUsize::new(0);
fn main() {
    let port: u16 = std::env::args().nth(1).unwrap().parse().unwrap();
    let backends: Arc<Vec<String>> = Arc::new(std::env::args().skip(2).collect());
    let mut hs = vec![];
    for _ in 0..2 {
        let backends = backends.clone();
        hs.push(std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            rt.block_on(async move {
                let s = tokio::net::TcpSocket::new_v4().unwrap();
                s.set_reuseport(true).unwrap();
                s.bind(format!("127.0.0.1:{port}").parse().unwrap()).unwrap();
                let l = s.listen(1024).unwrap();
                let mut c = HttpConnector::new();
                c.set_nodelay(true);
                let client: Client<_, Full<bytes::Bytes>> = Client::builder(TokioExecutor::new()).pool_max_idle_per_host(256).build(c);
                loop {
                    let (tcp, _) = l.accept().await.unwrap();
                    tcp.set_nodelay(true).unwrap();
                    let client = client.clone();
                    let backends = backends.clone();
                    tokio::spawn(async move {
                        let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
                            let client = client.clone();
                            let backends = backends.clone();
                            async move {
                                let (parts, body) = req.into_parts();
                                let body = body.collect().await?.to_bytes();
                                let b = &backends[RR.fetch_add(1, Ordering::Relaxed) % backends.len()];
                                let uri = format!("http://{b}{}", parts.uri.path());
                                let mut up = Request::builder().method(parts.method).uri(uri);
                                for (k, v) in parts.headers.iter() { if k != "host" { up = up.header(k, v); } }
                                let resp = client.request(up.body(Full::new(body)).unwrap()).await.unwrap();
                                let (p, b) = resp.into_parts();
                                let b = b.collect().await?.to_bytes();
                                Ok::<_, hyper::Error>(Response::from_parts(p, Full::new(b)))
                            }
                        });
                        let _ = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(tcp), svc).await;
                    });
                }
            });
        }));
    }
    for h in hs { h.join().unwrap(); }
}
