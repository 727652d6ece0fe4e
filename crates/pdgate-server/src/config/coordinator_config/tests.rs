//! Unit tests of the coordinator file: llm-d's sample, every step and option working or
//! refused, environment overrides, and the flags a file maps onto.

use super::*;
use clap::Parser;

#[derive(Parser)]
pub(super) struct Cli {
    #[command(flatten)]
    pub(super) serve: ServeArgs,
}

fn no_env(_: &str) -> Option<String> {
    None
}

pub(super) fn load(yaml: &str) -> Result<CoordinatorConfig, String> {
    CoordinatorConfig::load(yaml, "coord.yaml", &no_env).map_err(|e| e.to_string())
}

pub(super) const MINIMAL: &str = "gateway:\n  address: http://gw:8081\npipeline:\n  steps:\n  - type: prefill\n  - type: decode\n";

#[test]
fn llm_d_sample_loads_as_is_with_every_step() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/compat/llm-d/coordinator.yaml"
    );
    let text = std::fs::read_to_string(path).expect("../shared/compat/llm-d/coordinator.yaml");
    let c = load(&text).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        c,
        CoordinatorConfig {
            log_level: 2,
            host: "::".into(),
            port: 8080,
            read_timeout: Duration::from_secs(30),
            write_timeout: Duration::from_secs(120),
            shutdown_timeout: Duration::from_secs(25),
            max_request_body_bytes: 64 << 20,
            gateway: "inference-gateway:80".into(),
            max_idle_per_host: 200,
            idle_conn_timeout: Duration::from_secs(90),
            gateway_timeout: Duration::from_secs(60),
            kv_connector: KvConnector::SharedStorage,
            conditional_decode: false,
            encode_max_parallel: Some(8),
            forward_response_headers: None,
            tokens_in: false,
            media: Some(steps::MediaSettings {
                download_timeout: Duration::from_secs(10),
                max_concurrent_downloads: 10,
                max_entries: 0,
                max_download_mib: 10,
                allow_private_networks: false,
                allowed_domains: Vec::new(),
            }),
            render: Some(steps::RenderSettings {
                address: "rendering-service:8080".into(),
                timeout: Duration::from_secs(30),
                max_idle_per_host: 100,
                idle_timeout: Duration::from_secs(90),
                max_total_tokens: 0,
                max_total_placeholder_tokens: 0,
            }),
        }
    );
    // The flags the render step stands for.
    let cli = Cli::parse_from(["t"]);
    let mut args = cli.serve;
    c.apply(&mut args);
    let r = &args.pre_steps.render;
    assert_eq!(
        (
            r.render_address.as_deref(),
            r.render_timeout_ms,
            r.render_max_idle_per_host,
            r.render_idle_timeout_ms
        ),
        (Some("rendering-service:8080"), 30_000, 100, 90_000)
    );
}

#[test]
fn a_file_sets_the_flags_it_stands_for() {
    let yaml = "log_level: 4\nserver:\n  listen_addr: 127.0.0.1:9100\n  read_timeout: 5s\n  write_timeout: 1m30s\n  shutdown_timeout: 2s\n  max_request_body_size: 2\ngateway:\n  address: http://gw:8081\n  max_idle_conns_per_host: 7\n  idle_conn_timeout: 3s\n  timeout: 2500ms\npipeline:\n  kv_connector: kv-nixl\n  forward_response_headers: [x-a, x-b]\n  steps:\n  - type: conditional-decode\n  - type: prefill\n    params:\n      kv_connector: kv-nixl\n  - type: decode\n";
    let c = load(yaml).unwrap();
    assert_eq!(c.log_filter(), "debug");
    let mut args = Cli::parse_from(["pdgate"]).serve;
    c.apply(&mut args);
    assert_eq!((args.host.as_str(), args.port), ("127.0.0.1", 9100));
    assert_eq!(
        (
            args.client_limits.client_header_timeout_ms,
            args.client_limits.client_body_timeout_ms
        ),
        (5000, 5000)
    );
    assert_eq!(args.resilience.leg_deadline_secs, 90);
    assert_eq!(args.resilience.stream_total_timeout_secs, Some(90));
    assert_eq!(
        args.resilience.stream_head_timeout_secs, 3,
        "2.5 s rounds up"
    );
    assert_eq!(args.shutdown_grace_ms, 2000);
    assert_eq!(args.max_body_bytes, 2 << 20);
    assert_eq!(args.prefill_router.as_deref(), Some("gw:8081"));
    assert_eq!(args.decode_router.as_deref(), Some("gw:8081"));
    assert_eq!(args.encode_router, None);
    assert_eq!(
        (
            args.upstream_max_idle_per_host,
            args.upstream_idle_timeout_ms
        ),
        (7, 3000)
    );
    assert_eq!(args.kv_connector, KvConnector::Nixl);
    assert!(args.conditional_decode);
    assert_eq!(
        args.forward_response_headers,
        Some(vec!["x-a".to_string(), "x-b".to_string()])
    );
    // An empty list forwards nothing (the flag's `''`).
    let c = load(&format!("{MINIMAL}  forward_response_headers: []\n")).unwrap();
    let mut args = Cli::parse_from(["pdgate"]).serve;
    c.apply(&mut args);
    assert_eq!(args.forward_response_headers, Some(vec![String::new()]));
}

