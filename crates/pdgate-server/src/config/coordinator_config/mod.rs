//! llm-d's coordinator configuration file: `pdgate serve --coordinator-config FILE` reads the
//! YAML that llm-d's coordinator reads (llm-d-router `config/coordinator/coordinator.yaml`) and
//! runs pdgate's coordinator with it, so that one can replace the other without rewriting the
//! file.
//!
//! Every setting maps onto a `pdgate serve` flag ([`CoordinatorConfig::apply`]), so a file and
//! the flags it stands for behave alike:
//!
//! | file | default | `pdgate serve` flag |
//! |---|---|---|
//! | `log_level` (1 warn … 5 trace) | 2 (info) | log filter, unless `RUST_LOG` is set |
//! | `server.listen_addr` | `:8080` (every interface, IPv6 and IPv4, as Go) | `--host`, `--port` |
//! | `server.read_timeout` | 30s | `--client-header-timeout-ms`, `--client-body-timeout-ms` |
//! | `server.write_timeout` | 120s | `--leg-deadline-secs` (non-streamed legs), `--stream-total-timeout-secs` (streamed legs) |
//! | `server.shutdown_timeout` | 25s | `--shutdown-grace-ms` |
//! | `server.max_request_body_size` (MiB) | 64 | `--max-body-bytes` |
//! | `gateway.address` | required | `--prefill-router`, `--decode-router` (`--encode-router` with an `encode` step) |
//! | `gateway.max_idle_conns_per_host` | 100 | `--upstream-max-idle-per-host` |
//! | `gateway.idle_conn_timeout` | 90s | `--upstream-idle-timeout-ms` |
//! | `gateway.timeout` | 60s | `--stream-head-timeout-secs` (streamed legs; non-streamed legs, prefill included, are bounded by `write_timeout`) |
//! | `pipeline.kv_connector` | `kv-shared-storage` | `--kv-connector` |
//! | `pipeline.forward_response_headers` | (pdgate's default list) | `--forward-response-headers` |
//! | step `conditional-decode` | absent | `--conditional-decode` |
//! | step `encode` (`max_parallel`, default 8; `ec-shared-storage` only) | absent | `--encode-router`, `--encode-max-parallel`, `--ec-connector` |
//! | `pipeline.use_openai_format` | true | `--tokens-in-prefill` when `false` (needs `render`; the prefill leg of a rendered chat request goes to `/inference/v1/generate`) |
//! | step `replace-media-urls` (`download_timeout` 10s, `max_concurrent_downloads` 10, `max_multimodal_entries` 0, `max_download_size` 10 MB, `allow_private_networks` false, `allowed_domains` any) | absent | `--replace-media-urls`, `--media-download-timeout-ms`, `--media-max-concurrent-downloads`, `--media-max-entries`, `--media-max-download-mib`, `--media-allow-private-networks`, `--media-allowed-domains` |
//! | step `render` (`address` required; `timeout` 30s, `max_idle_conns_per_host` 100, `idle_conn_timeout` 90s, `max_total_tokens` 0, `max_total_placeholder_tokens` 0) | absent | `--render-address`, `--render-timeout-ms`, `--render-max-idle-per-host`, `--render-idle-timeout-ms`, `--render-max-total-tokens`, `--render-max-total-placeholder-tokens` |
//!
//! A zero duration means no timeout, as in Go (the flags' largest value, one year); a positive
//! one is rounded up to its flag's unit (`500ms` is 1 s for a `-secs` flag), never to zero.
//!
//! Environment variables override the file as in llm-d (env > file > default):
//! `COORDINATOR_` + the key path in capitals with `.` as `_`, e.g.
//! `COORDINATOR_SERVER_MAX_REQUEST_BODY_SIZE`, for every key above that is not inside
//! `pipeline.steps` ([`ENV_KEYS`]). An empty variable is ignored.
//!
//! Refused at start, with a message naming the key: unknown keys, `kv-sglang`,
//! `use_openai_format: false` without a `render` step,
//! `ec-nixl` on an encode step, per-step connector or
//! format overrides that differ from the pipeline's, `https` gateways, and steps out of order.

mod build;
mod parse;
pub mod raw;
pub mod steps;

