//! `POST /v1/responses` (OpenAI Responses as vLLM 0.32 serves it,
//! `vllm/entrypoints/openai/responses/{protocol,serving,streaming_events}.py`, the simple
//! non-harmony path): the [`Writer`].
//!
//! - The answer is a `ResponsesResponse` dumped with nulls included, keys in its declaration
//!   order: `id` (the body's `request_id`, else `resp_<x-request-id>`, else
//!   `resp_<random>`), `created_at`, `incomplete_details`, the request's echoes
//!   (`instructions`, `metadata`, `tools`, `reasoning`, …, re-serialized compactly),
//!   `output` (one `message` item `msg_<16 hex>` with one `output_text` part), `status`,
//!   `usage` (`input_tokens_details.cached_tokens`, per-turn lists empty as vLLM's
//!   `SimpleContext` leaves them), `kv_transfer_params` (a prefill leg's, else null), ….
//! - The simulator always stops at the limit, so `status` is `incomplete` with
//!   `incomplete_details: {"reason":"max_output_tokens"}`, as vLLM 0.32 reports
//!   `finish_reason == "length"`.
//! - Streamed: `event: <type>\ndata: <json>\n\n` with `sequence_number` from 0:
//!   `response.created`, `response.in_progress` (status `in_progress`, no output, usage
//!   null), then at the first token `response.output_item.added` and
//!   `response.content_part.added`, one `response.output_text.delta` per token, then
//!   `response.output_text.done`, `response.content_part.done`, `response.output_item.done`
//!   and `response.completed` (the final object, status `incomplete`: vLLM 0.32 ends with
//!   `response.completed` whatever the status). No `[DONE]`.
//! - A stream broken by the engine is cut without a last event: vLLM 0.32 builds its error
//!   event by validating an `{"error":…}` body against the stream event union, which fails,
//!   so the response body ends abruptly.

use super::writer::{js, named_event, random_uuid, unix_now, Tally, Writer};
use crate::tokenizer;
use bytes::Bytes;
use pdgate_api::RawObject;
use serde_json::Value;

/// The [`Writer`] of `/v1/responses`.
pub struct ResponsesWriter {
    id: String,
    created_at: u64,
    model: String,
    max_output_tokens: usize,
    /// Echoed request fields, as compact JSON texts, by name.
    echo: Echo,
    /// The streamed message item's id.
    item_id: String,
    /// Next `sequence_number`.
    seq: u64,
    /// Text streamed so far.
    text: String,
}

struct Echo {
    instructions: String,
    metadata: String,
    parallel_tool_calls: String,
    temperature: f64,
    tool_choice: String,
    tools: String,
    top_p: f64,
    background: String,
    max_tool_calls: String,
    previous_response_id: String,
    prompt: String,
    reasoning: String,
    service_tier: String,
    text: String,
    truncation: String,
    user: String,
    presence_penalty: f64,
    frequency_penalty: f64,
}

/// `field` of `body` as compact JSON, or `default` when absent or null.
fn echo(body: &RawObject, field: &str, default: &str) -> String {
    match body.get(field) {
        None | Some(Value::Null) => default.to_string(),
        Some(v) => v.to_string(),
    }
}

/// A number field (`temperature`, …): its value, `default` when absent or null; a 400
/// message naming it when it is not a number.
fn number(body: &RawObject, field: &str, default: f64) -> Result<f64, String> {
    match body.get(field) {
        None | Some(Value::Null) => Ok(default),
        Some(v) => v
            .as_f64()
            .ok_or_else(|| format!("field `{field}` must be a number")),
    }
}

