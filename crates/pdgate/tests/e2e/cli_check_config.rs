//! `pdgate check-config FILE` through the real binary: the effective config, or every error.

use std::path::PathBuf;
use std::process::{Command, Output};

/// Unsupported type on line 5, unknown parameter on line 8, a dangling pluginRef on line 16.
const THREE_FAULTS: &str = include_str!("../../../pdgate-scheduler/tests/data/three-faults.yaml");

/// A file under the temp dir, removed on drop.
struct TempFile(PathBuf);

impl TempFile {
    fn new(tag: &str, text: &str) -> TempFile {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let path = std::env::temp_dir().join(format!(
            "pdgate-check-config-{tag}-{}-{nanos}.yaml",
            std::process::id()
        ));
        std::fs::write(&path, text).unwrap();
        TempFile(path)
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn check_config(path: &std::path::Path) -> (Option<i32>, String, String) {
    let Output {
        status,
        stdout,
        stderr,
    } = Command::new(env!("CARGO_BIN_EXE_pdgate"))
        .env_remove("RUST_LOG")
        .arg("check-config")
        .arg(path)
        .output()
        .unwrap();
    (
        status.code(),
        String::from_utf8(stdout).unwrap(),
        String::from_utf8(stderr).unwrap(),
    )
}

#[test]
fn every_error_is_printed_with_its_line_and_the_exit_code_is_1() {
    let f = TempFile::new("three-faults", THREE_FAULTS);
    let (code, stdout, stderr) = check_config(&f.0);
    let p = f.0.display();
    assert_eq!(code, Some(1), "{stderr}");
    assert_eq!(stdout, "");
    let want = format!(
        "{p}: line 5: plugin `foo-scorer` (type `foo-scorer`): unsupported plugin type `foo-scorer`\n\
         {p}: line 8: plugin `queue-scorer` (type `queue-scorer`): parameters: unknown field `bogus`, \
         there are no fields\n\
         {p}: line 16: scheduling profile `default`: pluginRef `nothing` names no plugin\n\
         3 errors\n"
    );
    assert!(stderr.ends_with(&want), "{stderr}");
}

#[test]
fn a_single_error_says_1_error() {
    let f = TempFile::new(
        "one-fault",
        "plugins:\n- type: decode-filter\n- type: foo-scorer\n",
    );
    let (code, _, stderr) = check_config(&f.0);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.ends_with(&format!(
            "{}: line 3: plugin `foo-scorer` (type `foo-scorer`): unsupported plugin type `foo-scorer`\n\
             1 error\n",
            f.0.display()
        )),
        "{stderr}"
    );
}

#[test]
fn a_valid_config_prints_the_effective_config_and_exits_0() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/compat/llm-d/pd-epp-config.yaml"
    );
    let (code, stdout, stderr) = check_config(path.as_ref());
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.starts_with("apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\n"));
    assert!(
        stdout.contains(
            "- name: approx-prefix-cache-producer\n  type: approx-prefix-cache-producer\n"
        ),
        "{stdout}"
    );
    // Injected default parameter.
    assert!(stdout.contains("    blockSizeTokens: 16\n"), "{stdout}");
    assert!(
        stdout.contains("- pluginRef: max-score-picker\n"),
        "{stdout}"
    );
}

#[test]
fn the_llm_d_gpu_sample_is_refused_for_its_dcgm_plugins_with_the_reason() {
    // llm-d's own sample, unchanged: the DCGM source and extractor read GPU hardware
    // counters; nothing else in the file is reported (no cascade through the dataLayer entry
    // or the attribute filter naming them). Same lines as `Scheduler::from_yaml`
    // (pdgate-scheduler tests/llm_d_samples.rs).
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../pdgate-scheduler/tests/data/llm-d-router/sim-epp-gpu-config.yaml"
    );
    let (code, stdout, stderr) = check_config(path.as_ref());
    assert_eq!(code, Some(1), "{stderr}");
    assert_eq!(stdout, "");
    let want = format!(
        "{path}: line 6: plugin `dcgm-source` (type `dcgm-data-source`): unsupported plugin type \
         `dcgm-data-source` (reads NVIDIA DCGM hardware GPU counters, which pdgate does not \
         collect)\n\
         {path}: line 11: plugin `dcgm-extractor` (type `dcgm-extractor`): unsupported plugin \
         type `dcgm-extractor` (extracts NVIDIA DCGM hardware GPU counters, which pdgate does \
         not collect)\n\
         2 errors\n"
    );
    assert!(stderr.ends_with(&want), "{stderr}");
}