use crate::config::args::ServeArgs;
use build::{build, Key};
use parse::{key_line, set_from_env, step_line};
use pdgate_coordinator::KvConnector;
use pdgate_scheduler::config::ConfigErrors;
use pdgate_scheduler::ConfigError;
use raw::RawFile;
use std::time::Duration;
use steps::Step;

/// Largest `encode.max_parallel` (`--encode-max-parallel`'s range).
pub const MAX_ENCODE_PARALLEL: usize = 4096;

/// Defaults of llm-d's loader (`pkg/coordinator/config/config.go`).
pub mod defaults {
    use std::time::Duration;
    /// `log_level`.
    pub const LOG_LEVEL: i64 = 2;
    /// `server.listen_addr`.
    pub const LISTEN_ADDR: &str = ":8080";
    /// `server.read_timeout`.
    pub const READ_TIMEOUT: Duration = Duration::from_secs(30);
    /// `server.write_timeout`.
    pub const WRITE_TIMEOUT: Duration = Duration::from_secs(120);
    /// `server.shutdown_timeout`.
    pub const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(25);
    /// `server.max_request_body_size`, MiB.
    pub const MAX_REQUEST_BODY_MIB: i64 = 64;
    /// `gateway.max_idle_conns_per_host`.
    pub const MAX_IDLE_CONNS_PER_HOST: i64 = 100;
    /// `gateway.idle_conn_timeout`.
    pub const IDLE_CONN_TIMEOUT: Duration = Duration::from_secs(90);
    /// `gateway.timeout`.
    pub const GATEWAY_TIMEOUT: Duration = Duration::from_secs(60);
}

/// The file's settings, defaults filled in and checked.
#[derive(Debug, Clone, PartialEq)]
pub struct CoordinatorConfig {
    /// 1 warn, 2 info, 3–4 debug, 5 trace.
    pub log_level: i64,
    /// Host to bind (`::` for `:PORT`: every interface, dual-stack).
    pub host: String,
    /// Port to bind.
    pub port: u16,
    /// Client read timeout.
    pub read_timeout: Duration,
    /// Non-streamed response cap.
    pub write_timeout: Duration,
    /// Drain time on SIGTERM.
    pub shutdown_timeout: Duration,
    /// Request body limit, bytes.
    pub max_request_body_bytes: usize,
    /// The gateway, `host:port`.
    pub gateway: String,
    /// Idle connections kept per upstream host.
    pub max_idle_per_host: usize,
    /// Idle connection lifetime.
    pub idle_conn_timeout: Duration,
    /// Time to a leg's response head.
    pub gateway_timeout: Duration,
    /// The KV handoff contract.
    pub kv_connector: KvConnector,
    /// A `conditional-decode` step is in the pipeline.
    pub conditional_decode: bool,
    /// An `encode` step is in the pipeline: its `max_parallel`.
    pub encode_max_parallel: Option<usize>,
    /// `pipeline.forward_response_headers`, when given.
    pub forward_response_headers: Option<Vec<String>>,
    /// A `render` step is in the pipeline: its settings.
    pub render: Option<steps::RenderSettings>,
    /// A `replace-media-urls` step is in the pipeline: its settings.
    pub media: Option<steps::MediaSettings>,
    /// `pipeline.use_openai_format: false`: rendered chat requests prefill tokens-in.
    pub tokens_in: bool,
}

/// The environment variables that override the file, and the key each overrides.
pub const ENV_KEYS: &[(&str, &str)] = &[
    ("COORDINATOR_LOG_LEVEL", "log_level"),
    ("COORDINATOR_SERVER_LISTEN_ADDR", "server.listen_addr"),
    ("COORDINATOR_SERVER_READ_TIMEOUT", "server.read_timeout"),
    ("COORDINATOR_SERVER_WRITE_TIMEOUT", "server.write_timeout"),
    (
        "COORDINATOR_SERVER_SHUTDOWN_TIMEOUT",
        "server.shutdown_timeout",
    ),
    (
        "COORDINATOR_SERVER_MAX_REQUEST_BODY_SIZE",
        "server.max_request_body_size",
    ),
    ("COORDINATOR_GATEWAY_ADDRESS", "gateway.address"),
    (
        "COORDINATOR_GATEWAY_MAX_IDLE_CONNS_PER_HOST",
        "gateway.max_idle_conns_per_host",
    ),
    (
        "COORDINATOR_GATEWAY_IDLE_CONN_TIMEOUT",
        "gateway.idle_conn_timeout",
    ),
    ("COORDINATOR_GATEWAY_TIMEOUT", "gateway.timeout"),
    ("COORDINATOR_PIPELINE_KV_CONNECTOR", "pipeline.kv_connector"),
    ("COORDINATOR_PIPELINE_EC_CONNECTOR", "pipeline.ec_connector"),
    (
        "COORDINATOR_PIPELINE_USE_OPENAI_FORMAT",
        "pipeline.use_openai_format",
    ),
];