#[test]
fn the_flags_a_file_replaces_cannot_be_given_with_it() {
    let e = Cli::try_parse_from(["pdgate", "--coordinator-config", "c.yaml", "--port", "1"])
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("cannot be used with"), "{e}");
    assert!(Cli::try_parse_from(["pdgate", "--coordinator-config", "c.yaml"]).is_ok());
}

#[test]
fn environment_overrides_the_file() {
    let env = |k: &str| match k {
        "COORDINATOR_SERVER_MAX_REQUEST_BODY_SIZE" => Some("3".to_string()),
        "COORDINATOR_PIPELINE_KV_CONNECTOR" => Some("kv-nixl".to_string()),
        "COORDINATOR_GATEWAY_TIMEOUT" => Some(String::new()), // empty: ignored
        _ => None,
    };
    let c = CoordinatorConfig::load(MINIMAL, "coord.yaml", &env).unwrap();
    assert_eq!(c.max_request_body_bytes, 3 << 20);
    assert_eq!(c.kv_connector, KvConnector::Nixl);
    assert_eq!(c.gateway_timeout, defaults::GATEWAY_TIMEOUT);
    let bad = |k: &str| (k == "COORDINATOR_SERVER_READ_TIMEOUT").then(|| "30".to_string());
    let e = CoordinatorConfig::load(MINIMAL, "coord.yaml", &bad)
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("coord.yaml: COORDINATOR_SERVER_READ_TIMEOUT (overrides `server.read_timeout`): duration `30`"),
        "{e}"
    );
    // Numbers and booleans as Go's strconv reads them: surrounding space is refused.
    for (var, value, want) in [
        (
            "COORDINATOR_SERVER_MAX_REQUEST_BODY_SIZE",
            " 8",
            "` 8` is not an integer",
        ),
        (
            "COORDINATOR_GATEWAY_MAX_IDLE_CONNS_PER_HOST",
            "8\n",
            "`8\n` is not an integer",
        ),
        (
            "COORDINATOR_PIPELINE_USE_OPENAI_FORMAT",
            "true ",
            "`true ` is not a boolean",
        ),
    ] {
        let bad = |k: &str| (k == var).then(|| value.to_string());
        let e = CoordinatorConfig::load(MINIMAL, "coord.yaml", &bad)
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with(&format!("coord.yaml: {var} ")) && e.ends_with(want),
            "{e}"
        );
    }
}

