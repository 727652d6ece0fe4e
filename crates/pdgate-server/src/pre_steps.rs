//! The coordinator steps that change a request before any leg runs, in llm-d's order:
//! `replace-media-urls` (not yet) then `render` ([`crate::render_step`]). They run on a
//! client's request (never on a phase leg a coordinator sends to this router), on the
//! router that receives it, whether it schedules itself or coordinates per-role routers.
//! Each is counted in `pdgate_pre_steps_total{step, outcome}` (`changed`, `unchanged`,
//! `failed`).

use crate::app::AppState;
use crate::errors::ApiError;
use crate::render_step::{RenderArgs, RenderStep};
use http::HeaderValue;
use pdgate_api::InferenceRequest;

/// `pdgate serve` flags of the steps.
#[derive(clap::Args, Debug, Clone, PartialEq)]
pub struct PreStepArgs {
    /// The `render` step.
    #[command(flatten)]
    pub render: RenderArgs,
}

/// The configured steps (none by default).
#[derive(Clone, Default)]
pub struct PreSteps {
    /// `render`, when `--render-address` is given.
    pub render: Option<RenderStep>,
}

impl PreStepArgs {
    /// The steps these flags turn on.
    ///
    /// Errors: a flag value the step cannot use, naming the flag.
    pub fn steps(&self) -> Result<PreSteps, String> {
        Ok(PreSteps {
            render: self.render.step()?,
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
        if let Some(render) = &self.render {
            let outcome = render.apply(req, rid).await;
            let label = match &outcome {
                Ok(Some(_)) => "changed",
                Ok(None) => "unchanged",
                Err(_) => "failed",
            };
            state
                .metrics
                .pre_steps
                .with_label_values(&["render", label])
                .inc();
            match outcome {
                Ok(None) => {}
                Ok(Some(body)) => *req = crate::client_body::parse(req.kind, body).await?,
                Err(e) => {
                    return Err(ApiError::Step {
                        step: "render",
                        status: e.status(),
                        message: e.to_string(),
                    })
                }
            }
        }
        Ok(())
    }
}