/// True when `yaml` looks like a coordinator file rather than an EndpointPickerConfig: a
/// top-level (column 0) `log_level`, `server`, `gateway` or `pipeline` key, and none of the
/// EndpointPickerConfig's (`apiVersion`, `kind`, `plugins`, `schedulingProfiles`). Read line
/// by line, so that a file YAML cannot parse (a tab, a duplicate key) is still told apart and
/// gets the right errors. `check-config` uses it.
pub fn looks_like_coordinator_config(yaml: &str) -> bool {
    let top = |keys: &[&str]| {
        yaml.lines().any(|l| {
            keys.iter().any(|k| {
                l.strip_prefix(k)
                    .is_some_and(|r| r.trim_start().starts_with(':'))
            })
        })
    };
    top(&["log_level", "server", "gateway", "pipeline"])
        && !top(&["apiVersion", "kind", "plugins", "schedulingProfiles"])
}

/// The `tracing` filter a coordinator file's `log_level` asks for (with
/// `COORDINATOR_LOG_LEVEL` over it), when the file reads; `None` otherwise (its errors are
/// reported when it is loaded).
pub fn log_filter_of_file(path: &std::path::Path) -> Option<&'static str> {
    let level = match std::env::var("COORDINATOR_LOG_LEVEL") {
        Ok(v) if !v.is_empty() => v.trim().parse().ok()?,
        _ => {
            let text = crate::config::args::read_config_file(path).ok()?;
            let raw: RawFile = serde_yaml_ng::from_str(&text).ok()?;
            raw.log_level.unwrap_or(defaults::LOG_LEVEL)
        }
    };
    Some(log_filter(level))
}

