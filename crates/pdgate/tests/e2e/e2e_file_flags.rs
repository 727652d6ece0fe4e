//! Issue 26, "bounds everywhere else", through the real binary: every flag or config key that
//! names a file refuses special files at once (`/dev/zero` would never end, a FIFO would block
//! the start for good), and a config nested deeper than
//! `pdgate_fleet::file_read::MAX_NESTING` is refused before the YAML parser (whose time grows
//! with the square of the depth: 100,000 levels took over 20 s) sees it. Each error names the
//! flag (or key) and the path; each run is bounded, so a hang fails the test instead of
//! stalling it.

use crate::support::process::TempPath;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long a refused start may take: the checks are immediate; this bounds a regression
/// (a blocking FIFO, a quadratic parse) well under the old 20 s.
const LIMIT: Duration = Duration::from_secs(5);

/// What one run of the binary gave.
struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
    took: Duration,
}

/// Runs `pdgate ARGS…` (no `RUST_LOG`, no `NAMESPACE`, stdin closed) and waits at most `limit`;
/// a process still running then is killed and the test fails.
fn run(args: &[&str], limit: Duration) -> Run {
    let child = Command::new(env!("CARGO_BIN_EXE_pdgate"))
        .args(args)
        .env_remove("RUST_LOG")
        .env_remove("NAMESPACE")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("pdgate runs");
    let pid = child.id();
    let start = Instant::now();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(limit) {
        Ok(out) => {
            let out = out.expect("pdgate's output is read");
            Run {
                code: out.status.code(),
                stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
                stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
                took: start.elapsed(),
            }
        }
        Err(_) => {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
            panic!("pdgate {args:?} still running after {limit:?}");
        }
    }
}

/// Asserts `r` failed with exit status 1 within [`LIMIT`], printing `want` on stderr.
fn assert_refused(r: &Run, want: &str) {
    assert_eq!(r.code, Some(1), "{}", r.stderr);
    assert!(r.stderr.contains(want), "want {want:?} in:\n{}", r.stderr);
    assert!(r.took < LIMIT, "took {:?}", r.took);
    assert!(!r.stderr.contains("panicked"), "{}", r.stderr);
}

/// A FIFO in a fresh directory under the temp dir; both removed on drop.
struct Fifo(std::path::PathBuf);

