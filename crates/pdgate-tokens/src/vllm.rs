//! The `vllm` backend: an engine's render endpoints (vLLM 0.32, `vllm/entrypoints/scale_out/
//! render/api_router.py`), which apply the engine's own chat template and tokenizer.
//!
//! - `POST {base}/v1/completions/render`, body a completions request → **a JSON list**, one
//!   `GenerateRequest` per prompt, each with `token_ids: [int]` (plus `request_id`,
//!   `sampling_params`, `model`, …, ignored here).
//! - `POST {base}/v1/chat/completions/render`, body a chat request → **one** `GenerateRequest`
//!   object with `token_ids`.
//!
//! On `vllm serve` these answer only with `--enable-scale-out` (or `--tokens-only`, or
//! `vllm launch render`); otherwise 403 `PermissionDeniedError` — a fallback like any other.
//! The body sent is `{"model", "prompt" | "messages"}` plus the request's own rendering
//! fields ([`crate::input::COMPLETION_RENDER_FIELDS`], [`crate::input::CHAT_RENDER_FIELDS`])
//! copied verbatim, so the engine renders exactly what it will serve.

use crate::input::{PromptSource, CHAT_RENDER_FIELDS, COMPLETION_RENDER_FIELDS};
use pdgate_api::{ApiKind, InferenceRequest};
use serde::Deserialize;
use std::time::Duration;

/// Path of the completions render endpoint.
pub const COMPLETIONS_RENDER_PATH: &str = "/v1/completions/render";
/// Path of the chat render endpoint.
pub const CHAT_RENDER_PATH: &str = "/v1/chat/completions/render";
/// Response bodies larger than this are not read (bytes): a render answer is token ids.
const MAX_RESPONSE_BYTES: usize = 16 << 20;

/// Why a render call gave no token ids.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RenderError {
    /// The engine answered a non-2xx status (403 when its render endpoints are disabled).
    #[error("render answered {0}")]
    Status(u16),
    /// No answer within the timeout.
    #[error("render timed out")]
    Timeout,
    /// Connection refused, reset, …
    #[error("render transport error: {0}")]
    Transport(String),
    /// A 2xx body that is not a render answer (or has no token ids).
    #[error("render answer unreadable: {0}")]
    BadResponse(String),
    /// No engine to ask (no `vllm.url` and none serving the model is ready).
    #[error("no engine to render on")]
    NoEngine,
}

impl RenderError {
    /// A short label for metrics: `status`, `timeout`, `transport`, `bad_response`,
    /// `no_engine`.
    pub fn label(&self) -> &'static str {
        match self {
            RenderError::Status(_) => "status",
            RenderError::Timeout => "timeout",
            RenderError::Transport(_) => "transport",
            RenderError::BadResponse(_) => "bad_response",
            RenderError::NoEngine => "no_engine",
        }
    }
}

/// A render client: a pooled HTTP/1 client and the per-call timeout.
#[derive(Debug, Clone)]
pub struct VllmRenderer {
    client: reqwest::Client,
    timeout: Duration,
}

#[derive(Deserialize)]
struct Rendered {
    token_ids: Vec<u32>,
}

impl VllmRenderer {
    /// A renderer whose calls each end after `timeout`.
    pub fn new(timeout: Duration) -> Self {
        VllmRenderer {
            client: reqwest::Client::builder()
                .http1_only()
                .pool_max_idle_per_host(16)
                .build()
                .unwrap_or_default(),
            timeout,
        }
    }

    /// The render path and JSON body for `req`, with `model` as the model name: chat
    /// messages go to the chat render with their rendering fields verbatim; a completions
    /// prompt with its fields verbatim; any other text (tokenize's prompt, embeddings' input,
    /// the flattened text of messages and responses) as a completions prompt.
    pub fn request_body(req: &InferenceRequest, model: &str) -> (&'static str, String) {
        let model = serde_json::Value::from(model).to_string();
        let mut body = format!("{{\"model\":{model}");
        let verbatim = |body: &mut String, fields: &[&str]| {
            for field in fields {
                if let Some(raw) = req.body.raw(field) {
                    body.push_str(&format!(",\"{field}\":{raw}"));
                }
            }
        };
        let path = match PromptSource::of(req) {
            PromptSource::Chat(_) => {
                verbatim(&mut body, &["messages"]);
                verbatim(&mut body, CHAT_RENDER_FIELDS);
                CHAT_RENDER_PATH
            }
            _ if req.kind == ApiKind::Completions => {
                verbatim(&mut body, &["prompt"]);
                verbatim(&mut body, COMPLETION_RENDER_FIELDS);
                COMPLETIONS_RENDER_PATH
            }
            PromptSource::Text {
                text,
                add_special_tokens,
            } => {
                let prompt = serde_json::Value::from(text);
                body.push_str(&format!(
                    ",\"prompt\":{prompt},\"add_special_tokens\":{add_special_tokens}"
                ));
                COMPLETIONS_RENDER_PATH
            }
            PromptSource::Tokens(ids) => {
                let prompt = serde_json::Value::from(ids);
                body.push_str(&format!(",\"prompt\":{prompt}"));
                COMPLETIONS_RENDER_PATH
            }
        };
        body.push('}');
        (path, body)
    }

