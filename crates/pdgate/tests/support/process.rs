//! The real `pdgate` binary as a user runs it (`serve`, `epp`): started with flags and
//! environment, its addresses read from its listening line, stopped with a signal.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A running `pdgate` process; killed when dropped.
pub struct Served {
    child: Child,
    /// `serve`: `http://127.0.0.1:PORT`; `epp`: the rest of its listening line.
    pub url: String,
    log: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    _files: Vec<TempPath>,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Served {
    /// The stderr lines written so far, as written (log lines included).
    pub fn log(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }

    /// Sends SIGTERM (as Kubernetes stops a pod).
    pub fn terminate(&self) {
        let ok = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "kill -TERM {}", self.child.id());
    }

    /// Waits up to `limit` for the process to exit; its exit code (`None`: still running or
    /// killed by a signal).
    pub fn wait_exit(&mut self, limit: Duration) -> Option<i32> {
        let deadline = std::time::Instant::now() + limit;
        while std::time::Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status.code();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }
}

/// Starts `pdgate serve --host 127.0.0.1 --port 0 ARGS…` with the environment `env` (and
/// `NAMESPACE` unset), keeps `files` until it is dropped, and waits for its listening line
/// (at most 30 s).
pub fn serve(args: &[&str], env: &[(&str, &str)], files: Vec<TempPath>) -> Served {
    let head = ["serve", "--host", "127.0.0.1", "--port", "0"];
    let mut served = start(&head, args, env, files, "pdgate serve listening on ");
    served.url = served
        .url
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_string();
    served
}

/// Starts `pdgate epp` on 127.0.0.1 with every port 0 and `ARGS…`; `url` holds the rest of
/// its listening line (`ext_proc A, health B, metrics http://C/metrics`).
pub fn epp(args: &[&str], env: &[(&str, &str)]) -> Served {
    let head = [
        "epp",
        "--host",
        "127.0.0.1",
        "--grpc-port",
        "0",
        "--grpc-health-port",
        "0",
        "--metrics-port",
        "0",
    ];
    start(&head, args, env, Vec::new(), "pdgate epp listening: ")
}

/// Starts the binary with `head` then `args`, and waits for the stderr line starting with
/// `marker` (at most 30 s); `url` is the rest of that line.
pub fn start(
    head: &[&str],
    args: &[&str],
    env: &[(&str, &str)],
    files: Vec<TempPath>,
    marker: &'static str,
) -> Served {
    let mut child = Command::new(env!("CARGO_BIN_EXE_pdgate"))
        .args(head)
        .args(args)
        .envs(env.iter().copied())
        .env_remove("NAMESPACE")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("pdgate runs");
    let stderr = child.stderr.take().expect("stderr is piped");
    let (tx, rx) = std::sync::mpsc::channel();
    let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let lines = log.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(rest) = line.strip_prefix(marker) {
                let _ = tx.send(rest.to_string());
            }
            lines.lock().unwrap().push(line.clone());
            // Shown with the test's output when it fails.
            eprintln!("pdgate: {line}");
        }
    });
    let url = rx
        .recv_timeout(Duration::from_secs(30))
        .unwrap_or_else(|_| panic!("pdgate prints {marker:?} within 30 s"));
    Served {
        child,
        url,
        log,
        _files: files,
    }
}

pub use temp_path::TempPath;

/// A file under the system temporary directory, removed when dropped.
mod temp_path {
    use std::path::{Path, PathBuf};

    /// See the module doc.
    pub struct TempPath(PathBuf);

    impl TempPath {
        pub fn write(stem: &str, text: &str) -> TempPath {
            static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
            let n = N.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let path =
                std::env::temp_dir().join(format!("pdgate-{stem}-{}-{n}", std::process::id()));
            std::fs::write(&path, text).expect("the temporary file is written");
            TempPath(path)
        }

        pub fn path(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for TempPath {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }
}