impl Fifo {
    fn new(tag: &str) -> Fifo {
        let dir = std::env::temp_dir().join(format!("pdgate-fifo-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("config.yaml");
        let made = Command::new("mkfifo").arg(&path).status().unwrap();
        assert!(made.success(), "mkfifo {}", path.display());
        Fifo(path)
    }

    fn path(&self) -> &str {
        self.0.to_str().unwrap()
    }
}

impl Drop for Fifo {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(self.0.parent().unwrap());
    }
}

/// `serve` flags that would start a router (so only the file under test can fail it).
const SERVE: &[&str] = &["serve", "--host", "127.0.0.1", "--port", "0"];

fn serve(extra: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = SERVE.iter().map(|s| s.to_string()).collect();
    v.extend(extra.iter().map(|s| s.to_string()));
    v
}

/// `serve --coordinator-config PATH` (the file replaces `--host`/`--port`, which may not be
/// given with it).
fn coordinator(path: &str) -> Vec<String> {
    vec!["serve".into(), "--coordinator-config".into(), path.into()]
}

fn refs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

const EPP: &[&str] = &[
    "epp",
    "--host",
    "127.0.0.1",
    "--grpc-port",
    "0",
    "--grpc-health-port",
    "0",
    "--metrics-port",
    "0",
    "--endpoint",
    "127.0.0.1:9",
];

fn epp(extra: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = EPP.iter().map(|s| s.to_string()).collect();
    v.extend(extra.iter().map(|s| s.to_string()));
    v
}

#[test]
fn coordinator_config_dev_zero_is_refused_naming_the_flag() {
    let r = run(&refs(&coordinator("/dev/zero")), LIMIT);
    assert_refused(
        &r,
        "error: --coordinator-config: /dev/zero: cannot read the file: not a regular file\n",
    );
    // `--print-config` reads it the same way.
    let mut print = coordinator("/dev/zero");
    print.push("--print-config".into());
    let r = run(&refs(&print), LIMIT);
    assert_refused(
        &r,
        "error: --coordinator-config: /dev/zero: cannot read the file: not a regular file\n",
    );
    assert_eq!(r.stdout, "");
}

#[test]
fn a_fifo_as_any_config_flag_fails_at_once_instead_of_waiting_for_a_writer() {
    let fifo = Fifo::new("config");
    let p = fifo.path();
    let want = format!("{p}: cannot read the file: not a regular file\n");
    let r = run(&refs(&coordinator(p)), LIMIT);
    assert_refused(&r, &format!("error: --coordinator-config: {want}"));
    let r = run(
        &refs(&serve(&["--config", p, "--endpoint", "127.0.0.1:9"])),
        LIMIT,
    );
    assert_refused(&r, &format!("error: --config: {want}"));
    let r = run(&refs(&epp(&["--config-file", p])), LIMIT);
    assert_refused(&r, &format!("error: --config-file: {want}"));
    let r = run(&["check-config", p], LIMIT);
    assert_refused(&r, &want);
    assert!(
        r.stderr.ends_with(&format!("{want}1 error\n")),
        "{}",
        r.stderr
    );
    assert_eq!(r.stdout, "");
}

#[test]
fn an_endpoints_file_that_is_not_a_regular_file_is_refused_naming_the_flag() {
    let fifo = Fifo::new("endpoints");
    for p in ["/dev/zero", fifo.path()] {
        let want = format!("error: --endpoints: {p}: cannot read the file: not a regular file\n");
        let r = run(&refs(&serve(&["--endpoints", p])), LIMIT);
        assert_refused(&r, &want);
        let mut args: Vec<String> = EPP.iter().map(|s| s.to_string()).collect();
        let at = args.iter().position(|a| a == "--endpoint").unwrap();
        args.splice(at..at + 2, ["--endpoints".to_string(), p.to_string()]);
        let r = run(&refs(&args), LIMIT);
        assert_refused(&r, &want);
    }
}

#[test]
fn check_config_refuses_dev_zero_as_one_error() {
    let r = run(&["check-config", "/dev/zero"], LIMIT);
    assert_refused(&r, "");
    assert_eq!(
        r.stderr,
        "/dev/zero: cannot read the file: not a regular file\n1 error\n"
    );
    assert_eq!(r.stdout, "");
}

/// An EndpointPickerConfig whose line 4 opens 100,000 nested flow mappings.
fn deep_scheduler_config() -> TempPath {
    let text = format!(
        "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: {}\n",
        "{a: ".repeat(100_000)
    );
    TempPath::write("deep-epp-config", &text)
}

#[test]
fn a_config_nested_100k_deep_is_refused_fast_with_its_line() {
    let f = deep_scheduler_config();
    let p = f.path().to_str().unwrap();
    let want = format!("{p}: line 4: nested deeper than 64 levels\n");
    let r = run(&refs(&epp(&["--config-file", p])), LIMIT);
    assert_refused(&r, &format!("error: --config-file: {want}"));
    let r = run(
        &refs(&serve(&["--config", p, "--endpoint", "127.0.0.1:9"])),
        LIMIT,
    );
    assert_refused(&r, &format!("error: --config: {want}"));
    let r = run(&["check-config", p], LIMIT);
    assert_refused(&r, &want);
    assert_eq!(r.stderr, format!("{want}1 error\n"));
    assert_eq!(r.stdout, "");
}

#[test]
fn a_coordinator_file_nested_100k_deep_is_refused_fast_with_its_line() {
    // Read twice at start: for its `log_level`, then to run it; both must stay fast.
    let text = format!(
        "log_level: 2\ngateway:\n  address: http://127.0.0.1:9\npipeline:\n  steps: {}\n",
        "[".repeat(50_000) + &"{a: ".repeat(50_000)
    );
    let f = TempPath::write("deep-coordinator", &text);
    let p = f.path().to_str().unwrap();
    let want = format!("{p}: line 5: nested deeper than 64 levels\n");
    let r = run(&refs(&coordinator(p)), LIMIT);
    assert_refused(&r, &format!("error: --coordinator-config: {want}"));
    let r = run(&["check-config", p], LIMIT);
    assert_refused(&r, &want);
    assert_eq!(r.stderr, format!("{want}1 error\n"));
}

/// An EndpointPickerConfig whose `token-producer` reads a local tokenizer at `tokenizer`.
fn tokenizer_config(tokenizer: &str) -> TempPath {
    let text = format!(
        "apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: token-producer
  parameters:
    modelName: m
    local:
      tokenizer: {tokenizer}
- type: max-score-picker
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: max-score-picker
"
    );
    TempPath::write("tokenizer-config", &text)
}

#[test]
fn a_tokenizer_path_to_dev_zero_or_a_fifo_is_refused_naming_the_key() {
    let f = tokenizer_config("/dev/zero");
    let p = f.path().to_str().unwrap();
    let want = "token-producer: local.tokenizer: /dev/zero: not a regular file\n";
    let r = run(
        &refs(&serve(&["--config", p, "--endpoint", "127.0.0.1:9"])),
        LIMIT,
    );
    assert_refused(&r, &format!("error: {want}"));
    let r = run(&refs(&epp(&["--config-file", p])), LIMIT);
    assert_refused(&r, &format!("error: {want}"));
    // `check-config` checks the config, not the machine it runs on (a config is often checked
    // away from the model files): it does not open the tokenizer, so it neither reads
    // /dev/zero nor waits, and accepts the config.
    let r = run(&["check-config", p], LIMIT);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert!(r.stdout.contains("tokenizer: /dev/zero"), "{}", r.stdout);
    assert!(r.took < LIMIT, "took {:?}", r.took);
    let fifo = Fifo::new("tokenizer");
    let f = tokenizer_config(fifo.path());
    let p = f.path().to_str().unwrap();
    let r = run(
        &refs(&serve(&["--config", p, "--endpoint", "127.0.0.1:9"])),
        LIMIT,
    );
    assert_refused(
        &r,
        &format!(
            "error: token-producer: local.tokenizer: {}: not a regular file\n",
            fifo.path()
        ),
    );
}
