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
//! | `server.listen_addr` | `:8080` (every IPv4 interface) | `--host`, `--port` |
//! | `server.read_timeout` | 30s | `--client-header-timeout-ms`, `--client-body-timeout-ms` |
//! | `server.write_timeout` | 120s | `--leg-deadline-secs` (non-streamed legs) |
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
//! | step `render` (`address` required; `timeout` 30s, `max_idle_conns_per_host` 100, `idle_conn_timeout` 90s, `max_total_tokens` 0, `max_total_placeholder_tokens` 0) | absent | `--render-address`, `--render-timeout-ms`, `--render-max-idle-per-host`, `--render-idle-timeout-ms`, `--render-max-total-tokens`, `--render-max-total-placeholder-tokens` |
//!
//! A zero duration means no timeout, as in Go (the flags' largest value, one year).
//!
//! Environment variables override the file as in llm-d (env > file > default):
//! `COORDINATOR_` + the key path in capitals with `.` as `_`, e.g.
//! `COORDINATOR_SERVER_MAX_REQUEST_BODY_SIZE`, for every key above that is not inside
//! `pipeline.steps` ([`ENV_KEYS`]). An empty variable is ignored.
//!
//! Refused at start, with a message naming the key: unknown keys, `kv-sglang`,
//! `use_openai_format: false` without a `render` step, the `replace-media-urls` step,
//! `ec-nixl` on an encode step, per-step connector or
//! format overrides that differ from the pipeline's, `https` gateways, and steps out of order.

mod parse;
pub mod raw;
pub mod steps;

