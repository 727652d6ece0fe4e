//! Restart safety of the real binary (issue 27 item 1): a router stopped with idle keep-alive
//! connections leaves them in TIME-WAIT on its port, and its successor binds that port at once
//! (`SO_REUSEADDR`), while a second live router on the port is still refused naming the
//! address. `serve`'s main port and each of `epp`'s three ports.

use crate::support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};
use support::process::{start, Served};
use support::{body, send, sim_config, sim_worker, spec};

/// TCP connections in TIME-WAIT whose local port is `port` (`/proc/net/tcp`, state 06).
fn time_wait_on(port: u16) -> usize {
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap_or_default();
    let local = format!(":{port:04X}");
    (table.lines().skip(1))
        .filter(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.len() > 3 && f[1].ends_with(&local) && f[3] == "06"
        })
        .count()
}

/// `n` keep-alive HTTP/1.1 connections to `addr`, each after one answered `GET path` (a short
/// answer, read whole: a socket closed with unread data resets instead of closing).
fn idle_connections(addr: &str, path: &str, n: usize) -> Vec<TcpStream> {
    (0..n)
        .map(|_| {
            let mut c = TcpStream::connect(addr).unwrap();
            c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            write!(c, "GET {path} HTTP/1.1\r\nhost: x\r\n\r\n").unwrap();
            let mut buf = [0u8; 4096];
            let n = c.read(&mut buf).unwrap();
            assert!(buf[..n].starts_with(b"HTTP/1.1 "), "an answer on {addr}");
            c
        })
        .collect()
}

/// Stops `served` with SIGTERM, holding `conns` until it exited (its side closes them
/// first, so they go to TIME-WAIT on its port), then closes them.
fn stop_with_idle(mut served: Served, conns: Vec<TcpStream>) {
    served.terminate();
    assert_eq!(served.wait_exit(Duration::from_secs(15)), Some(0));
    drop(conns);
    std::thread::sleep(Duration::from_millis(100));
}

/// Runs the binary to its end (it fails at start), within 30 s: exit code and stderr.
fn run_to_end(args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_pdgate"))
        .args(args)
        .env_remove("NAMESPACE")
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_is_replaced_on_its_port_over_time_wait_and_a_second_live_router_is_refused() {
    let worker = sim_worker(spec("d0", "decode", None), sim_config(10.0)).await;
    let endpoint = worker.addr().to_string();
    let serve_on = |port: &str| {
        let head = ["serve", "--host", "127.0.0.1", "--port", port];
        let mut s = start(
            &head,
            &["--endpoint", &endpoint],
            &[],
            vec![],
            "pdgate serve listening on ",
        );
        s.url = s.url.split_whitespace().next().unwrap().to_string();
        s
    };
    let first = serve_on("0");
    let url = first.url.clone();
    let addr = url.trim_start_matches("http://").to_string();
    let port = addr.rsplit(':').next().unwrap().to_string();
    assert_eq!(send(&url, &[], &body(1, 16, 2)).await.status, 200);
    let conns = idle_connections(&addr, "/health", 20);
    stop_with_idle(first, conns);
    let waiting = time_wait_on(port.parse().unwrap());
    assert!(
        waiting >= 20,
        "{waiting} connections in TIME-WAIT on {port}"
    );

    let started = Instant::now();
    let second = serve_on(&port);
    let took = started.elapsed();
    eprintln!("successor listening {took:?} after start, over {waiting} TIME-WAIT sockets");
    assert_eq!(second.url, url);
    assert_eq!(send(&url, &[], &body(1, 16, 2)).await.status, 200);

    // A second live router on the port is refused at once, naming the address.
    let (code, stderr) = run_to_end(&[
        "serve",
        "--host",
        "127.0.0.1",
        "--port",
        &port,
        "--endpoint",
        &endpoint,
    ]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("binding {addr}")) && stderr.contains("Address already in use"),
        "{stderr}"
    );
    assert_eq!(send(&url, &[], &body(1, 16, 2)).await.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn epp_is_replaced_on_its_ports_over_time_wait_and_a_second_live_epp_is_refused() {
    let worker = sim_worker(spec("d0", "decode", None), sim_config(10.0)).await;
    let endpoint = worker.addr().to_string();
    // Three free ports, found by binding port 0 and letting go.
    let ports: Vec<String> = (0..3)
        .map(|_| {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port().to_string()
        })
        .collect();
    let args = [
        "epp",
        "--host",
        "127.0.0.1",
        "--grpc-port",
        &ports[0],
        "--grpc-health-port",
        &ports[1],
        "--metrics-port",
        &ports[2],
        "--endpoint",
        &endpoint,
    ];
    let epp_on = || start(&args, &[], &[], vec![], "pdgate epp listening: ");
    let first = epp_on();
    let conns = idle_connections(&format!("127.0.0.1:{}", ports[2]), "/no-such-path", 10);
    // The gRPC ports: HTTP/2 connections that made one call, idle when the EPP stops.
    let mut channels = Vec::new();
    for p in &ports[..2] {
        let channel = tonic::transport::Channel::from_shared(format!("http://127.0.0.1:{p}"))
            .unwrap()
            .connect()
            .await
            .unwrap();
        let mut health = tonic_health::pb::health_client::HealthClient::new(channel.clone());
        let answer = health
            .check(tonic_health::pb::HealthCheckRequest::default())
            .await;
        // The health port serves it; the ext_proc port answers the call all the same.
        assert!(p != &ports[1] || answer.is_ok(), "{answer:?}");
        channels.push(channel);
    }
    stop_with_idle(first, conns);
    drop(channels);
    // The metrics port's connections were closed by the EPP's side: TIME-WAIT there. (On
    // the gRPC ports the clients close first on the EPP's GOAWAY, so TIME-WAIT stays on the
    // client's side; the successor binds them all the same.)
    let waiting = time_wait_on(ports[2].parse().unwrap());
    assert!(waiting >= 10, "TIME-WAIT on {}: {waiting}", ports[2]);
    let second = epp_on();
    assert!(
        second
            .url
            .contains(&format!("metrics http://127.0.0.1:{}/metrics", ports[2])),
        "{}",
        second.url
    );
    let (code, stderr) = run_to_end(&args);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("binding 127.0.0.1:{}", ports[0]))
            && stderr.contains("Address already in use"),
        "{stderr}"
    );
    drop(second);
}
