//! llm-d's coordinator step `render` (llm-d-router `pkg/coordinator/steps/render.go`): before
//! any leg, the request is tokenized by a render service (vLLM's CPU-only render endpoints,
//! `POST /v1/completions/render` and `POST /v1/chat/completions/render`), so that every leg
//! carries the engine's own token ids:
//!
//! - `/v1/completions` with a text `prompt`: the whole body goes to the completions render;
//!   its answer is a list of exactly one object, whose `token_ids` replace `prompt`. A
//!   token-id prompt is not sent.
//! - `/v1/chat/completions`: the whole body goes to the chat render; its answer is one
//!   object. The body gains `tokens: {"token_ids": [...]}` (plus `features` when the answer
//!   lists multimodal hashes), llm-d's field; pdgate's routers schedule on those ids, vLLM
//!   ignores the field.
//! - `/inference/v1/generate`: no call; only the limits are checked.
//! - Other APIs are left as they are (llm-d renders only these three).
//!
//! Limits (400): more than `max_total_tokens` prompt tokens (`too many total tokens: got N,
//! max M`), more than `max_total_placeholder_tokens` multimodal placeholder tokens; 0 is no
//! limit. A render answer other than 200 is passed on as the request's failure: a 4xx keeps
//! its status (`render rejected the request: HTTP 4xx`), anything else is a 502; no answer
//! within the timeout is a 504.

use crate::dispatch::upstream::{PoolSettings, Upstream};
use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method};
use pdgate_api::request_fields::RENDERED_TOKENS_FIELD as TOKENS_FIELD;
use pdgate_api::{ApiKind, InferenceRequest, PromptInput};
use pdgate_coordinator::json_patch::{patch_object, Edit};
use pdgate_coordinator::FailureKind;
use serde::Deserialize;
use serde_json::Value;
use std::time::Duration;

/// Default per-call timeout, ms (llm-d `render.timeout` 30s).
pub const DEFAULT_RENDER_TIMEOUT_MS: u64 = 30_000;
/// Default idle connections kept to the render service (llm-d 100).
pub const DEFAULT_RENDER_MAX_IDLE_PER_HOST: usize = 100;
/// Default idle connection lifetime, ms (llm-d 90s).
pub const DEFAULT_RENDER_IDLE_TIMEOUT_MS: u64 = 90_000;
/// Largest render answer read, bytes.
const MAX_RENDER_ANSWER_BYTES: usize = 64 << 20;

/// `pdgate serve` flags of the render step (llm-d coordinator `render` step params).
#[derive(clap::Args, Debug, Clone, PartialEq)]
pub struct RenderArgs {
    /// Tokenize each request with this render service before its legs (`host:port` or
    /// `http://host:port`; llm-d coordinator step `render`, `address`). Off when absent.
    #[arg(long, value_name = "URL")]
    pub render_address: Option<String>,
    /// Per render call, ms (`render.timeout`).
    #[arg(long, default_value_t = DEFAULT_RENDER_TIMEOUT_MS, value_parser = clap::value_parser!(u64).range(1..))]
    pub render_timeout_ms: u64,
    /// Idle connections kept to the render service (`render.max_idle_conns_per_host`).
    #[arg(long, default_value_t = DEFAULT_RENDER_MAX_IDLE_PER_HOST)]
    pub render_max_idle_per_host: usize,
    /// Idle connection lifetime to the render service, ms (`render.idle_conn_timeout`).
    #[arg(long, default_value_t = DEFAULT_RENDER_IDLE_TIMEOUT_MS)]
    pub render_idle_timeout_ms: u64,
    /// Most prompt tokens a request may render to; 0 = no limit (`render.max_total_tokens`).
    #[arg(long, default_value_t = 0)]
    pub render_max_total_tokens: usize,
    /// Most multimodal placeholder tokens a request may render to; 0 = no limit
    /// (`render.max_total_placeholder_tokens`).
    #[arg(long, default_value_t = 0)]
    pub render_max_total_placeholder_tokens: usize,
}

