//! Heap allocations per aggregated request (issue 9 item 7): a router started in-process
//! (`serve_on`, the built-in config, one endpoint without a role label) in front of a canned
//! fake engine on 127.0.0.1, driven by one keep-alive client sending `POST /v1/completions`
//! with a ~2 KB prompt, sequentially. A counting global allocator counts the calls made on the
//! router's runtime threads only (the fake engine and the client run on plain threads that are
//! not counted); the process-wide count is printed too.
//! Run: `cargo bench -p pdgate-server --bench allocs [-- N [WARMUP]]` (defaults 2000, 200).
//! Builds against any `ServeOptions` that has `new(scheduler, endpoints)` and
//! `scrape_interval`.

use pdgate_scheduler::{Endpoint, Scheduler, DEFAULT_CONFIG_YAML};
use pdgate_server::{serve_on, EndpointSource, ServeOptions};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

struct Counting;

/// Allocation calls (alloc, alloc_zeroed, realloc) and bytes asked for on router threads.
static ROUTER_ALLOCS: AtomicU64 = AtomicU64::new(0);
static ROUTER_BYTES: AtomicU64 = AtomicU64::new(0);
/// Allocation calls on every thread.
static ALL_ALLOCS: AtomicU64 = AtomicU64::new(0);

thread_local! {
    static ROUTER_THREAD: Cell<bool> = const { Cell::new(false) };
}

fn count(size: usize) {
    ALL_ALLOCS.fetch_add(1, Relaxed);
    if ROUTER_THREAD.try_with(Cell::get).unwrap_or(false) {
        ROUTER_ALLOCS.fetch_add(1, Relaxed);
        ROUTER_BYTES.fetch_add(size as u64, Relaxed);
    }
}

// SAFETY: every call is forwarded to `System` unchanged; counting touches only atomics and a
// const-initialised thread-local without a destructor.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(layout.size());
        // SAFETY: same contract as ours.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count(layout.size());
        // SAFETY: same contract as ours.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count(new_size);
        // SAFETY: same contract as ours.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const MODELS: &str = r#"{"object":"list","data":[{"id":"m","object":"model","owned_by":"bench"}]}"#;
const METRICS: &str = "vllm:num_requests_running{engine=\"0\",model_name=\"m\"} 0\n\
vllm:num_requests_waiting{engine=\"0\",model_name=\"m\"} 0\n\
vllm:kv_cache_usage_perc{engine=\"0\",model_name=\"m\"} 0\n";
const COMPLETION: &str = r#"{"id":"cmpl-1","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":" ok","finish_reason":"length","logprobs":null}],"usage":{"prompt_tokens":500,"completion_tokens":1,"total_tokens":501}}"#;

/// Reads one HTTP/1.1 message head; `None` at end of stream. Returns (start line,
/// content-length, chunked).
fn read_head(r: &mut impl BufRead) -> Option<(String, usize, bool)> {
    let mut start = String::new();
    if r.read_line(&mut start).ok()? == 0 {
        return None;
    }
    let (mut len, mut chunked) = (0, false);
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).ok()? == 0 {
            return None;
        }
        let line = line.trim_end();
        if line.is_empty() {
            return Some((start, len, chunked));
        }
        let (name, value) = line.split_once(':')?;
        let value = value.trim();
        if name.eq_ignore_ascii_case("content-length") {
            len = value.parse().ok()?;
        } else if name.eq_ignore_ascii_case("transfer-encoding") && value.contains("chunked") {
            chunked = true;
        }
    }
}

/// Reads a body of `len` bytes or, when `chunked`, the whole chunked body.
fn read_body(r: &mut impl BufRead, len: usize, chunked: bool) -> Option<Vec<u8>> {
    let mut out = vec![0; len];
    if !chunked {
        r.read_exact(&mut out).ok()?;
        return Some(out);
    }
    loop {
        let mut size = String::new();
        r.read_line(&mut size).ok()?;
        let n = usize::from_str_radix(size.trim().split(';').next()?, 16).ok()?;
        let at = out.len();
        out.resize(at + n, 0);
        r.read_exact(&mut out[at..]).ok()?;
        let mut crlf = [0; 2];
        r.read_exact(&mut crlf).ok()?;
        if n == 0 {
            return Some(out);
        }
    }
}

