//! The coordinator steps that change a request before any leg runs, in llm-d's order:
//! `replace-media-urls` ([`crate::pre_steps::media_urls`]) then `render` ([`crate::pre_steps::render_step`]). They run on a
//! client's request (never on a phase leg a coordinator sends to this router), on the
//! router that receives it, whether it schedules itself or coordinates per-role routers.
//! Each is counted in `pdgate_pre_steps_total{step, outcome}` (`changed`, `unchanged`,
//! `failed`). A failure answers the request with the step's status.

pub mod media_urls;
pub mod render_step;

use crate::errors::ApiError;
use crate::pre_steps::media_urls::{MediaUrlArgs, MediaUrlSettings};
use crate::pre_steps::render_step::{RenderArgs, RenderStep};
use crate::state::AppState;
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
            if let Some(message) = unguarded_media_url(req) {
                state
                    .metrics
                    .pre_steps
                    .with_label_values(&["replace-media-urls", "failed"])
                    .inc();
                return Err(ApiError::Step {
                    step: "replace-media-urls",
                    status: 400,
                    message,
                });
            }
            let outcome =
                crate::pre_steps::media_urls::replace_media_urls(media, req.body.bytes()).await;
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
            *req = crate::ingress::client_body::parse(req.kind, body).await?;
            Ok(())
        }
        Err((status, message)) => Err(ApiError::Step {
            step,
            status,
            message,
        }),
    }
}

/// Why `req` is refused when it names a remote (http/https) media URL that the
/// `replace-media-urls` step does not download (the message names where): chat `video_url` /
/// `audio_url` parts (chat, embeddings and tokenize messages), Anthropic `image` / `document`
/// blocks with a `url` source, Responses `input_image` / `input_file` items with a URL. With
/// the step on, such a request is refused, so that every URL an engine could fetch has passed
/// the SSRF guard. A `messages` / `input` that cannot be read as a tree (nested past 128
/// levels) is refused too: it cannot be checked.
pub fn unguarded_media_url(req: &InferenceRequest) -> Option<String> {
    Some(match unguarded_media_url_at(req)? {
        Ok(at) => format!(
            "{at}: a remote media URL the replace-media-urls step does not download (it \
             downloads chat `image_url` parts only, as llm-d's); send it inline (a data: URI or \
             base64 source) so that no engine fetches an unchecked URL"
        ),
        Err(unreadable) => unreadable,
    })
}

/// Where [`unguarded_media_url`] found a URL (`Ok`), or why the field could not be checked
/// (`Err`, the whole message).
fn unguarded_media_url_at(req: &InferenceRequest) -> Option<Result<String, String>> {
    use pdgate_api::ApiKind;
    let bytes = req.body.bytes();
    // Only a body that mentions a URL scheme is read (no `\u` trick: the scan below reads the
    // decoded values, so an escaped key or scheme is found there too when this test passes).
    let lower = |b: &u8| b.to_ascii_lowercase();
    let mentions = bytes.windows(4).any(|w| w.iter().map(lower).eq(*b"http"))
        || bytes.windows(2).any(|w| w == b"\\u");
    if !mentions {
        return None;
    }
    let fields: &[&'static str] = match req.kind {
        ApiKind::Responses => &["input"],
        ApiKind::Messages => &["system", "messages"],
        _ => &["messages"],
    };
    for &field in fields {
        let value = match req.body.field(field) {
            Ok(Some(v)) => v,
            Ok(None) => continue,
            Err(e) => {
                return Some(Err(format!(
                    "{e}; with replace-media-urls on, its media URLs must be checked"
                )))
            }
        };
        // The step downloads chat `image_url` parts (`messages[i].content[j]`, object form).
        let downloads = field == "messages" && req.kind != ApiKind::Messages;
        if let Some(at) = remote_media(&value, field.to_string(), downloads, 0) {
            return Some(Ok(at));
        }
    }
    None
}

/// Keys whose value (a URL string, or an object with a `url`) names media an engine fetches:
/// vLLM reads a chat part by these keys with or without its `type` (its "simple" part forms),
/// and Responses items by `image_url` / `file_url`.
const MEDIA_URL_KEYS: [&str; 4] = ["image_url", "audio_url", "video_url", "file_url"];

/// The path of the first remote media URL in `v` (at `path`, `depth` levels below the field),
/// searching every nested object: a [`MEDIA_URL_KEYS`] value, or an Anthropic `source` with a
/// `url`. With `downloads`, a part at `messages[i].content[j]` of `type: image_url` with an
/// object `image_url` is not reported: the step downloads it.
fn remote_media(
    v: &serde_json::Value,
    path: String,
    downloads: bool,
    depth: usize,
) -> Option<String> {
    use serde_json::Value;
    let remote = |v: Option<&Value>| {
        v.and_then(Value::as_str).is_some_and(|u| {
            let u = u.trim_start().to_ascii_lowercase();
            u.starts_with("http:") || u.starts_with("https:") || u.starts_with("//")
        })
    };
    match v {
        Value::Array(items) => items
            .iter()
            .enumerate()
            .find_map(|(i, x)| remote_media(x, format!("{path}[{i}]"), downloads, depth + 1)),
        Value::Object(o) => {
            let part = depth == 3 && path.ends_with(']');
            for key in MEDIA_URL_KEYS {
                let Some(inner) = o.get(key) else { continue };
                let nested = inner.get("url");
                if !(remote(Some(inner)) || remote(nested)) {
                    continue;
                }
                let downloaded = downloads
                    && part
                    && key == "image_url"
                    && inner.is_object()
                    && o.get("type").and_then(Value::as_str) == Some("image_url");
                if !downloaded {
                    let at = if nested.is_some() { ".url" } else { "" };
                    return Some(format!("{path}.{key}{at}"));
                }
            }
            if remote(o.get("source").and_then(|s| s.get("url"))) {
                return Some(format!("{path}.source.url"));
            }
            o.iter()
                .find_map(|(k, x)| remote_media(x, format!("{path}.{k}"), downloads, depth + 1))
        }
        _ => None,
    }
}