#[test]
fn every_refusal_names_its_key_and_line() {
    let cases: &[(&str, &str)] = &[
        (
            "gateway:\n  adress: http://gw\n",
            "coord.yaml: line 2: gateway: unknown field `adress`, expected one of `address`",
        ),
        (
            "server:\n  read_timeout: 30\n",
            "coord.yaml: line 2: server.read_timeout: expected a duration string such as `30s`, got the number `30`",
        ),
        ("pipeline:\n  steps:\n  - type: prefill\n  - type: decode\n", "coord.yaml: gateway: `gateway.address` is required"),
        (
            "gateway:\n  address: https://gw\npipeline:\n  steps:\n  - type: prefill\n  - type: decode\n",
            "coord.yaml: line 2: gateway.address: `https://gw`: an https gateway is not supported",
        ),
        (
            "gateway:\n  address: http://gw\npipeline:\n  kv_connector: kv-sglang\n  steps:\n  - type: prefill\n  - type: decode\n",
            "coord.yaml: line 4: pipeline.kv_connector: `kv-sglang` (SGLang's bootstrap protocol) is not supported",
        ),
        (
            "gateway:\n  address: http://gw\npipeline:\n  use_openai_format: false\n  steps:\n  - type: prefill\n  - type: decode\n",
            "coord.yaml: line 4: pipeline.use_openai_format: `false` needs a `render` step",
        ),
        (
            "gateway:\n  address: http://gw\npipeline:\n  steps:\n  - type: replace-media-urls\n    params:\n      max_concurrent_downloads: 0\n  - type: prefill\n  - type: decode\n",
            "coord.yaml: line 5: pipeline.steps[0] (`replace-media-urls`): max_concurrent_downloads must be positive",
        ),
        (
            "gateway:\n  address: http://gw\npipeline:\n  steps:\n  - type: replace-media-urls\n    params:\n      max_multimodal_entries: -2\n      download_timeout: 10\n  - type: prefill\n  - type: decode\n",
            "coord.yaml: line 5: pipeline.steps[0] (`replace-media-urls`): download_timeout: ",
        ),
        (
            "gateway:\n  address: http://gw\npipeline:\n  steps:\n  - type: render\n    params:\n      timeout: 5s\n  - type: prefill\n  - type: decode\n",
            "coord.yaml: line 5: pipeline.steps[0] (`render`): `address` is required: the render service's base URL",
        ),
        (
            "gateway:\n  address: http://gw\npipeline:\n  steps:\n  - type: render\n    params:\n      address: http://r\n      max_total_tokens: -1\n  - type: prefill\n  - type: decode\n",
            "coord.yaml: line 5: pipeline.steps[0] (`render`): max_total_tokens must be non-negative, got -1",
        ),
        (
            "gateway:\n  address: http://gw\npipeline:\n  steps:\n  - type: render\n    params:\n      address: https://r\n  - type: prefill\n  - type: decode\n",
            "coord.yaml: line 5: pipeline.steps[0] (`render`): address: `https://r`: an https render service is not supported",
        ),
        (
            "gateway:\n  address: http://gw\npipeline:\n  steps:\n  - type: encode\n    params:\n      ec_connector: ec-nixl\n  - type: prefill\n  - type: decode\n",
            "coord.yaml: line 5: pipeline.steps[0] (`encode`): ec_connector `ec-nixl` (llm-d's map of NIXL descriptors by mm_hash) is not supported",
        ),
        (
            "gateway:\n  address: http://gw\npipeline:\n  kv_connector: kv-nixl\n  steps:\n  - type: prefill\n    params:\n      kv_connector: kv-shared-storage\n  - type: decode\n",
            "coord.yaml: line 6: pipeline.steps[0] (`prefill`): kv_connector `kv-shared-storage` differs from the pipeline's `kv-nixl`",
        ),
        (
            "gateway:\n  address: http://gw\npipeline:\n  steps:\n  - type: decode\n    params:\n      use_openai_format: false\n  - type: prefill\n",
            "coord.yaml: line 8: pipeline.steps[1] (`prefill`): step `prefill` comes after `decode`",
        ),
        (
            "gateway:\n  address: http://gw\npipeline:\n  steps:\n  - type: prefill\n  - type: decode\n    params:\n      use_openai_format: false\n",
            "coord.yaml: line 6: pipeline.steps[1] (`decode`): `use_openai_format: false` differs from the pipeline's `true`",
        ),
        (
            "gateway:\n  address: http://gw\npipeline:\n  steps:\n  - type: prefill\n  - type: decode\n    params:\n      kv_conector: kv-nixl\n",
            "coord.yaml: line 6: pipeline.steps[1]: unknown field `kv_conector`",
        ),
        (
            "gateway:\n  address: http://gw\nserver:\n  max_request_body_size: -1\npipeline:\n  steps:\n  - type: prefill\n  - type: decode\n",
            "coord.yaml: line 4: server.max_request_body_size: must be positive (MiB), got -1",
        ),
    ];
    for (yaml, want) in cases {
        let e = load(yaml).unwrap_err();
        assert!(e.starts_with(want), "for\n{yaml}\ngot: {e}\nwant: {want}");
    }
}

