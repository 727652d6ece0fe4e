//! Issue 26's measurements: each hostile case against the real `pdgate epp` binary with its
//! default limits, its resident memory (and descriptors) printed. Run by hand:
//! `cargo test --release -p pdgate --test e2e e2e_epp_limits_measured -- --ignored --nocapture`.
//! The bounded outcome of each case is asserted by the other `e2e_epp_limits_*` modules.

use crate::support;

use envoy_types::pb::envoy::service::ext_proc::v3::{
    processing_request::Request, processing_response::Response, HttpBody, HttpHeaders,
    ProcessingResponse,
};
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use support::envoy::{self, envoy_headers, Stream};
use support::raw_ext_proc::{body_msg, connect, header_of, headers_msg, open, post, status_of};
use support::{metric, sim_config, spec};
use tokio::net::TcpStream;

/// The pid of the `pdgate epp` whose command line holds `marker`.
fn pid_of(marker: &str) -> u32 {
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        if String::from_utf8_lossy(&cmdline).contains(marker) {
            return pid;
        }
    }
    panic!("no process with {marker}")
}

/// Resident memory of `pid`, MB.
fn rss_mb(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    kb / 1024.0
}

fn fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

/// A fresh `pdgate epp` (default limits) over `worker`: its ext_proc and metrics addresses
/// and pid.
fn binary(worker: &str, case: &str) -> (support::process::Served, SocketAddr, SocketAddr, u32) {
    let marker = format!("issue26-{case}-{}", std::process::id());
    let p = support::process::epp(
        &[
            "--endpoint",
            worker,
            "--pool-namespace",
            &marker,
            "--secure-serving=false",
        ],
        &[],
    );
    let field = |name: &str| -> String {
        (p.url.split(", "))
            .find_map(|f| f.strip_prefix(name))
            .unwrap()
            .to_string()
    };
    let grpc = field("ext_proc ").parse().unwrap();
    let metrics = field("metrics http://")
        .trim_end_matches("/metrics")
        .parse()
        .unwrap();
    let pid = pid_of(&marker);
    (p, grpc, metrics, pid)
}

async fn settle() {
    tokio::time::sleep(Duration::from_millis(500)).await;
}

