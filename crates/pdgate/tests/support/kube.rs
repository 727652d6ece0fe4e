//! Kubernetes discovery helpers: pods for the stand-in API server
//! (`pdgate_sim::kube_api::KubeApi`) and the real `pdgate serve` binary run against it
//! through a kubeconfig, as a user runs it.

use pdgate_sim::kube_api::KubeApi;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A running `pdgate serve` process; killed when dropped.
pub struct Served {
    child: Child,
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    _kubeconfig: tempfile_path::TempPath,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `pdgate serve --host 127.0.0.1 --port 0 ARGS…` with `KUBECONFIG` naming `api`
/// (namespace `namespace`) and waits for its listening line (at most 30 s).
pub fn serve(api: &KubeApi, namespace: &str, args: &[&str]) -> Served {
    let kubeconfig = tempfile_path::TempPath::write("kubeconfig", &api.kubeconfig(namespace));
    let mut child = Command::new(env!("CARGO_BIN_EXE_pdgate"))
        .args(["serve", "--host", "127.0.0.1", "--port", "0"])
        .args(args)
        .env("KUBECONFIG", kubeconfig.path())
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
        _kubeconfig: kubeconfig,
    }
}

/// A file under the system temporary directory, removed when dropped.
mod tempfile_path {
    use std::path::{Path, PathBuf};

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