/// Regression (adversarial try of issue 13): a bad value that is not its section's first key
/// was blamed on the first key and its line (`line 25: server.listen_addr` for a bad
/// `read_timeout`); a repeated key pointed at the file's second line. Each edit is one line of
/// llm-d's sample.
#[test]
fn a_bad_value_in_server_or_gateway_names_its_own_key_and_line() {
    let sample = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/compat/llm-d/coordinator.yaml"
    ))
    .unwrap();
    let cases: &[(&str, &str, &str)] = &[
        (
            "read_timeout: 30s",
            "read_timeout: 30",
            "coord.yaml: line 29: server.read_timeout: expected a duration string such as `30s`, got the number `30`",
        ),
        (
            "write_timeout: 120s",
            "write_timeout: 120",
            "coord.yaml: line 33: server.write_timeout: expected a duration string",
        ),
        (
            "read_timeout: 30s",
            "read_timeout: -5s",
            "coord.yaml: line 29: server.read_timeout: duration `-5s` must not be negative",
        ),
        (
            "  timeout: 60s",
            "  timeout: abc",
            "coord.yaml: line 66: gateway.timeout: duration `abc`",
        ),
        (
            "idle_conn_timeout: 90s",
            "idle_conn_timeout: 90",
            "coord.yaml: line 62: gateway.idle_conn_timeout: expected a duration string",
        ),
        (
            "  shutdown_timeout: 25s",
            "  shutdown_timeout: 25s\n  shutdown_timeout: 30s",
            "coord.yaml: line 38: server: duplicate field `shutdown_timeout`",
        ),
        (
            "  kv_connector: kv-shared-storage",
            "  kv_connector: [1]",
            "coord.yaml: line 77: pipeline.kv_connector: invalid type: sequence, expected a string",
        ),
        (
            "log_level: 2",
            "log_level: x",
            "coord.yaml: line 18: log_level: invalid type: string \"x\", expected an integer",
        ),
    ];
    for (from, to, want) in cases {
        let yaml = sample.replacen(from, to, 1);
        assert_ne!(yaml, sample, "{from}");
        let e = load(&yaml).unwrap_err();
        assert!(
            e.starts_with(want),
            "{from} -> {to}\ngot: {e}\nwant: {want}"
        );
    }
}

#[test]
fn coordinator_files_are_told_from_endpoint_picker_configs() {
    assert!(looks_like_coordinator_config(MINIMAL));
    assert!(!looks_like_coordinator_config(
        "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins: []\n"
    ));
    assert!(!looks_like_coordinator_config("plugins: []\n"));
}

#[test]
fn the_effective_file_loads_to_the_same_settings() {
    // llm-d's `:8080` (every interface, dual-stack as in Go) prints back as written.
    let c = load(&format!("server:\n  listen_addr: \":8080\"\n{MINIMAL}")).unwrap();
    assert_eq!((c.host.as_str(), c.port), ("::", 8080));
    assert!(c.effective_yaml().contains("  listen_addr: \":8080\"\n"));
    let mut args = Cli::parse_from(["pdgate"]).serve;
    c.apply(&mut args);
    assert_eq!((args.host.as_str(), args.port), ("::", 8080));

    let yaml = "server:\n  listen_addr: \"[::1]:9\"\ngateway:\n  address: http://gw:8081\npipeline:\n  use_openai_format: false\n  forward_response_headers: [x-a]\n  steps:\n  - type: replace-media-urls\n    params:\n      max_multimodal_entries: 3\n      allowed_domains: [Images.Example.com]\n  - type: render\n    params:\n      address: http://r:1\n      timeout: 2s\n      max_total_tokens: 4096\n  - type: conditional-decode\n  - type: prefill\n  - type: decode\n";
    let c = load(yaml).unwrap();
    assert_eq!(
        c.render.as_ref().map(|r| (r.timeout, r.max_total_tokens)),
        Some((Duration::from_secs(2), 4096))
    );
    let again = load(&c.effective_yaml()).unwrap_or_else(|e| panic!("{e}\n{}", c.effective_yaml()));
    assert_eq!(again, c);
    assert!(c
        .effective_yaml()
        .contains("  kv_connector: kv-shared-storage\n"));
}

