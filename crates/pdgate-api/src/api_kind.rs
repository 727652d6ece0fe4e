//! Which API a request came in on, and every rule that differs between APIs: its path, its
//! metric label, whether a model must be named, whether it can stream, whether it can be
//! split into prefill and decode and which fields the prefill leg caps, and how its SSE
//! stream is framed. One table, read by the router, the EPP and the simulator.
//!
//! Sources: vLLM 0.32's routers (`entrypoints/openai`, `entrypoints/anthropic`,
//! `entrypoints/openai/responses`, `entrypoints/pooling/embed`, `entrypoints/serve/tokenize`,
//! `entrypoints/scale_out/token_in_token_out`) for paths, fields and stream framing; llm-d's
//! P/D sidecar (`pkg/sidecar/proxy`) for which APIs split and which token limits the prefill
//! leg sets to 1.

/// Which API a request came in on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ApiKind {
    /// `POST /v1/completions`
    Completions,
    /// `POST /v1/chat/completions`
    ChatCompletions,
    /// `POST /v1/messages` (Anthropic Messages, as vLLM serves it).
    Messages,
    /// `POST /v1/responses` (OpenAI Responses).
    Responses,
    /// `POST /v1/embeddings` (pooling models; never decodes).
    Embeddings,
    /// `POST /inference/v1/generate` (vLLM's token-ids-in, token-ids-out API).
    Generate,
    /// `POST /tokenize` (no engine step).
    Tokenize,
    /// `POST /detokenize` (no engine step).
    Detokenize,
}

/// How an API frames its server-sent events, which decides the form of an error event the
/// router writes into a broken stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SseForm {
    /// `data: {json}` events ended by `data: [DONE]` (completions, chat, generate).
    DataDone,
    /// `event: {name}` + `data: {json}` events, no `[DONE]` (Anthropic messages).
    Anthropic,
    /// `event: {name}` + `data: {json}` events, no `[DONE]` (OpenAI Responses).
    Responses,
}

impl ApiKind {
    /// Every API, in route order.
    pub const ALL: [ApiKind; 8] = [
        ApiKind::Completions,
        ApiKind::ChatCompletions,
        ApiKind::Messages,
        ApiKind::Responses,
        ApiKind::Embeddings,
        ApiKind::Generate,
        ApiKind::Tokenize,
        ApiKind::Detokenize,
    ];

    /// The request path.
    pub fn path(self) -> &'static str {
        match self {
            ApiKind::Completions => "/v1/completions",
            ApiKind::ChatCompletions => "/v1/chat/completions",
            ApiKind::Messages => "/v1/messages",
            ApiKind::Responses => "/v1/responses",
            ApiKind::Embeddings => "/v1/embeddings",
            ApiKind::Generate => "/inference/v1/generate",
            ApiKind::Tokenize => "/tokenize",
            ApiKind::Detokenize => "/detokenize",
        }
    }

    /// The API whose path is exactly `path` (no query), if any.
    pub fn from_path(path: &str) -> Option<ApiKind> {
        ApiKind::ALL.into_iter().find(|k| k.path() == path)
    }

    /// The API whose error form a router answer on `path` takes: the API of that exact path,
    /// or messages for a path below `/v1/messages/` (Anthropic's `count_tokens`, which pdgate
    /// does not route), so that an Anthropic client reads Anthropic's error form there too.
    pub fn error_form_for_path(path: &str) -> Option<ApiKind> {
        ApiKind::from_path(path).or_else(|| {
            path.starts_with("/v1/messages/")
                .then_some(ApiKind::Messages)
        })
    }

    /// The `api` label of `pdgate_requests_total`.
    pub fn label(self) -> &'static str {
        match self {
            ApiKind::Completions => "completions",
            ApiKind::ChatCompletions => "chat_completions",
            ApiKind::Messages => "messages",
            ApiKind::Responses => "responses",
            ApiKind::Embeddings => "embeddings",
            ApiKind::Generate => "generate",
            ApiKind::Tokenize => "tokenize",
            ApiKind::Detokenize => "detokenize",
        }
    }

    /// True when the body must name a `model`; the others default to the served model, as
    /// vLLM does (`model` is optional on responses, embeddings, generate, tokenize and
    /// detokenize).
    pub fn requires_model(self) -> bool {
        matches!(
            self,
            ApiKind::Completions | ApiKind::ChatCompletions | ApiKind::Messages
        )
    }

    /// True when the API reads `stream` (embeddings, tokenize and detokenize answer JSON).
    pub fn can_stream(self) -> bool {
        !matches!(
            self,
            ApiKind::Embeddings | ApiKind::Tokenize | ApiKind::Detokenize
        )
    }

    /// True when the API reads `n` (several choices per request).
    pub fn has_choices(self) -> bool {
        matches!(self, ApiKind::Completions | ApiKind::ChatCompletions)
    }

    /// True when a request can run as a prefill leg then a decode leg: the engine API takes
    /// `kv_transfer_params` in the request and returns it in a non-streamed answer (vLLM
    /// 0.32: completions, chat, messages, responses, generate). Embeddings never decode;
    /// tokenize and detokenize never reach the engine core.
    pub fn can_split(self) -> bool {
        matches!(
            self,
            ApiKind::Completions
                | ApiKind::ChatCompletions
                | ApiKind::Messages
                | ApiKind::Responses
                | ApiKind::Generate
        )
    }

    /// The object in which this API's legs carry their token limits and their KV handoff
    /// (`extra_args.kv_transfer_params`), `None` when both are top-level fields:
    /// `sampling_params` for generate, as llm-d's coordinator sends it
    /// (`pkg/coordinator/connectors/kv`; vLLM reads the handoff there on every version and a
    /// top-level copy only since 0.32).
    pub fn leg_params_object(self) -> Option<&'static str> {
        (self == ApiKind::Generate).then_some("sampling_params")
    }

    /// The token-limit fields a prefill leg sets to 1 (design.md §5.2); the first is set even
    /// when the client gave none, the others only when present. `min_tokens` is removed.
    pub fn token_limit_fields(self) -> &'static [&'static str] {
        match self {
            ApiKind::Responses => &["max_output_tokens"],
            ApiKind::Generate => &["max_tokens"],
            _ => &["max_tokens", "max_completion_tokens"],
        }
    }

    /// The stream framing of this API's answers.
    pub fn sse_form(self) -> SseForm {
        match self {
            ApiKind::Messages => SseForm::Anthropic,
            ApiKind::Responses => SseForm::Responses,
            _ => SseForm::DataDone,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_round_trip_and_are_distinct() {
        for k in ApiKind::ALL {
            assert_eq!(ApiKind::from_path(k.path()), Some(k));
        }
        assert_eq!(ApiKind::from_path("/v1/messages/count_tokens"), None);
        assert_eq!(ApiKind::from_path("/v1/completions/"), None);
        let labels: std::collections::HashSet<_> = ApiKind::ALL.map(ApiKind::label).into();
        assert_eq!(labels.len(), ApiKind::ALL.len());
    }

    #[test]
    fn only_engine_apis_with_kv_params_split() {
        let split: Vec<_> = ApiKind::ALL.into_iter().filter(|k| k.can_split()).collect();
        assert_eq!(
            split,
            [
                ApiKind::Completions,
                ApiKind::ChatCompletions,
                ApiKind::Messages,
                ApiKind::Responses,
                ApiKind::Generate
            ]
        );
        assert_eq!(
            ApiKind::Generate.leg_params_object(),
            Some("sampling_params")
        );
        assert_eq!(
            ApiKind::Responses.token_limit_fields(),
            ["max_output_tokens"]
        );
    }
}
