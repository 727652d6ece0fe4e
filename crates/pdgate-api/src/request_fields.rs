//! The per-API fields of an [`InferenceRequest`] that routing reads besides its prompt: the
//! output token limit of each API, whether a request can split into prefill and decode, and
//! the token ids a coordinator's `render` step attached.

use crate::api_kind::ApiKind;
use crate::openai::{InferenceRequest, RequestError};
use crate::raw_object::{RawObject, RawObjectError};
use serde::Deserialize;

impl InferenceRequest {
    /// True when this request can run as a prefill leg then a decode leg (design.md §5.2):
    /// its API can ([`ApiKind::can_split`]), it asks for one choice (`n` = 1: a prefill leg
    /// computes one sequence), and, on responses, it neither continues a stored response
    /// (`previous_response_id`: vLLM keeps responses per engine, so both legs would need it)
    /// nor runs in the background (`background: true` answers before it finishes).
    /// Otherwise it runs aggregated on the decode pick. The one rule for every router path.
    pub fn can_split(&self) -> bool {
        let set = |field: &str| !matches!(self.body.raw(field), None | Some("null" | "false"));
        self.kind.can_split()
            && self.n == 1
            && !(self.kind == ApiKind::Responses
                && (set("previous_response_id") || set("background")))
    }
}

impl InferenceRequest {
    /// The engine token ids a coordinator's `render` step attached to a chat request (llm-d's
    /// `tokens: {"token_ids": [...]}` field), when it carries them (non-empty, each in `u32`).
    pub fn rendered_token_ids(&self) -> Option<Vec<u32>> {
        #[derive(Deserialize)]
        struct Tokens {
            token_ids: Vec<u32>,
        }
        if self.kind != ApiKind::ChatCompletions {
            return None;
        }
        serde_json::from_str::<Tokens>(self.body.raw(RENDERED_TOKENS_FIELD)?)
            .ok()
            .map(|t| t.token_ids)
            .filter(|t| !t.is_empty())
    }
}

/// The body field a rendered chat request carries its token ids in (llm-d's coordinator
/// `render` step: `{"token_ids": [...], "features": {...}}`).
pub const RENDERED_TOKENS_FIELD: &str = "tokens";

/// Responses' fields that decide whether it can split (`background`, `previous_response_id`,
/// [`InferenceRequest::can_split`]) must have their types: a wrong one would change the
/// routing before the engine refuses it.
pub(crate) fn check_responses_routing_fields(body: &RawObject) -> Result<(), RequestError> {
    if !matches!(
        body.raw("background"),
        None | Some("null" | "true" | "false")
    ) {
        return Err(RequestError::InvalidField {
            field: "background",
            expected: "must be a boolean",
        });
    }
    if !body
        .raw("previous_response_id")
        .is_none_or(|r| r == "null" || r.starts_with('"'))
    {
        return Err(RequestError::InvalidField {
            field: "previous_response_id",
            expected: "must be a string",
        });
    }
    Ok(())
}

/// The output token limit of `kind` (see [`InferenceRequest::max_tokens`]).
pub(crate) fn max_tokens(kind: ApiKind, body: &RawObject) -> Result<Option<u32>, RequestError> {
    match kind {
        ApiKind::Completions | ApiKind::ChatCompletions => Ok(
            match (
                opt_u32(body, "max_completion_tokens")?,
                opt_u32(body, "max_tokens")?,
            ) {
                (Some(m), _) => Some(m),
                (None, m) => m,
            },
        ),
        ApiKind::Messages => opt_u32(body, "max_tokens"),
        ApiKind::Responses => opt_u32(body, "max_output_tokens"),
        ApiKind::Generate => match body.object("sampling_params") {
            None => Err(RequestError::MissingField("sampling_params")),
            Some(Err(RawObjectError::DuplicateKey(k))) => {
                Err(RequestError::DuplicateField(format!("sampling_params.{k}")))
            }
            Some(Err(_)) => Err(RequestError::InvalidField {
                field: "sampling_params",
                expected: "must be an object",
            }),
            Some(Ok(sp)) => opt_u32(&sp, "max_tokens").map_err(|e| match e {
                RequestError::InvalidField { expected, .. } => RequestError::InvalidField {
                    field: "sampling_params.max_tokens",
                    expected,
                },
                e => e,
            }),
        },
        ApiKind::Embeddings | ApiKind::Tokenize | ApiKind::Detokenize => Ok(None),
    }
}

const U32_RANGE: &str = "must be an integer from 0 to 4294967295";

pub(crate) fn opt_u32(body: &RawObject, field: &'static str) -> Result<Option<u32>, RequestError> {
    match body.raw(field) {
        None | Some("null") => Ok(None),
        // `u64` from JSON text: any other type fails at its first byte, without a tree.
        Some(raw) => serde_json::from_str::<u64>(raw)
            .ok()
            .and_then(|v| u32::try_from(v).ok())
            .map(Some)
            .ok_or(RequestError::InvalidField {
                field,
                expected: U32_RANGE,
            }),
    }
}