/// Regressions from the adversarial try (issue 13): each input that was accepted, misread or
/// blamed on the wrong place.
#[test]
fn adversarial_inputs_are_refused_and_blamed_on_their_source() {
    // `ec-nixl` and unknown connectors anywhere, even without an encode step.
    for yaml in [
        format!("{MINIMAL}  ec_connector: ec-nixl\n"),
        MINIMAL.replace(
            "  - type: decode\n",
            "  - type: decode\n    params:\n      ec_connector: bogus\n",
        ),
    ] {
        let e = load(&yaml).unwrap_err();
        assert!(
            e.contains("ec_connector `ec-nixl`") || e.contains("unknown ec_connector `bogus`"),
            "{e}"
        );
    }
    // A header name that is not one.
    let e = load(&format!(
        "{MINIMAL}  forward_response_headers: [\"x-a, x-b\"]\n"
    ))
    .unwrap_err();
    assert!(e.contains("`x-a, x-b` is not a valid header name"), "{e}");
    // The rest of what `serve` refuses is refused by the file's own check, with its line
    // (an adversarial try found these passing `check-config` and failing `serve` unlocated).
    let line = MINIMAL.lines().count() + 1;
    for (list, why) in [
        ("[x-a, X-A]", "`X-A` is listed twice"),
        (
            "[host]",
            "`host` is hop-by-hop or router-owned and cannot be forwarded",
        ),
        ("[content-length]", "`content-length` is hop-by-hop"),
        (
            "[x-request-id]",
            "`x-request-id` is hop-by-hop or router-owned",
        ),
        ("[x-a, \" \"]", "entry 1 must not be empty"),
    ] {
        let e = load(&format!("{MINIMAL}  forward_response_headers: {list}\n")).unwrap_err();
        let want = format!("line {line}: pipeline.forward_response_headers: {why}");
        assert!(e.contains(&want), "{list}: {e}");
    }
    // A value from the environment is blamed on its variable, not on the file's line.
    let env = |k: &str| (k == "COORDINATOR_PIPELINE_KV_CONNECTOR").then(|| "kv-sglang".to_string());
    let e = CoordinatorConfig::load(MINIMAL, "coord.yaml", &env)
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("coord.yaml: COORDINATOR_PIPELINE_KV_CONNECTOR (overrides `pipeline.kv_connector`): `kv-sglang`"),
        "{e}"
    );
    // A misspelt step is one error, not also "no prefill step".
    let e = load(&MINIMAL.replace("type: prefill", "type: prefil")).unwrap_err();
    assert_eq!(e.lines().count(), 1, "{e}");
    assert!(e.contains("unknown step type `prefil`"), "{e}");
    // Encode fan-out within the flag's range.
    let e = load(&MINIMAL.replace(
        "  - type: prefill\n",
        "  - type: encode\n    params:\n      max_parallel: 100000\n  - type: prefill\n",
    ))
    .unwrap_err();
    assert!(
        e.contains("max_parallel must be at most 4096, got 100000"),
        "{e}"
    );
    // Internal type names stay out of messages.
    let e = load("- a\n").unwrap_err();
    assert!(
        !e.contains("RawFile") && e.contains("a coordinator config"),
        "{e}"
    );
}

#[test]
fn broken_coordinator_files_are_still_told_apart() {
    // YAML that does not parse (a duplicate key, a tab) is still a coordinator file.
    assert!(looks_like_coordinator_config(
        "gateway:\n  address: x\ngateway:\n  address: y\n"
    ));
    assert!(looks_like_coordinator_config("log_level: 3\n"));
    assert!(!looks_like_coordinator_config(""));
    let e = load("gateway:\n  address: http://a\ngateway:\n  address: http://b\n").unwrap_err();
    assert!(e.contains("duplicate"), "{e}");
}
