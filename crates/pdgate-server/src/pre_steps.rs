//! The coordinator steps that change a request before any leg runs, in llm-d's order:
//! `replace-media-urls` ([`crate::media_urls`]) then `render` ([`crate::render_step`]). They run on a
//! client's request (never on a phase leg a coordinator sends to this router), on the
//! router that receives it, whether it schedules itself or coordinates per-role routers.
//! Each is counted in `pdgate_pre_steps_total{step, outcome}` (`changed`, `unchanged`,
//! `failed`). A failure answers the request with the step's status.

use crate::app::AppState;
use crate::errors::ApiError;
use crate::media_urls::{MediaUrlArgs, MediaUrlSettings};
use crate::render_step::{RenderArgs, RenderStep};
use bytes::Bytes;
use http::HeaderValue;
use pdgate_api::InferenceRequest;

/// `pdgate serve` flags of the steps.
#[derive(clap::Args, Debug, Clone, PartialEq)]
pub struct PreStepArgs {
    /// The `replace-media-urls` step.
    #[command(flatten)]
    pub media: MediaUrlArgs,
    /// The `render` step.
    #[command(flatten)]
    pub render: RenderArgs,
    /// Send the prefill leg of a rendered chat request tokens-in, to
    /// `/inference/v1/generate` (llm-d coordinator `pipeline.use_openai_format: false`); the
    /// decode leg stays on `/v1/chat/completions`. Needs `--render-address`.
    #[arg(long, requires = "render_address")]
    pub tokens_in_prefill: bool,
}

/// The configured steps (none by default).
#[derive(Clone, Default)]
pub struct PreSteps {
    /// `replace-media-urls`, when `--replace-media-urls` is given.
    pub media: Option<MediaUrlSettings>,
    /// `render`, when `--render-address` is given.
    pub render: Option<RenderStep>,
    /// `--tokens-in-prefill`.
    pub tokens_in_prefill: bool,
}

impl PreStepArgs {
    /// The steps these flags turn on.
    ///
    /// Errors: a flag value the step cannot use, naming the flag.
    pub fn steps(&self) -> Result<PreSteps, String> {
        Ok(PreSteps {
            media: self.media.settings(),
            render: self.render.step()?,
            tokens_in_prefill: self.tokens_in_prefill,
        })
    }
}

impl PreSteps {
    /// Runs the configured steps on `req`, replacing its body (and re-reading it) when a
    /// step changes it.
    ///
    /// Errors: the first step's failure, as [`ApiError::Step`] with that step's status.
    pub async fn run(
        &self,
        state: &AppState,
        req: &mut InferenceRequest,
        rid: &HeaderValue,
    ) -> Result<(), ApiError> {
        if let Some(media) = &self.media {
            let outcome = crate::media_urls::replace_media_urls(media, req.body.bytes()).await;
            let outcome = outcome.map_err(|e| (e.status(), e.to_string()));
            apply(state, "replace-media-urls", req, outcome).await?;
        }
        if let Some(render) = &self.render {
            let outcome = render.apply(req, rid).await;
            let outcome = outcome.map_err(|e| (e.status(), e.to_string()));
            apply(state, "render", req, outcome).await?;
        }
        Ok(())
    }
}

/// Counts `step`'s `outcome` and applies it: a new body replaces `req`'s (re-read), a failure
/// becomes [`ApiError::Step`] with its status and message.
async fn apply(
    state: &AppState,
    step: &'static str,
    req: &mut InferenceRequest,
    outcome: Result<Option<Bytes>, (u16, String)>,
) -> Result<(), ApiError> {
    let label = match &outcome {
        Ok(Some(_)) => "changed",
        Ok(None) => "unchanged",
        Err(_) => "failed",
    };
    state
        .metrics
        .pre_steps
        .with_label_values(&[step, label])
        .inc();
    match outcome {
        Ok(None) => Ok(()),
        Ok(Some(body)) => {
            *req = crate::client_body::parse(req.kind, body).await?;
            Ok(())
        }
        Err((status, message)) => Err(ApiError::Step {
            step,
            status,
            message,
        }),
    }
}