use crate::args::ServeArgs;
use parse::{gateway_address, key_line, listen_addr, set_from_env, step_line};
use pdgate_coordinator::KvConnector;
use pdgate_scheduler::config::ConfigErrors;
use pdgate_scheduler::ConfigError;
use raw::{GoDuration, RawFile};
use std::time::Duration;
use steps::{Step, DEFAULT_ENCODE_MAX_PARALLEL};

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
    /// Host to bind (`0.0.0.0` for `:PORT`).
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
            let text = crate::args::read_config_file(path).ok()?;
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
        let mut raw: RawFile = match serde_yaml_ng::from_str(yaml) {
            Ok(r) => r,
            // An empty file is all defaults (and then misses `gateway.address`).
            Err(_) if yaml.trim().is_empty() => RawFile::default(),
            Err(e) => {
                let line = e.location().map(|l| l.line());
                return Err(err(line, parse::name_the_key(yaml, line, &e.to_string())).into());
            }
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
        // Go reads a zero timeout as "none": the flags' largest value (one year).
        let max_secs = crate::resilience_args::MAX_TIMEOUT_SECS;
        let ms = |d: Duration| match d.as_millis() as u64 {
            0 => max_secs * 1000,
            n => n,
        };
        let secs = |d: Duration| match d.as_secs_f64().ceil() as u64 {
            0 => max_secs,
            n => n.min(max_secs),
        };
        args.host = self.host.clone();
        args.port = self.port;
        args.client_limits.client_header_timeout_ms = ms(self.read_timeout);
        args.client_limits.client_body_timeout_ms = ms(self.read_timeout);
        args.resilience.leg_deadline_secs = secs(self.write_timeout);
        args.shutdown_grace_ms = self.shutdown_timeout.as_millis() as u64;
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
        let d = |d: Duration| format!("{}ms", d.as_millis());
        let mut y = format!(
            "log_level: {}\nserver:\n  listen_addr: \"{}:{}\"\n  read_timeout: {}\n  write_timeout: {}\n  shutdown_timeout: {}\n  max_request_body_size: {}\ngateway:\n  address: http://{}\n  max_idle_conns_per_host: {}\n  idle_conn_timeout: {}\n  timeout: {}\npipeline:\n  kv_connector: {}\n  use_openai_format: {}\n",
            self.log_level,
            if self.host.contains(':') { format!("[{}]", self.host) } else { self.host.clone() },
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
        if let Some(h) = &self.forward_response_headers {
            y += &format!("  forward_response_headers: [{}]\n", h.join(", "));
        }
        y += "  steps:\n";
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

/// See [`CoordinatorConfig::log_filter`].
pub fn log_filter(level: i64) -> &'static str {
    match level {
        i64::MIN..=-1 | 2 => "info",
        0 | 1 => "warn",
        3 | 4 => "debug",
        _ => "trace",
    }
}

/// Why an `ec_connector` value is refused (only `ec-shared-storage` is spoken).
fn ec_refusal(ec: &str) -> String {
    match ec {
        "ec-nixl" => "ec_connector `ec-nixl` (llm-d's map of NIXL descriptors by mm_hash) is not \
                      supported: pdgate's coordinator speaks `ec-shared-storage` (vLLM \
                      ECExampleConnector)"
            .into(),
        other => format!("unknown ec_connector `{other}`: use `ec-shared-storage`"),
    }
}

/// Where an error points.
#[derive(Clone, Copy)]
enum Key {
    Step(usize),
    Path(&'static str),
    None,
}

/// The settings of `raw`; `steps` are its parsed steps, `None` when one did not parse (the
/// step checks are then skipped; the parse errors are reported).
fn build(raw: &RawFile, steps: Option<&[Step]>) -> Result<CoordinatorConfig, (Key, String)> {
    let checked = steps.is_some();
    let steps = steps.unwrap_or_default();
    let d = |v: &Option<GoDuration>, default: Duration| v.map_or(default, |g| g.0);
    let (host, port) = listen_addr(
        raw.server
            .listen_addr
            .as_deref()
            .unwrap_or(defaults::LISTEN_ADDR),
    )
    .map_err(|m| (Key::Path("server.listen_addr"), m))?;
    let mib = match raw.server.max_request_body_size {
        None | Some(0) => defaults::MAX_REQUEST_BODY_MIB,
        Some(n) if n < 0 => {
            return Err((
                Key::Path("server.max_request_body_size"),
                format!("must be positive (MiB), got {n}"),
            ))
        }
        Some(n) if n > 1 << 20 => {
            return Err((
                Key::Path("server.max_request_body_size"),
                format!("{n} MiB is more than 1 TiB"),
            ))
        }
        Some(n) => n,
    };
    let gateway = match raw.gateway.address.as_deref() {
        Some(a) => gateway_address(a).map_err(|m| (Key::Path("gateway.address"), m))?,
        None => {
            return Err((
                Key::Path("gateway"),
                "`gateway.address` is required: the base URL of the Inference Gateway, e.g. \
                 `http://inference-gateway:80`"
                    .into(),
            ))
        }
    };
    let idle = raw
        .gateway
        .max_idle_conns_per_host
        .unwrap_or(defaults::MAX_IDLE_CONNS_PER_HOST);
    if idle < 0 {
        return Err((
            Key::Path("gateway.max_idle_conns_per_host"),
            format!("must not be negative, got {idle}"),
        ));
    }
    let kv_connector: KvConnector = match raw.pipeline.kv_connector.as_deref() {
        None | Some("") => KvConnector::SharedStorage,
        Some(k) => k
            .parse()
            .map_err(|m| (Key::Path("pipeline.kv_connector"), m))?,
    };
    let ec_connector = raw.pipeline.ec_connector.as_deref().unwrap_or("");
    if !matches!(ec_connector, "" | "ec-shared-storage") {
        return Err((Key::Path("pipeline.ec_connector"), ec_refusal(ec_connector)));
    }
    let tokens_in = raw.pipeline.use_openai_format == Some(false);
    if tokens_in && !steps.iter().any(|s| matches!(s, Step::Render(_))) && checked {
        return Err((
            Key::Path("pipeline.use_openai_format"),
            "`false` needs a `render` step: the tokens-in prefill leg sends the token ids \
             render produces"
                .into(),
        ));
    }
    if checked {
        steps::check_order(steps).map_err(|(i, m)| (i.map_or(Key::None, Key::Step), m))?;
    }
    let mut encode_max_parallel = None;
    let mut render = None;
    for (i, step) in steps.iter().enumerate() {
        if let Some(why) = step.refusal() {
            return Err((Key::Step(i), why.to_string()));
        }
        if let Some(f) = step.use_openai_format().filter(|f| *f == tokens_in) {
            return Err((
                Key::Step(i),
                format!(
                    "`use_openai_format: {f}` differs from the pipeline's `{}`: pdgate applies \
                     one format to the whole pipeline",
                    !tokens_in
                ),
            ));
        }
        match step {
            Step::Prefill(p) | Step::Decode(p) => {
                if let Some(ec) = p.ec_connector.as_deref() {
                    if ec != "ec-shared-storage" {
                        return Err((Key::Step(i), ec_refusal(ec)));
                    }
                }
                if let Some(k) = p.kv_connector.as_deref() {
                    let k: KvConnector = k.parse().map_err(|m| (Key::Step(i), m))?;
                    if k != kv_connector {
                        return Err((
                            Key::Step(i),
                            format!(
                                "kv_connector `{k}` differs from the pipeline's `{kv_connector}`: \
                                 prefill and decode must speak one connector"
                            ),
                        ));
                    }
                }
            }
            Step::Encode(e) => {
                let ec = e
                    .ec_connector
                    .as_deref()
                    .filter(|c| !c.is_empty())
                    .unwrap_or(if ec_connector.is_empty() {
                        "ec-shared-storage"
                    } else {
                        ec_connector
                    });
                if ec != "ec-shared-storage" {
                    return Err((Key::Step(i), ec_refusal(ec)));
                }
                let n = e
                    .max_parallel
                    .map_or(DEFAULT_ENCODE_MAX_PARALLEL, |n| n as usize);
                if n > MAX_ENCODE_PARALLEL {
                    return Err((
                        Key::Step(i),
                        format!("max_parallel must be at most {MAX_ENCODE_PARALLEL}, got {n}"),
                    ));
                }
                encode_max_parallel = Some(n);
            }
            Step::Render(r) => render = Some(r.settings().map_err(|m| (Key::Step(i), m))?),
            _ => {}
        }
    }
    if let Some(h) = &raw.pipeline.forward_response_headers {
        for (i, n) in h.iter().enumerate() {
            let bad = |why: String| (Key::Path("pipeline.forward_response_headers"), why);
            if n.trim().is_empty() {
                return Err(bad(format!("entry {i} must not be empty")));
            }
            if http::HeaderName::from_bytes(n.trim().as_bytes()).is_err() {
                return Err(bad(format!("entry {i} `{n}` is not a header name")));
            }
        }
    }
    Ok(CoordinatorConfig {
        log_level: raw.log_level.unwrap_or(defaults::LOG_LEVEL),
        host,
        port,
        read_timeout: d(&raw.server.read_timeout, defaults::READ_TIMEOUT),
        write_timeout: d(&raw.server.write_timeout, defaults::WRITE_TIMEOUT),
        shutdown_timeout: d(&raw.server.shutdown_timeout, defaults::SHUTDOWN_TIMEOUT),
        max_request_body_bytes: (mib as usize) << 20,
        gateway,
        max_idle_per_host: idle as usize,
        idle_conn_timeout: d(&raw.gateway.idle_conn_timeout, defaults::IDLE_CONN_TIMEOUT),
        gateway_timeout: d(&raw.gateway.timeout, defaults::GATEWAY_TIMEOUT),
        kv_connector,
        conditional_decode: steps
            .iter()
            .any(|s| matches!(s, Step::ConditionalDecode(_))),
        encode_max_parallel,
        forward_response_headers: raw.pipeline.forward_response_headers.clone(),
        render,
        tokens_in,
    })
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