impl CoordinatorConfig {
    /// Loads `yaml` (named `source` in errors), with the environment read through `env`.
    ///
    /// Errors: every problem found, each naming its key (and line where the file has one),
    /// or the environment variable it came from.
    pub fn load(
        yaml: &str,
        source: &str,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<CoordinatorConfig, ConfigErrors> {
        let err = |line: Option<usize>, message: String| ConfigError {
            source_name: source.to_string(),
            line,
            plugin: None,
            message,
        };
        let mut raw: RawFile = match parse::decode(yaml) {
            Ok(r) => r,
            // An empty file is all defaults (and then misses `gateway.address`).
            Err(_) if yaml.trim().is_empty() => RawFile::default(),
            Err((line, message)) => return Err(err(line, message).into()),
        };
        let mut errors = Vec::new();
        let mut from_env: Vec<(&str, &str)> = Vec::new();
        for (var, key) in ENV_KEYS {
            let Some(value) = env(var).filter(|v| !v.is_empty()) else {
                continue;
            };
            from_env.push((var, key));
            if let Err(m) = set_from_env(&mut raw, key, &value) {
                errors.push(err(None, format!("{var} (overrides `{key}`): {m}")));
            }
        }
        let step_line = |i: usize| step_line(yaml, i);
        let mut steps = Vec::new();
        for (i, s) in raw.pipeline.steps.iter().enumerate() {
            match Step::parse(&s.step_type, s.params.as_ref()) {
                Ok(step) => steps.push(step),
                Err(m) => errors.push(err(step_line(i), format!("pipeline.steps[{i}]: {m}"))),
            }
        }
        // A step that did not parse is reported; the pipeline's shape is then not checked
        // (it would report a missing step that is only misspelt).
        let all_steps = steps.len() == raw.pipeline.steps.len();
        let built = build(&raw, all_steps.then_some(&steps[..])).map_err(|(key, m)| {
            let env_var = match key {
                Key::Path(p) => from_env.iter().find(|(_, k)| *k == p).map(|(v, _)| *v),
                _ => None,
            };
            match (key, env_var) {
                (Key::Path(p), Some(var)) => err(None, format!("{var} (overrides `{p}`): {m}")),
                (Key::Path(p), None) => err(key_line(yaml, p), format!("{p}: {m}")),
                (Key::Step(i), _) => err(
                    step_line(i),
                    format!("pipeline.steps[{i}] (`{}`): {m}", steps[i].name()),
                ),
                (Key::None, _) => err(None, m),
            }
        });
        match built {
            Ok(c) if errors.is_empty() => Ok(c),
            Ok(_) => Err(ConfigErrors(errors)),
            Err(e) => {
                errors.push(e);
                errors.sort_by_key(|e| e.line.unwrap_or(usize::MAX));
                Err(ConfigErrors(errors))
            }
        }
    }

    /// Sets the `pdgate serve` flags this file stands for (see the module docs).
    pub fn apply(&self, args: &mut ServeArgs) {
        // Go reads a zero timeout as "none": the flags' largest value (one year). A positive
        // one is rounded up to its flag's unit, so that it never becomes zero ("none").
        let max_secs = crate::config::resilience_args::MAX_TIMEOUT_SECS;
        let ms = |d: Duration| match units_up(d, Duration::from_millis(1), max_secs * 1000) {
            0 => max_secs * 1000,
            n => n,
        };
        let secs = |d: Duration| match units_up(d, Duration::from_secs(1), max_secs) {
            0 => max_secs,
            n => n,
        };
        args.host = self.host.clone();
        args.port = self.port;
        args.client_limits.client_header_timeout_ms = ms(self.read_timeout);
        args.client_limits.client_body_timeout_ms = ms(self.read_timeout);
        // Go's `WriteTimeout` caps the whole response, a stream's too (the sample file:
        // "for streaming completions this bounds the total in-flight time").
        args.resilience.leg_deadline_secs = secs(self.write_timeout);
        args.resilience.stream_total_timeout_secs =
            (!self.write_timeout.is_zero()).then(|| secs(self.write_timeout));
        // A positive grace never rounds down to none.
        args.shutdown_grace_ms =
            units_up(self.shutdown_timeout, Duration::from_millis(1), u64::MAX);
        args.max_body_bytes = self.max_request_body_bytes;
        args.prefill_router = Some(self.gateway.clone());
        args.decode_router = Some(self.gateway.clone());
        args.encode_router = self.encode_max_parallel.map(|_| self.gateway.clone());
        if let Some(n) = self.encode_max_parallel {
            args.encode_max_parallel = n;
            args.ec_connector = pdgate_coordinator::EcConnector::SharedStorage;
        }
        args.upstream_max_idle_per_host = self.max_idle_per_host;
        args.upstream_idle_timeout_ms = ms(self.idle_conn_timeout);
        args.resilience.stream_head_timeout_secs = secs(self.gateway_timeout);
        args.kv_connector = self.kv_connector;
        args.conditional_decode = self.conditional_decode;
        if let Some(r) = &self.render {
            let flags = &mut args.pre_steps.render;
            flags.render_address = Some(r.address.clone());
            flags.render_timeout_ms = ms(r.timeout);
            flags.render_max_idle_per_host = r.max_idle_per_host;
            flags.render_idle_timeout_ms = ms(r.idle_timeout);
            flags.render_max_total_tokens = r.max_total_tokens;
            flags.render_max_total_placeholder_tokens = r.max_total_placeholder_tokens;
        }
        args.pre_steps.tokens_in_prefill = self.tokens_in;
        if let Some(m) = &self.media {
            let flags = &mut args.pre_steps.media;
            flags.replace_media_urls = true;
            flags.media_download_timeout_ms = ms(m.download_timeout);
            flags.media_max_concurrent_downloads = m.max_concurrent_downloads;
            flags.media_max_entries = m.max_entries;
            flags.media_max_download_mib = m.max_download_mib;
            flags.media_allow_private_networks = m.allow_private_networks;
            flags.media_allowed_domains = m.allowed_domains.clone();
        }
        if let Some(h) = &self.forward_response_headers {
            args.forward_response_headers = Some(if h.is_empty() {
                vec![String::new()]
            } else {
                h.clone()
            });
        }
    }

    /// The settings as a coordinator file with every default written out (what
    /// `pdgate check-config` prints), followed by the `pdgate serve` flags they stand for as a
    /// comment. Loading it again gives the same settings.
    pub fn effective_yaml(&self) -> String {
        let d = go_duration;
        let mut y = format!(
            "log_level: {}\nserver:\n  listen_addr: \"{}:{}\"\n  read_timeout: {}\n  write_timeout: {}\n  shutdown_timeout: {}\n  max_request_body_size: {}\ngateway:\n  address: http://{}\n  max_idle_conns_per_host: {}\n  idle_conn_timeout: {}\n  timeout: {}\npipeline:\n  kv_connector: {}\n  use_openai_format: {}\n",
            self.log_level,
            match self.host.as_str() {
                "::" => String::new(),
                h if h.contains(':') => format!("[{h}]"),
                h => h.to_string(),
            },
            self.port,
            d(self.read_timeout),
            d(self.write_timeout),
            d(self.shutdown_timeout),
            self.max_request_body_bytes >> 20,
            self.gateway,
            self.max_idle_per_host,
            d(self.idle_conn_timeout),
            d(self.gateway_timeout),
            self.kv_connector,
            !self.tokens_in,
        );
        if self.encode_max_parallel.is_some() {
            y += "  ec_connector: ec-shared-storage\n";
        }
        if let Some(h) = &self.forward_response_headers {
            y += &format!("  forward_response_headers: [{}]\n", h.join(", "));
        }
        y += "  steps:\n";
        if let Some(m) = &self.media {
            y += &format!(
                "  - type: replace-media-urls\n    params:\n      download_timeout: {}\n      max_concurrent_downloads: {}\n      max_multimodal_entries: {}\n      max_download_size: {}\n      allow_private_networks: {}\n      allowed_domains: [{}]\n",
                d(m.download_timeout),
                m.max_concurrent_downloads,
                m.max_entries,
                m.max_download_mib,
                m.allow_private_networks,
                // JSON strings are YAML flow scalars: any domain text reads back as itself.
                m.allowed_domains
                    .iter()
                    .map(|d| serde_json::Value::from(d.as_str()).to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
            );
        }
        if let Some(r) = &self.render {
            y += &format!(
                "  - type: render\n    params:\n      address: http://{}\n      timeout: {}\n      max_idle_conns_per_host: {}\n      idle_conn_timeout: {}\n      max_total_tokens: {}\n      max_total_placeholder_tokens: {}\n",
                r.address,
                d(r.timeout),
                r.max_idle_per_host,
                d(r.idle_timeout),
                r.max_total_tokens,
                r.max_total_placeholder_tokens,
            );
        }
        if self.conditional_decode {
            y += "  - type: conditional-decode\n";
        }
        if let Some(n) = self.encode_max_parallel {
            y += &format!("  - type: encode\n    params:\n      max_parallel: {n}\n");
        }
        y += "  - type: prefill\n  - type: decode\n";
        y
    }

    /// The `tracing` filter for `log_level`: `warn`, `info`, `debug` or `trace` (llm-d resets a
    /// negative level to 2).
    pub fn log_filter(&self) -> &'static str {
        log_filter(self.log_level)
    }
}

/// `d` in whole `unit`s, rounded up (so that a positive duration never becomes 0, which the
/// flags read as "none"), at most `cap`; zero stays zero.
fn units_up(d: Duration, unit: Duration, cap: u64) -> u64 {
    let n = d.as_nanos().div_ceil(unit.as_nanos().max(1));
    u64::try_from(n).unwrap_or(u64::MAX).min(cap)
}

/// `d` as a Go duration string that reads back to the same value: whole milliseconds as
/// `Nms`, else `Nus`, else `Nns`.
fn go_duration(d: Duration) -> String {
    let ns = d.as_nanos();
    if ns.is_multiple_of(1_000_000) {
        format!("{}ms", ns / 1_000_000)
    } else if ns.is_multiple_of(1_000) {
        format!("{}us", ns / 1_000)
    } else {
        format!("{ns}ns")
    }
}

/// See [`CoordinatorConfig::log_filter`].
pub fn log_filter(level: i64) -> &'static str {
    match level {
        i64::MIN..=-1 | 2 => "info",
        0 | 1 => "warn",
        3 | 4 => "debug",
        _ => "trace",
    }
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
#[cfg(test)]
mod tests_durations;
