//! `POST /inference/v1/generate` (vLLM 0.32's token-ids-in, token-ids-out API,
//! `vllm/entrypoints/scale_out/token_in_token_out/{protocol,serving,api_router}.py`,
//! `output_mode` `tokens`): the [`Writer`].
//!
//! - Request: `{token_ids, sampling_params: {max_tokens, …}, stream, stream_options,
//!   kv_transfer_params, model?, request_id?}`; the request id is
//!   `generate-tokens-<x-request-id, else the body's request_id, else random>`.
//! - Non-streamed: `GenerateTokensResponse.model_dump()` (nulls included): `request_id`,
//!   `model`, `created`, `usage` (`prompt_tokens_details` with `cached_tokens`, as with
//!   `--enable-prompt-tokens-details`), the prompt fields (null), `kv_transfer_params` (a
//!   prefill leg's, else null), `ec_transfer_params`, `output_mode: "tokens"`, and one choice
//!   with `finish_reason: "length"` and the output `token_ids` (ids of the words the
//!   simulator writes for the same prompt on chat: `/detokenize` gives them back).
//! - Streamed: `data: {json}\n\n` per token with `token_ids: [id]` (`usage` null,
//!   `finish_reason` `"length"` on the last), a usage chunk (`choices: []`, nulls left out)
//!   when `stream_options.include_usage`, then `data: [DONE]`. No `kv_transfer_params`.
//! - A stream broken by the engine: vLLM's `data: {"error": …}` (Python `json.dumps`
//!   spacing) then `data: [DONE]`.

use super::shape::DONE;
use super::writer::{js, unix_now, Tally, Writer};
use crate::tokenizer;
use bytes::Bytes;
use serde_json::Value;

/// The [`Writer`] of `/inference/v1/generate`.
pub struct GenerateWriter {
    /// `generate-tokens-<id>`.
    pub request_id: String,
    /// Served model name.
    pub model: String,
    /// `stream_options.include_usage`.
    pub include_usage: bool,
}

impl GenerateWriter {
    fn chunk(&self, seed: u64, index: usize, finish: &str) -> Bytes {
        Bytes::from(format!(
            concat!(
                r#"data: {{"request_id":{},"usage":null,"output_mode":"tokens","choices":[{{"index":0,"#,
                r#""finish_reason":{},"stop_reason":null,"token_ids":[{}],"routed_experts":null,"#,
                r#""sampling_mask":null,"weight_versions":null,"logprobs":null}}]}}"#,
                "\n\n"
            ),
            js(&self.request_id),
            finish,
            tokenizer::output_token_id(seed, index)
        ))
    }
}

fn usage(t: &Tally, details: &str) -> String {
    format!(
        r#"{{"prompt_tokens":{},"total_tokens":{},"completion_tokens":{},"prompt_tokens_details":{{"cached_tokens":{}{details}}}"#,
        t.prompt,
        t.prompt + t.output,
        t.output,
        t.cached
    )
}

impl Writer for GenerateWriter {
    fn full(&self, seed: u64, t: &Tally, kv: Option<Value>) -> Vec<u8> {
        let ids =
            serde_json::to_string(&tokenizer::output_ids(seed, t.output)).expect("ids serialize");
        let kv = kv.map_or_else(|| "null".to_string(), |v| v.to_string());
        format!(
            concat!(
                r#"{{"request_id":{},"model":{},"created":{},"usage":{},"completion_tokens_details":null}},"#,
                r#""prompt_logprobs":null,"prompt_token_id_logprobs":null,"prompt_token_ids":null,"#,
                r#""mm_placeholders":null,"metrics":null,"kv_transfer_params":{},"ec_transfer_params":null,"#,
                r#""output_mode":"tokens","choices":[{{"index":0,"finish_reason":"length","#,
                r#""stop_reason":null,"token_ids":{},"routed_experts":null,"sampling_mask":null,"#,
                r#""weight_versions":null,"logprobs":null}}]}}"#
            ),
            js(&self.request_id),
            js(&self.model),
            unix_now(),
            usage(t, r#","created_cache_tokens":null,"multimodal_tokens":null"#),
            kv,
            ids
        )
        .into_bytes()
    }

    fn open(&mut self) -> Vec<Bytes> {
        Vec::new()
    }

    fn token(&mut self, seed: u64, index: usize) -> Vec<Bytes> {
        vec![self.chunk(seed, index, "null")]
    }

    fn last(&mut self, seed: u64, index: usize, t: &Tally, _kv: Option<Value>) -> Vec<Bytes> {
        let mut out = vec![self.chunk(seed, index, r#""length""#)];
        if self.include_usage {
            out.push(Bytes::from(format!(
                "data: {{\"request_id\":{},\"usage\":{}}},\"output_mode\":\"tokens\",\"choices\":[]}}\n\n",
                js(&self.request_id),
                usage(t, "")
            )));
        }
        out.push(Bytes::from_static(DONE));
        out
    }

    fn broken(&mut self, message: &str) -> Option<Bytes> {
        Some(Bytes::from(format!(
            "data: {{\"error\": {{\"message\": {}, \"type\": \"InternalServerError\", \"param\": null, \"code\": 500}}}}\n\n{}",
            js(message),
            std::str::from_utf8(DONE).expect("ASCII")
        )))
    }
}
