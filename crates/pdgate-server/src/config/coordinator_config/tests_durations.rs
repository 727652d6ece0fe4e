//! Durations in the coordinator file: Go's zero means none, sub-unit values round up, the
//! effective file prints them back exactly, and Go's int64 range bounds them.

use super::tests::{load, Cli, MINIMAL};
use clap::Parser;

#[test]
fn zero_timeouts_mean_none_as_in_go() {
    let c = load(&format!(
        "server:\n  read_timeout: 0s\n  write_timeout: \"0\"\n{}",
        MINIMAL.replace(
            "gateway:\n  address: http://gw:8081\n",
            "gateway:\n  address: http://gw:8081\n  timeout: 0s\n"
        )
    ))
    .unwrap();
    let mut args = Cli::parse_from(["pdgate"]).serve;
    c.apply(&mut args);
    let year = crate::config::resilience_args::MAX_TIMEOUT_SECS;
    assert_eq!(args.client_limits.client_body_timeout_ms, year * 1000);
    assert_eq!(args.resilience.leg_deadline_secs, year);
    assert_eq!(args.resilience.stream_total_timeout_secs, None);
    assert_eq!(args.resilience.stream_head_timeout_secs, year);
}

/// Regression (adversarial try of issue 13): `500us` became 0 ms, which means "no timeout",
/// and `check-config` printed it as `0ms`; `write_timeout` did not bound a stream.
#[test]
fn sub_unit_durations_round_up_and_print_back_exactly() {
    let yaml = MINIMAL.replace(
        "gateway:
  address: http://gw:8081
",
        "server:
  read_timeout: 500us
  write_timeout: 500ms
gateway:
  address: http://gw:8081
  timeout: 1500us
  idle_conn_timeout: 1ns
",
    );
    let c = load(&yaml).unwrap();
    let mut args = Cli::parse_from(["pdgate"]).serve;
    c.apply(&mut args);
    assert_eq!(args.client_limits.client_header_timeout_ms, 1);
    assert_eq!(args.resilience.leg_deadline_secs, 1);
    assert_eq!(args.resilience.stream_total_timeout_secs, Some(1));
    assert_eq!(args.resilience.stream_head_timeout_secs, 1);
    assert_eq!(args.upstream_idle_timeout_ms, 1);
    let printed = c.effective_yaml();
    for line in [
        "  read_timeout: 500us\n",
        "  write_timeout: 500ms\n",
        "  timeout: 1500us\n",
        "  idle_conn_timeout: 1ns\n",
    ] {
        assert!(printed.contains(line), "{line} in\n{printed}");
    }
    assert_eq!(load(&printed).unwrap(), c);
}

/// Regression (second adversarial try of issue 13): a 1 ns grace became none; durations past
/// Go's int64 nanoseconds loaded (llm-d would not start); `allowed_domains` printed unquoted
/// did not load back as the same list.
#[test]
fn go_duration_range_grace_and_domains_print_back() {
    let with = |server: &str, step: &str| {
        MINIMAL
            .replace(
                "gateway:\n  address: http://gw:8081\n",
                &format!("server:\n{server}gateway:\n  address: http://gw:8081\n"),
            )
            .replace("  steps:\n", &format!("  steps:\n{step}"))
    };
    let c = load(&with("  shutdown_timeout: 1ns\n", "")).unwrap();
    let mut args = Cli::parse_from(["pdgate"]).serve;
    c.apply(&mut args);
    assert_eq!(args.shutdown_grace_ms, 1);
    let e = load(&with("  write_timeout: 9999999999h\n", "")).unwrap_err();
    assert!(
        e.contains("server.write_timeout: duration `9999999999h` is over Go's largest"),
        "{e}"
    );
    assert!(load(&with("  write_timeout: 2562047h\n", "")).is_ok());
    let media = |list: &str| {
        format!("  - type: replace-media-urls\n    params:\n      allowed_domains: {list}\n")
    };
    let c = load(&with("", &media("[Img-1.Example.com, \"::1\", 10.0.0.1]"))).unwrap();
    let printed = c.effective_yaml();
    assert_eq!(load(&printed).unwrap(), c, "{printed}");
    assert_eq!(
        c.media.unwrap().allowed_domains,
        ["img-1.example.com", "::1", "10.0.0.1"]
    );
    // Entries that could never equal a URL's host are refused, named (the third try found
    // them accepted); an empty one too, since dropping it could leave an empty list: any host.
    for (entry, why) in [
        ("\"\"", "allowed_domains[1]: an empty entry"),
        (
            "\"http://b.com\"",
            "allowed_domains[1]: `http://b.com` is not a host name",
        ),
        (
            "\"a, b.com\"",
            "allowed_domains[1]: `a, b.com` is not a host name",
        ),
        (
            "\"*.b.com\"",
            "allowed_domains[1]: `*.b.com` is not a host name",
        ),
        (
            "\"b.com:443\"",
            "allowed_domains[1]: `b.com:443` is not a host name",
        ),
    ] {
        let e = load(&with("", &media(&format!("[a.com, {entry}]")))).unwrap_err();
        assert!(e.contains(why), "{entry}: {e}");
    }
}
