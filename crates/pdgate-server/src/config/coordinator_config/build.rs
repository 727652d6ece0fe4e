//! Building the checked settings from the decoded file: defaults, bounds, the steps and their
//! refusals, each error pointing at its key or step ([`Key`]).

use super::parse::{listen_addr, upstream_address};
use super::raw::{GoDuration, RawFile};
use super::steps::{self, Step, DEFAULT_ENCODE_MAX_PARALLEL};
use super::{defaults, CoordinatorConfig, MAX_ENCODE_PARALLEL};
use pdgate_coordinator::header_rules::ForwardRules;
use pdgate_coordinator::KvConnector;
use std::time::Duration;

/// Why an `ec_connector` value is refused (only `ec-shared-storage` is spoken).
pub(super) fn ec_refusal(ec: &str) -> String {
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
pub(super) enum Key {
    Step(usize),
    Path(&'static str),
    None,
}

/// The settings of `raw`; `steps` are its parsed steps, `None` when one did not parse (the
/// step checks are then skipped; the parse errors are reported).
pub(super) fn build(
    raw: &RawFile,
    steps: Option<&[Step]>,
) -> Result<CoordinatorConfig, (Key, String)> {
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
        Some(a) => upstream_address(a, "gateway").map_err(|m| (Key::Path("gateway.address"), m))?,
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
    let mut media = None;
    for (i, step) in steps.iter().enumerate() {
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
            Step::ReplaceMediaUrls(m) => media = Some(m.settings().map_err(|m| (Key::Step(i), m))?),
            _ => {}
        }
    }
    if let Some(h) = &raw.pipeline.forward_response_headers {
        // The same rules `serve` applies to the flag, so `check-config` refuses what `serve`
        // would, naming the file's key and line.
        let bad = |why: String| (Key::Path("pipeline.forward_response_headers"), why);
        if let Some(i) = h.iter().position(|n| n.trim().is_empty()) {
            return Err(bad(format!("entry {i} must not be empty")));
        }
        ForwardRules::new(h).map_err(|e| bad(e.to_string()))?;
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
        media,
        tokens_in,
    })
}