impl RenderArgs {
    /// The step, when `--render-address` is given.
    ///
    /// Errors: an address that is not `host:port` or `http://host:port` (https is refused:
    /// pdgate's upstream client speaks plain HTTP).
    pub fn step(&self) -> Result<Option<RenderStep>, String> {
        let Some(a) = &self.render_address else {
            return Ok(None);
        };
        let address = a.strip_prefix("http://").unwrap_or(a).trim_end_matches('/');
        if address.is_empty() || address.contains('/') || address.contains("://") {
            return Err(format!(
                "--render-address `{a}`: expected host:port or http://host:port"
            ));
        }
        let pool = PoolSettings {
            max_idle_per_host: self.render_max_idle_per_host,
            idle_timeout: Duration::from_millis(self.render_idle_timeout_ms),
        };
        let timeout = Duration::from_millis(self.render_timeout_ms);
        Ok(Some(RenderStep {
            upstream: Upstream::new(timeout, pool),
            address: address.to_string(),
            timeout,
            max_total_tokens: self.render_max_total_tokens,
            max_placeholder_tokens: self.render_max_total_placeholder_tokens,
        }))
    }
}

/// The render step, ready to run (see the module docs).
#[derive(Clone)]
pub struct RenderStep {
    upstream: Upstream,
    address: String,
    timeout: Duration,
    max_total_tokens: usize,
    max_placeholder_tokens: usize,
}

/// Why the render step failed a request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RenderError {
    /// Over a limit, or a body the step cannot render (400).
    #[error("{0}")]
    Invalid(String),
    /// The render service answered a 4xx: passed on with its status and the service's own
    /// message (its `error.message`, else the start of its body).
    #[error("render rejected the request: HTTP {0}: {1}")]
    Rejected(u16, String),
    /// The render service failed, or answered what the step cannot read (502).
    #[error("render failed: {0}")]
    Failed(String),
    /// No answer within the timeout (504).
    #[error("render did not answer within {0} ms")]
    Timeout(u128),
}

impl RenderError {
    /// The client status.
    pub fn status(&self) -> u16 {
        match self {
            RenderError::Invalid(_) => 400,
            RenderError::Rejected(s, _) => *s,
            RenderError::Failed(_) => 502,
            RenderError::Timeout(_) => 504,
        }
    }
}

/// The parts of a render answer the step reads.
#[derive(Deserialize)]
struct Rendered {
    token_ids: Vec<u32>,
    #[serde(default)]
    features: Option<Value>,
}

impl RenderStep {
    /// Renders `req` (see the module docs): the new body, or `None` when it stays as is.
    ///
    /// Errors: [`RenderError`].
    pub async fn apply(
        &self,
        req: &InferenceRequest,
        request_id: &HeaderValue,
    ) -> Result<Option<Bytes>, RenderError> {
        match (req.kind, &req.prompt) {
            (ApiKind::Generate, PromptInput::Tokens(ids)) => {
                self.check(ids.len(), req.body.get("features").as_ref())?;
                Ok(None)
            }
            (ApiKind::Completions, PromptInput::Tokens(ids)) => {
                self.check(ids.len(), None)?;
                Ok(None)
            }
            (ApiKind::Completions, PromptInput::Text(_)) => {
                let answer = self.call("/v1/completions/render", req, request_id).await?;
                let mut list: Vec<Rendered> = serde_json::from_slice(&answer)
                    .map_err(|e| RenderError::Failed(format!("answer is not a list: {e}")))?;
                if list.len() != 1 {
                    return Err(RenderError::Failed(format!(
                        "answer lists {} prompts, expected 1",
                        list.len()
                    )));
                }
                let r = list.remove(0);
                self.check(r.token_ids.len(), r.features.as_ref())?;
                let ids = serde_json::to_vec(&r.token_ids).unwrap_or_default();
                Ok(Some(Bytes::from(patch_object(
                    &req.body,
                    &[Edit::Set("prompt", &ids)],
                ))))
            }
            (ApiKind::ChatCompletions, _) => {
                let answer = self
                    .call("/v1/chat/completions/render", req, request_id)
                    .await?;
                let r: Rendered = serde_json::from_slice(&answer)
                    .map_err(|e| RenderError::Failed(format!("answer unreadable: {e}")))?;
                self.check(r.token_ids.len(), r.features.as_ref())?;
                let mut tokens = serde_json::json!({ "token_ids": r.token_ids });
                if let Some(f) = r.features.filter(|f| placeholder_tokens(f).1 > 0) {
                    tokens["features"] = f;
                }
                let tokens = tokens.to_string();
                Ok(Some(Bytes::from(patch_object(
                    &req.body,
                    &[Edit::Set(TOKENS_FIELD, tokens.as_bytes())],
                ))))
            }
            _ => Ok(None),
        }
    }

