//! llm-d's coordinator YAML as written (llm-d-router `config/coordinator/coordinator.yaml`,
//! loader `pkg/coordinator/config/config.go`), decoded strictly: an unknown key is an error
//! naming it and its line (llm-d's loader ignores unknown keys; a typo there silently keeps a
//! default, here it stops the start).
//!
//! Durations are Go duration strings (`30s`, `1m30s`, `500ms`); a bare number is refused
//! (llm-d would read it as nanoseconds). Sizes are integers.

use serde::{Deserialize, Deserializer};
use serde_yaml_ng::Value;
use std::time::Duration;

/// Top level.
#[derive(Debug, Default, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a coordinator config (log_level, server, gateway, pipeline)"
)]
pub struct RawFile {
    /// 1 warning, 2 info (default), 3 verbose, 4 debug, 5 trace.
    pub log_level: Option<i64>,
    /// The client-facing HTTP server.
    #[serde(default)]
    pub server: RawServer,
    /// The outbound client to the Inference Gateway.
    #[serde(default)]
    pub gateway: RawGateway,
    /// Steps and connectors.
    #[serde(default)]
    pub pipeline: RawPipeline,
}

/// `server:`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "the `server` settings")]
pub struct RawServer {
    /// `host:port`, `:port` (every interface) or `[v6]:port`.
    pub listen_addr: Option<String>,
    /// Time for a client to send its request (headers and body).
    pub read_timeout: Option<GoDuration>,
    /// Cap on a whole response, streamed or not.
    pub write_timeout: Option<GoDuration>,
    /// Drain time on SIGTERM.
    pub shutdown_timeout: Option<GoDuration>,
    /// Request body limit, MiB (0 means the default).
    pub max_request_body_size: Option<i64>,
}

/// `gateway:`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "the `gateway` settings")]
pub struct RawGateway {
    /// Base URL of the gateway, e.g. `http://inference-gateway:80`.
    pub address: Option<String>,
    /// Idle keep-alive connections kept per host.
    pub max_idle_conns_per_host: Option<i64>,
    /// How long an idle keep-alive connection survives.
    pub idle_conn_timeout: Option<GoDuration>,
    /// Time to a leg's response head (the body is not bounded by it).
    pub timeout: Option<GoDuration>,
}

/// `pipeline:`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "the `pipeline` settings")]
pub struct RawPipeline {
    /// `kv-nixl`, `kv-shared-storage` (default) or `kv-sglang`.
    pub kv_connector: Option<String>,
    /// `ec-nixl` or `ec-shared-storage` (default).
    pub ec_connector: Option<String>,
    /// `true` (default): legs use the client's OpenAI path; `false`: tokens-in
    /// `/inference/v1/generate`.
    pub use_openai_format: Option<bool>,
    /// Steps in the order they run.
    #[serde(default)]
    pub steps: Vec<RawStep>,
    /// Response headers carried from phase to phase (llm-d PR #2301).
    pub forward_response_headers: Option<Vec<String>>,
}

/// `pipeline.steps[]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a step `{type, params}`")]
pub struct RawStep {
    /// Step type.
    #[serde(rename = "type")]
    pub step_type: String,
    /// Step parameters, decoded by the step ([`super::steps`]).
    pub params: Option<Value>,
}

/// A Go `time.Duration` string.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GoDuration(pub Duration);

impl<'de> Deserialize<'de> for GoDuration {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match Value::deserialize(d)? {
            Value::String(s) => {
                let d = pdgate_scheduler::flow::duration::parse(&s)
                    .map_err(serde::de::Error::custom)?;
                // Go's time.Duration is an int64 of nanoseconds (about 2562047h).
                if d.as_nanos() > i64::MAX as u128 {
                    return Err(serde::de::Error::custom(format!(
                        "duration `{s}` is over Go's largest (2562047h47m16.854775807s)"
                    )));
                }
                Ok(GoDuration(d))
            }
            other => Err(serde::de::Error::custom(format!(
                "expected a duration string such as `30s`, got {}",
                super::parse::describe(&other)
            ))),
        }
    }
}