    /// Reads the token ids out of a render answer from `path` (a list from the completions
    /// render, one object from the chat render).
    ///
    /// Errors: [`RenderError::BadResponse`].
    pub fn parse_response(path: &str, body: &[u8]) -> Result<Vec<u32>, RenderError> {
        let bad = |e: serde_json::Error| RenderError::BadResponse(e.to_string());
        match path {
            CHAT_RENDER_PATH => serde_json::from_slice::<Rendered>(body)
                .map(|r| r.token_ids)
                .map_err(bad),
            _ => serde_json::from_slice::<Vec<Rendered>>(body)
                .map_err(bad)?
                .into_iter()
                .next()
                .map(|r| r.token_ids)
                .ok_or_else(|| RenderError::BadResponse("empty list".into())),
        }
    }

    /// Renders `req` on the engine at `base` (`http://host:port`, no trailing slash).
    ///
    /// Errors: [`RenderError`]; never panics, always ends within the timeout.
    pub async fn render(
        &self,
        base: &str,
        req: &InferenceRequest,
        model: &str,
    ) -> Result<Vec<u32>, RenderError> {
        let (path, body) = Self::request_body(req, model);
        let resp = self
            .client
            .post(format!("{}{path}", base.trim_end_matches('/')))
            .header("content-type", "application/json")
            .timeout(self.timeout)
            .body(body)
            .send()
            .await
            .map_err(transport)?;
        let status = resp.status().as_u16();
        if !(200..300).contains(&status) {
            return Err(RenderError::Status(status));
        }
        if resp.content_length().unwrap_or(0) > MAX_RESPONSE_BYTES as u64 {
            return Err(RenderError::BadResponse("answer too large".into()));
        }
        let bytes = resp.bytes().await.map_err(transport)?;
        Self::parse_response(path, &bytes)
    }
}

/// A reqwest failure: the timeout (reqwest's per-request timeout covers connect, head and
/// body) or any other transport error.
fn transport(e: reqwest::Error) -> RenderError {
    match e.is_timeout() {
        true => RenderError::Timeout,
        false => RenderError::Transport(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_carry_the_prompt_and_rendering_fields_verbatim() {
        let r = InferenceRequest::parse(
            ApiKind::Completions,
            br#"{"model":"client","prompt":"a \"b\"","max_tokens":5,"add_special_tokens":false}"#,
        )
        .unwrap();
        assert_eq!(
            VllmRenderer::request_body(&r, "tiny"),
            (
                COMPLETIONS_RENDER_PATH,
                r#"{"model":"tiny","prompt":"a \"b\"","add_special_tokens":false}"#.to_string()
            )
        );
        let r = InferenceRequest::parse(
            ApiKind::ChatCompletions,
            br#"{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}],"add_generation_prompt":false}"#,
        )
        .unwrap();
        assert_eq!(
            VllmRenderer::request_body(&r, "m"),
            (
                CHAT_RENDER_PATH,
                r#"{"model":"m","messages":[{"role":"user","content":"hi"}],"add_generation_prompt":false}"#.to_string()
            )
        );
    }

    #[test]
    fn responses_list_for_completions_object_for_chat() {
        let list = br#"[{"request_id":"x","token_ids":[1,2,3],"sampling_params":{}}]"#;
        assert_eq!(
            VllmRenderer::parse_response(COMPLETIONS_RENDER_PATH, list),
            Ok(vec![1, 2, 3])
        );
        let obj = br#"{"request_id":"x","token_ids":[9],"features":null}"#;
        assert_eq!(
            VllmRenderer::parse_response(CHAT_RENDER_PATH, obj),
            Ok(vec![9])
        );
        assert!(matches!(
            VllmRenderer::parse_response(COMPLETIONS_RENDER_PATH, b"[]"),
            Err(RenderError::BadResponse(_))
        ));
        assert!(matches!(
            VllmRenderer::parse_response(CHAT_RENDER_PATH, list),
            Err(RenderError::BadResponse(_))
        ));
    }
}