#[test]
fn an_unreadable_file_is_one_error_naming_it() {
    let path = std::env::temp_dir().join(format!(
        "pdgate-check-config-missing-{}.yaml",
        std::process::id()
    ));
    let (code, stdout, stderr) = check_config(&path);
    assert_eq!(code, Some(1), "{stderr}");
    assert_eq!(stdout, "");
    let want = format!("{}: cannot read the file: ", path.display());
    assert!(stderr.starts_with(&want), "{stderr}");
    assert!(stderr.ends_with("\n1 error\n"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

/// `pdgate serve` with `args`, expected to fail at start: (exit code, stderr).
fn serve_fails(args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_pdgate"))
        .env_remove("RUST_LOG")
        .arg("serve")
        .args(["--host", "127.0.0.1", "--port", "0"])
        .args(args)
        .output()
        .unwrap();
    (out.status.code(), String::from_utf8(out.stderr).unwrap())
}

#[test]
fn serve_lists_every_config_error_and_checks_router_addresses_at_start() {
    // Found by a fresh-eyes run: `serve --config` showed only the first error, and a router
    // given as a URL started fine and then failed every request with 502.
    let f = TempFile::new("serve-three-faults", THREE_FAULTS);
    let path = f.0.display().to_string();
    let (code, stderr) = serve_fails(&["--config", &path, "--endpoint", "127.0.0.1:9"]);
    assert_eq!(code, Some(1), "{stderr}");
    for line in [5, 8, 16] {
        assert!(
            stderr.contains(&format!("{path}: line {line}: ")),
            "{stderr}"
        );
    }
    let (code, stderr) = serve_fails(&[
        "--prefill-router",
        "127.0.0.1:9",
        "--decode-router",
        "http://127.0.0.1:9",
    ]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains(
            "--decode-router: address \"http://127.0.0.1:9\" must be host:port (no scheme, no path)"
        ),
        "{stderr}"
    );
}

#[test]
fn serve_rejects_invalid_or_duplicate_forward_response_headers_at_start() {
    for (value, want) in [
        ("x-a,bad name", "--forward-response-headers: `bad name` is not a valid header name"),
        ("x-a,X-A", "--forward-response-headers: `X-A` is listed twice"),
        ("x-a,,x-b", "--forward-response-headers: an empty name in the list"),
        (
            "x-llm-d-revision-decision-id",
            "--forward-response-headers: `x-llm-d-revision-decision-id` is hop-by-hop or router-owned",
        ),
    ] {
        let (code, stderr) = serve_fails(&[
            "--endpoint",
            "127.0.0.1:9",
            "--forward-response-headers",
            value,
        ]);
        assert_eq!(code, Some(1), "{value}: {stderr}");
        assert!(stderr.contains(want), "{value}: {stderr}");
    }
}

/// A value of the wrong shape, anywhere in either kind of file, is named by the shape expected
/// ("a mapping"), never by the Rust type pdgate decodes it into (`expected struct RawDoc`,
/// `RawPlugin`, `NoParams`, … leaked before; found by the adversarial try of issue 13).
#[test]
fn ill_typed_values_name_the_shape_expected_not_a_rust_type() {
    let plugins = "plugins:\n- type: queue-scorer\n  parameters: 5\n";
    let coordinator = "gateway:\n  address: http://gw:8081\npipeline:\n  steps:\n  - type: prefill\n    params: 5\n  - type: decode\n";
    for (yaml, want) in [
        ("[]\n", "line 1: invalid type: sequence, expected a mapping"),
        ("5\n", "line 1: invalid type: integer `5`, expected a mapping"),
        ("plugins:\n- 5\n", "line 2: plugins[0]: invalid type: integer `5`, expected a mapping"),
        (
            plugins,
            "line 2: plugin `queue-scorer` (type `queue-scorer`): parameters: invalid type: integer `5`, expected a mapping",
        ),
        (
            "plugins:\n- type: prefix-cache-scorer\n  parameters: [1]\n",
            "parameters: invalid type: sequence, expected a mapping",
        ),
        (
            "schedulingProfiles:\n- name: a\n  plugins: [5]\n",
            "line 3: schedulingProfiles[0].plugins[0]: invalid type: integer `5`, expected a mapping",
        ),
        ("flowControl: 5\n", "line 1: flowControl: invalid type: integer `5`, expected a mapping"),
        ("dataLayer: 5\n", "line 1: dataLayer: invalid type: integer `5`, expected a mapping"),
        (coordinator, "invalid type: integer `5`, expected the step's params"),
        (
            "gateway: 5\npipeline:\n  steps:\n  - type: prefill\n  - type: decode\n",
            "line 1: gateway: invalid type: integer `5`, expected the `gateway` settings",
        ),
    ] {
        let f = TempFile::new("ill-typed", yaml);
        let (code, stdout, stderr) = check_config(&f.0);
        assert_eq!((code, stdout.as_str()), (Some(1), ""), "{yaml}: {stderr}");
        assert!(stderr.contains(want), "{yaml}: {stderr}");
        assert!(
            !stderr.contains("struct") && !stderr.contains("enum ") && !stderr.contains("Raw"),
            "{yaml}: {stderr}"
        );
    }
}