impl ResponsesWriter {
    /// The writer of one request: `id_suffix` is the `x-request-id` (or a random id), used
    /// when the body names no `request_id`; `max_output_tokens` the resolved limit.
    ///
    /// Errors: a 400 message naming a field of the wrong type.
    pub fn new(
        body: &RawObject,
        id_suffix: &str,
        model: &str,
        max_output_tokens: usize,
    ) -> Result<Self, String> {
        let id = match body.get("request_id") {
            None | Some(Value::Null) => format!("resp_{id_suffix}"),
            Some(Value::String(s)) => s,
            Some(_) => return Err("field `request_id` must be a string".into()),
        };
        let has_tools = matches!(body.get("tools"), Some(Value::Array(t)) if !t.is_empty());
        let echo = Echo {
            instructions: echo(body, "instructions", "null"),
            metadata: echo(body, "metadata", "null"),
            parallel_tool_calls: echo(body, "parallel_tool_calls", "true"),
            temperature: number(body, "temperature", 1.0)?,
            // vLLM's validator turns the default `auto` into `none` without tools.
            tool_choice: match has_tools {
                true => echo(body, "tool_choice", r#""auto""#),
                false => r#""none""#.into(),
            },
            tools: echo(body, "tools", "[]"),
            top_p: number(body, "top_p", 1.0)?,
            background: echo(body, "background", "false"),
            max_tool_calls: echo(body, "max_tool_calls", "null"),
            previous_response_id: echo(body, "previous_response_id", "null"),
            prompt: echo(body, "prompt", "null"),
            reasoning: echo(body, "reasoning", "null"),
            service_tier: echo(body, "service_tier", r#""auto""#),
            text: echo(body, "text", "null"),
            truncation: echo(body, "truncation", r#""disabled""#),
            user: echo(body, "user", "null"),
            presence_penalty: number(body, "presence_penalty", 0.0)?,
            frequency_penalty: number(body, "frequency_penalty", 0.0)?,
        };
        Ok(ResponsesWriter {
            id,
            created_at: unix_now(),
            model: model.to_string(),
            max_output_tokens,
            echo,
            item_id: format!("msg_{}", random_uuid()),
            seq: 0,
            text: String::new(),
        })
    }

    /// The response object: `status`, `output` (a JSON array text), `usage` and `kv`.
    fn object(
        &self,
        status: &str,
        output: &str,
        usage: Option<&Tally>,
        kv: Option<&Value>,
    ) -> String {
        let e = &self.echo;
        let incomplete = match status {
            "incomplete" => r#"{"reason":"max_output_tokens"}"#,
            _ => "null",
        };
        let usage = usage.map_or_else(|| "null".to_string(), usage_json);
        let kv = kv.map_or_else(|| "null".to_string(), Value::to_string);
        format!(
            concat!(
                r#"{{"id":{},"created_at":{},"incomplete_details":{},"instructions":{},"#,
                r#""metadata":{},"model":{},"object":"response","output":{},"#,
                r#""parallel_tool_calls":{},"temperature":{:?},"tool_choice":{},"tools":{},"#,
                r#""top_p":{:?},"background":{},"max_output_tokens":{},"max_tool_calls":{},"#,
                r#""previous_response_id":{},"prompt":{},"reasoning":{},"service_tier":{},"#,
                r#""status":{},"text":{},"top_logprobs":null,"truncation":{},"usage":{},"#,
                r#""user":{},"presence_penalty":{:?},"frequency_penalty":{:?},"#,
                r#""kv_transfer_params":{},"ec_transfer_params":null,"input_messages":null,"#,
                r#""output_messages":null}}"#
            ),
            js(&self.id),
            self.created_at,
            incomplete,
            e.instructions,
            e.metadata,
            js(&self.model),
            output,
            e.parallel_tool_calls,
            e.temperature,
            e.tool_choice,
            e.tools,
            e.top_p,
            e.background,
            self.max_output_tokens,
            e.max_tool_calls,
            e.previous_response_id,
            e.prompt,
            e.reasoning,
            e.service_tier,
            js(status),
            e.text,
            e.truncation,
            usage,
            e.user,
            e.presence_penalty,
            e.frequency_penalty,
            kv,
        )
    }

    /// The next event of the stream: `{…fields…,"sequence_number":N,"type":name}` (`fields`
    /// ends with a comma, or is empty).
    fn event(&mut self, name: &str, fields: &str) -> Bytes {
        let data = format!(
            r#"{{{fields}"sequence_number":{},"type":{}}}"#,
            self.seq,
            js(name)
        );
        self.seq += 1;
        named_event(name, &data)
    }

    fn delta(&mut self, seed: u64, index: usize) -> Vec<Bytes> {
        let mut out = Vec::with_capacity(3);
        let id = js(&self.item_id);
        if index == 0 {
            let item = format!(
                r#""item":{{"id":{id},"content":[],"role":"assistant","status":"in_progress","type":"message","phase":null}},"output_index":0,"#
            );
            out.push(self.event("response.output_item.added", &item));
            let part = format!(
                r#""content_index":0,"item_id":{id},"output_index":0,"part":{{"annotations":[],"text":"","type":"output_text","logprobs":[]}},"#
            );
            out.push(self.event("response.content_part.added", &part));
        }
        let text = tokenizer::output_token_text(seed, index);
        self.text.push_str(&text);
        let delta = format!(
            r#""content_index":0,"delta":{},"item_id":{id},"logprobs":[],"output_index":0,"#,
            js(&text)
        );
        out.push(self.event("response.output_text.delta", &delta));
        out
    }
}

/// The output item of a finished message with `text`.
fn message_item(id: &str, text: &str) -> String {
    format!(
        r#"{{"id":{},"content":[{}],"role":"assistant","status":"completed","type":"message","phase":null}}"#,
        js(id),
        text_part(text)
    )
}

fn text_part(text: &str) -> String {
    format!(
        r#"{{"annotations":[],"text":{},"type":"output_text","logprobs":null}}"#,
        js(text)
    )
}

fn usage_json(t: &Tally) -> String {
    format!(
        concat!(
            r#"{{"input_tokens":{},"input_tokens_details":{{"cached_tokens":{},"#,
            r#""cache_write_tokens":0,"input_tokens_per_turn":[],"cached_tokens_per_turn":[]}},"#,
            r#""output_tokens":{},"output_tokens_details":{{"reasoning_tokens":0,"#,
            r#""tool_output_tokens":0,"output_tokens_per_turn":[],"#,
            r#""tool_output_tokens_per_turn":[]}},"total_tokens":{}}}"#
        ),
        t.prompt,
        t.cached,
        t.output,
        t.prompt + t.output
    )
}

impl Writer for ResponsesWriter {
    fn full(&self, seed: u64, t: &Tally, kv: Option<Value>) -> Vec<u8> {
        let text = tokenizer::output_text(seed, t.output);
        let output = format!(
            "[{}]",
            message_item(&format!("msg_{}", random_uuid()), &text)
        );
        self.object("incomplete", &output, Some(t), kv.as_ref())
            .into_bytes()
    }

    fn open(&mut self) -> Vec<Bytes> {
        let initial = self.object("in_progress", "[]", None, None);
        let fields = format!(r#""response":{initial},"#);
        vec![
            self.event("response.created", &fields),
            self.event("response.in_progress", &fields),
        ]
    }

    fn token(&mut self, seed: u64, index: usize) -> Vec<Bytes> {
        self.delta(seed, index)
    }

    fn last(&mut self, seed: u64, index: usize, t: &Tally, kv: Option<Value>) -> Vec<Bytes> {
        let mut out = self.delta(seed, index);
        let (id, text) = (js(&self.item_id), js(&self.text));
        let done = format!(
            r#""content_index":0,"item_id":{id},"logprobs":[],"output_index":0,"text":{text},"#
        );
        out.push(self.event("response.output_text.done", &done));
        let part = format!(
            r#""content_index":0,"item_id":{id},"output_index":0,"part":{},"#,
            text_part(&self.text)
        );
        out.push(self.event("response.content_part.done", &part));
        let item = message_item(&self.item_id, &self.text);
        let item_done = format!(r#""item":{item},"output_index":0,"#);
        out.push(self.event("response.output_item.done", &item_done));
        let fin = self.object("incomplete", &format!("[{item}]"), Some(t), kv.as_ref());
        let completed = format!(r#""response":{fin},"#);
        out.push(self.event("response.completed", &completed));
        out
    }

    fn broken(&mut self, _message: &str) -> Option<Bytes> {
        None
    }
}