/// A fake engine on plain threads: canned `/v1/models`, `/metrics`, completion.
fn fake_engine() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            std::thread::spawn(move || {
                conn.set_nodelay(true).ok();
                let mut w = conn.try_clone().unwrap();
                let mut r = BufReader::new(conn);
                while let Some((start, len, chunked)) = read_head(&mut r) {
                    if read_body(&mut r, len, chunked).is_none() {
                        return;
                    }
                    let (ctype, body) = if start.starts_with("GET /v1/models") {
                        ("application/json", MODELS)
                    } else if start.starts_with("GET /metrics") {
                        ("text/plain", METRICS)
                    } else {
                        ("application/json", COMPLETION)
                    };
                    let msg = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: {ctype}\r\ncontent-length: {}\r\n\r\n{body}",
                        body.len()
                    );
                    if w.write_all(msg.as_bytes()).is_err() {
                        return;
                    }
                }
            });
        }
    });
    addr
}

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let n = args.first().copied().unwrap_or(2000);
    let warmup = args.get(1).copied().unwrap_or(200);

    let engine = fake_engine();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .on_thread_start(|| ROUTER_THREAD.with(|c| c.set(true)))
        .build()
        .unwrap();
    let server = rt.block_on(async {
        let scheduler = Scheduler::from_yaml(DEFAULT_CONFIG_YAML, "built-in").unwrap();
        let endpoint = Endpoint::new("e0".to_string(), engine.clone(), BTreeMap::new());
        let mut opts =
            ServeOptions::new(Arc::new(scheduler), EndpointSource::Static(vec![endpoint]));
        // One scrape at start (models), then none during the run.
        opts.scrape_interval = Duration::from_secs(3600);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        serve_on(listener, opts).await.unwrap()
    });
    let deadline = Instant::now() + Duration::from_secs(5);
    while !server
        .state
        .registry
        .snapshot()
        .endpoints
        .iter()
        .all(|e| e.load.models().is_some())
    {
        assert!(
            Instant::now() < deadline,
            "the router never scraped the fake engine"
        );
        std::thread::sleep(Duration::from_millis(10));
    }

    let words: Vec<String> = (0..300).map(|i| format!("word{i}")).collect();
    let prompt = words.join(" ");
    let conn = TcpStream::connect(server.addr).unwrap();
    conn.set_nodelay(true).unwrap();
    let mut w = conn.try_clone().unwrap();
    let mut r = BufReader::new(conn);
    let mut mode = String::new();
    let mut send = |i: usize| {
        let body = format!(r#"{{"model":"m","prompt":"req{i} {prompt}","max_tokens":1}}"#);
        let msg = format!(
            "POST /v1/completions HTTP/1.1\r\nhost: {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
            server.addr,
            body.len()
        );
        w.write_all(msg.as_bytes()).unwrap();
        let (start, len, chunked) = read_head(&mut r).expect("response head");
        assert!(start.starts_with("HTTP/1.1 200"), "{start}");
        read_body(&mut r, len, chunked).expect("response body");
    };
    // The response head is checked for pd-mode once, outside the count, with a second client.
    {
        let c = TcpStream::connect(server.addr).unwrap();
        let mut cw = c.try_clone().unwrap();
        let body = format!(r#"{{"model":"m","prompt":"probe {prompt}","max_tokens":1}}"#);
        write!(
            cw,
            "POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let mut text = String::new();
        BufReader::new(c).read_to_string(&mut text).ok();
        if let Some(line) = text
            .lines()
            .find(|l| l.to_ascii_lowercase().starts_with("x-pdgate-pd-mode:"))
        {
            mode = line.split_once(':').unwrap().1.trim().to_string();
        }
    }
    for i in 0..warmup {
        send(i);
    }
    let (a0, b0, t0) = (
        ROUTER_ALLOCS.load(Relaxed),
        ROUTER_BYTES.load(Relaxed),
        ALL_ALLOCS.load(Relaxed),
    );
    let started = Instant::now();
    for i in warmup..warmup + n {
        send(i);
    }
    let elapsed = started.elapsed();
    let (a1, b1, t1) = (
        ROUTER_ALLOCS.load(Relaxed),
        ROUTER_BYTES.load(Relaxed),
        ALL_ALLOCS.load(Relaxed),
    );
    let per = |x: u64| x as f64 / n as f64;
    println!(
        "allocs: n={n} warmup={warmup} pd_mode={mode:?} router_allocs_per_request={:.1} \
         router_bytes_per_request={:.0} process_allocs_per_request={:.1} mean_latency_us={:.1}",
        per(a1 - a0),
        per(b1 - b0),
        per(t1 - t0),
        elapsed.as_secs_f64() * 1e6 / n as f64
    );
    drop(server);
    rt.shutdown_timeout(Duration::from_secs(1));
}