    /// The limits (0 = none).
    fn check(&self, tokens: usize, features: Option<&Value>) -> Result<(), RenderError> {
        if self.max_total_tokens > 0 && tokens > self.max_total_tokens {
            return Err(RenderError::Invalid(format!(
                "too many total tokens: got {tokens}, max {}",
                self.max_total_tokens
            )));
        }
        let placeholders = features.map_or(0, |f| placeholder_tokens(f).0);
        if self.max_placeholder_tokens > 0 && placeholders > self.max_placeholder_tokens {
            return Err(RenderError::Invalid(format!(
                "too many placeholder tokens: got {placeholders}, max {}",
                self.max_placeholder_tokens
            )));
        }
        Ok(())
    }

    /// POSTs the request's body to `path` on the render service; its 200 answer.
    async fn call(
        &self,
        path: &str,
        req: &InferenceRequest,
        request_id: &HeaderValue,
    ) -> Result<Bytes, RenderError> {
        let mut h = HeaderMap::new();
        h.insert(
            http::header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        h.insert(pdgate_api::headers::REQUEST_ID, request_id.clone());
        let t = crate::dispatch::timeouts::LegTimeouts {
            streamed: false,
            head: self.timeout,
            body: self.timeout,
            total: Some(self.timeout),
        };
        let sent = self
            .upstream
            .send(
                "render",
                Method::POST,
                format!("http://{}{path}", self.address),
                h,
                req.body.bytes().clone(),
                t,
                MAX_RENDER_ANSWER_BYTES,
            )
            .await;
        let resp = match sent {
            Ok(r) => r,
            Err(e)
                if matches!(
                    e.kind,
                    FailureKind::Deadline | FailureKind::HeadTimeout | FailureKind::BodyTimeout
                ) =>
            {
                tracing::warn!(address = %self.address, error = %e, "render step timed out");
                return Err(RenderError::Timeout(self.timeout.as_millis()));
            }
            Err(e) => {
                tracing::warn!(address = %self.address, error = %e, "render step failed");
                return Err(RenderError::Failed(e.to_string()));
            }
        };
        match resp.status {
            200 => Ok(resp.body.into_full().unwrap_or_default()),
            s @ 400..=499 => {
                tracing::info!(address = %self.address, status = s, "render rejected a request");
                let body = resp.body.into_full().unwrap_or_default();
                Err(RenderError::Rejected(s, error_text(&body)))
            }
            s => {
                tracing::warn!(address = %self.address, status = s, "render answered an error");
                Err(RenderError::Failed(format!("HTTP {s}")))
            }
        }
    }
}

/// The message of an error answer: its `error.message` (OpenAI / vLLM) or `message`, else
/// its first 200 bytes.
fn error_text(body: &[u8]) -> String {
    let v: Option<Value> = serde_json::from_slice(body).ok();
    let message = v.as_ref().and_then(|v| {
        v.pointer("/error/message")
            .or_else(|| v.get("message"))
            .and_then(Value::as_str)
            .map(str::to_string)
    });
    message.unwrap_or_else(|| String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned())
}

/// `(placeholder tokens, media items)` of render `features`: the summed
/// `mm_placeholders.<modality>[].length` and the number of `mm_hashes`.
fn placeholder_tokens(features: &Value) -> (usize, usize) {
    let sum = |v: Option<&Value>, f: &dyn Fn(&Value) -> usize| {
        v.and_then(Value::as_object).map_or(0, |m| {
            m.values()
                .filter_map(Value::as_array)
                .flatten()
                .map(f)
                .sum()
        })
    };
    (
        sum(features.get("mm_placeholders"), &|p| {
            p.get("length").and_then(Value::as_u64).unwrap_or(0) as usize
        }),
        sum(features.get("mm_hashes"), &|_| 1),
    )
}

#[cfg(test)]
#[path = "render_step_tests.rs"]
mod tests;