/// Each hostile case of issue 26 against `pdgate epp` with its default limits, one fresh
/// process each, printing its resident memory (and descriptors) before and after. Not an
/// assertion of memory (the allocator keeps what it freed); the bounded outcome of each case
/// is asserted by the other `e2e_epp_limits_*` modules.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement, run by hand"]
async fn issue_26_cases_measured_against_the_binary() {
    let worker = support::sim_worker(spec("d0", "decode", None), sim_config(50.0)).await;
    let addr = worker.addr().to_string();

    // (a) 150 request-headers messages of 3.9 MB on one stream.
    let (p, grpc, _, pid) = binary(&addr, "a");
    settle().await;
    let before = rss_mb(pid);
    let mut s = open(&mut connect(grpc).await).await.unwrap();
    let big = "v".repeat(3_900_000);
    for _ in 0..150 {
        s.send(headers_msg(post(&[("x-big", &big)]), false)).await;
    }
    let status = status_of(&s.immediate().await);
    settle().await;
    println!(
        "(a) 150 x 3.9 MB headers on one stream: answered {status}; RSS {before:.0} -> {:.0} MB",
        rss_mb(pid)
    );
    drop((s, p));

    // (b) 30,000 streams holding request headers, over 30 connections.
    let (p, grpc, _, pid) = binary(&addr, "b");
    settle().await;
    let before = rss_mb(pid);
    let (mut held, mut refused) = (Vec::new(), 0);
    for _ in 0..30 {
        let mut c = connect(grpc).await;
        for _ in 0..1_000 {
            match open(&mut c).await {
                Ok(s) => {
                    s.send(headers_msg(post(&[]), false)).await;
                    held.push(s);
                }
                Err(status) if status.code() == tonic::Code::ResourceExhausted => refused += 1,
                Err(status) => panic!("{status:?}"),
            }
        }
    }
    settle().await;
    println!(
        "(b) 30,000 streams: {} held, {refused} RESOURCE_EXHAUSTED; RSS {before:.0} -> {:.0} MB",
        held.len(),
        rss_mb(pid)
    );
    drop((held, p));

    // (c) 60 MB bodies held mid-way, one stream each: 8, then up to the budget.
    let (p, grpc, metrics, pid) = binary(&addr, "c");
    settle().await;
    let before = rss_mb(pid);
    let mut c = connect(grpc).await;
    let chunk = vec![b' '; 1 << 20];
    let held_bytes = || async move {
        let text = reqwest::get(format!("http://{metrics}/metrics"))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        metric(&text, "pdgate_inflight_body_bytes") as usize
    };
    let (mut bodies, mut at_8, mut refused_at) = (Vec::new(), 0.0, None);
    for i in 0..20 {
        let mut s = open(&mut c).await.unwrap();
        s.send(headers_msg(post(&[]), false)).await;
        for _ in 0..60 {
            s.send(body_msg(&chunk, false)).await;
        }
        // Either the body is leased whole, or the stream is answered (a refusal).
        let mut refused = None;
        for _ in 0..100 {
            if held_bytes().await == (i + 1) * 60 * chunk.len() {
                break;
            }
            let answer = tokio::time::timeout(Duration::from_millis(50), s.rx.message()).await;
            if let Ok(Ok(Some(ProcessingResponse {
                response: Some(Response::ImmediateResponse(r)),
                ..
            }))) = answer
            {
                refused = Some((i + 1, status_of(&r), header_of(&r, "retry-after")));
                break;
            }
        }
        if refused.is_some() {
            refused_at = refused;
            break;
        }
        bodies.push(s);
        if i == 7 {
            settle().await;
            at_8 = rss_mb(pid);
        }
    }
    settle().await;
    println!(
        "(c) 60 MiB bodies held: RSS {before:.0} -> {at_8:.0} MB with 8, {:.0} MB with {} \
         ({} bytes leased); body {refused_at:?} (number, status, retry-after)",
        rss_mb(pid),
        bodies.len(),
        held_bytes().await,
    );
    drop((bodies, p));

    // (d) an SSE line of 390 MB through the response path.
    let (p, grpc, _, pid) = binary(&addr, "d");
    settle().await;
    let before = rss_mb(pid);
    let mut s = open(&mut connect(grpc).await).await.unwrap();
    let body = serde_json::to_vec(&envoy::completion(0, 16, true)).unwrap();
    s.send(headers_msg(post(&[]), false)).await;
    s.send(body_msg(&body, true)).await;
    for _ in 0..2 {
        s.next(Duration::from_secs(5)).await.unwrap().unwrap();
    }
    s.send(Request::ResponseHeaders(HttpHeaders {
        headers: Some(envoy_headers(&[
            (":status", "200"),
            ("content-type", "text/event-stream"),
        ])),
        ..Default::default()
    }))
    .await;
    s.next(Duration::from_secs(5)).await.unwrap().unwrap();
    let piece = vec![b'x'; 60_000];
    let (mut sent, mut passed, mut peak) = (0usize, 0usize, before);
    while sent < 390_000_000 {
        s.send(Request::ResponseBody(HttpBody {
            body: piece.clone(),
            ..Default::default()
        }))
        .await;
        sent += piece.len();
        let answer = s.next(Duration::from_secs(5)).await.unwrap().unwrap();
        if let Some(Response::ResponseBody(r)) = answer.response {
            let m = r.response.unwrap().body_mutation.unwrap().mutation.unwrap();
            use envoy_types::pb::envoy::service::ext_proc::v3::body_mutation::Mutation;
            if let Mutation::StreamedResponse(b) = m {
                passed += b.body.len();
            }
        }
        if sent % 39_000_000 < piece.len() {
            peak = peak.max(rss_mb(pid));
        }
    }
    println!(
        "(d) one 390 MB SSE line: {passed} bytes passed back; RSS {before:.0} -> peak {peak:.0} MB"
    );
    drop((s, p));

    // (e) 1,100 silent connections to the metrics port.
    let (p, grpc, metrics, pid) = binary(&addr, "e");
    settle().await;
    let fds_before = fds(pid);
    let mut silent = Vec::new();
    for _ in 0..1_100 {
        if let Ok(t) = TcpStream::connect(metrics).await {
            silent.push(t);
        }
    }
    settle().await;
    let fds_held = fds(pid);
    let mut s = Stream::open(grpc).await;
    let start = Instant::now();
    let r = s.request("/v1/models", &[], b"", 1, None).await;
    println!(
        "(e) 1,100 silent metrics connections: EPP descriptors {fds_before} -> {fds_held}; \
         an ext_proc request answered in {:?} (immediate: {:?})",
        start.elapsed(),
        r.immediate
    );
    drop((silent, p));
}
