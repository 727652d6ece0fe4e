//! The real `pdgate serve` binary as a user runs it: started with flags and environment,
//! its port read from its listening line, stopped with a signal.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A running `pdgate serve` process; killed when dropped.
pub struct Served {
    child: Child,
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    _files: Vec<TempPath>,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Served {
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
    let mut child = Command::new(env!("CARGO_BIN_EXE_pdgate"))
        .args(["serve", "--host", "127.0.0.1", "--port", "0"])
        .args(args)
        .envs(env.iter().copied())
        .env_remove("NAMESPACE")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("pdgate runs");
    let stderr = child.stderr.take().expect("stderr is piped");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(rest) = line.strip_prefix("pdgate serve listening on ") {
                let url = rest
                    .split_whitespace()
                    .next()
                    .unwrap_or_default()
                    .to_string();
                let _ = tx.send(url);
            }
        }
    });
    let url = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("pdgate serve listens within 30 s");
    Served {
        child,
        url,
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
