//! Reading `usage` from a model server's response as it passes through (the EPP's response
//! path, the router's program-aware fairness): from the
//! SSE events of a streamed answer (the event that carries `usage`, sent last by vLLM with
//! `stream_options.include_usage`), or from a whole JSON answer.

use crate::openai::Usage;
use crate::sse::SseDecoder;

/// Largest non-streamed answer kept to read its `usage`, bytes; a larger answer passes
/// through unread (its usage stays unknown).
pub const MAX_JSON_BYTES: usize = 4 << 20;

/// An answer or event with `usage` at the top (OpenAI, generate, Anthropic `message_delta`),
/// in `message` (Anthropic `message_start`) or in `response` (Responses `response.completed`).
#[derive(serde::Deserialize)]
struct WithUsage {
    usage: Option<WireUsage>,
    message: Option<Nested>,
    response: Option<Nested>,
}

#[derive(serde::Deserialize)]
struct Nested {
    usage: Option<WireUsage>,
}

/// `usage` in any API's form: OpenAI's names; Anthropic's and Responses' (`input_tokens`,
/// `output_tokens`, `input_tokens_details`), whose total may be absent; and Anthropic's cache
/// counts, which its `input_tokens` leaves out (`input_tokens` + `cache_read_input_tokens` +
/// `cache_creation_input_tokens` is the prompt, as vLLM 0.32 reports it).
#[derive(serde::Deserialize)]
struct WireUsage {
    #[serde(alias = "input_tokens", default)]
    prompt_tokens: u32,
    #[serde(alias = "output_tokens", default)]
    completion_tokens: u32,
    #[serde(default)]
    total_tokens: u32,
    #[serde(alias = "input_tokens_details", default)]
    prompt_tokens_details: Option<crate::openai::PromptTokensDetails>,
    cache_read_input_tokens: Option<u32>,
    cache_creation_input_tokens: Option<u32>,
}

impl WithUsage {
    fn usage(self) -> Option<Usage> {
        let u = self
            .usage
            .or(self.message.and_then(|m| m.usage))
            .or(self.response.and_then(|r| r.usage))?;
        let read = u.cache_read_input_tokens.unwrap_or(0);
        let prompt = u.prompt_tokens + read + u.cache_creation_input_tokens.unwrap_or(0);
        let details = match u.cache_read_input_tokens {
            Some(cached) => Some(crate::openai::PromptTokensDetails {
                cached_tokens: cached,
            }),
            None => u.prompt_tokens_details,
        };
        Some(Usage {
            prompt_tokens: prompt,
            completion_tokens: u.completion_tokens,
            total_tokens: match u.total_tokens {
                0 => prompt + u.completion_tokens,
                t => t,
            },
            prompt_tokens_details: details,
        })
    }
}

/// Reads `usage` from body chunks (see the module docs).
#[derive(Debug)]
pub struct UsageReader {
    sse: Option<SseDecoder>,
    json: Vec<u8>,
    too_large: bool,
    usage: Option<Usage>,
}

impl UsageReader {
    /// A reader for a streamed (`text/event-stream`) answer when `sse`, else for JSON.
    pub fn new(sse: bool) -> Self {
        UsageReader {
            sse: sse.then(SseDecoder::default),
            json: Vec::new(),
            too_large: false,
            usage: None,
        }
    }

    /// Feeds one chunk of the body.
    pub fn push(&mut self, chunk: &[u8]) {
        match &mut self.sse {
            Some(d) => {
                for event in d.push(chunk) {
                    self.event(&event);
                }
            }
            None if self.too_large => {}
            None if self.json.len() + chunk.len() > MAX_JSON_BYTES => {
                self.too_large = true;
                self.json = Vec::new();
            }
            None => self.json.extend_from_slice(chunk),
        }
    }

    fn event(&mut self, data: &str) {
        if data.contains("\"usage\"") {
            if let Some(u) = serde_json::from_str(data).ok().and_then(WithUsage::usage) {
                // Anthropic streams give the prompt at `message_start` and both counts at
                // `message_delta`: a later event with a count wins, a zero keeps the earlier.
                self.usage = Some(match self.usage.take() {
                    Some(old) if u.prompt_tokens == 0 => Usage {
                        prompt_tokens: old.prompt_tokens,
                        total_tokens: old.prompt_tokens + u.completion_tokens,
                        ..u
                    },
                    _ => u,
                });
            }
        }
    }

    /// Ends the body: the usage read, if any.
    pub fn finish(&mut self) -> Option<Usage> {
        match &mut self.sse {
            Some(d) => {
                if let Some(last) = d.finish() {
                    self.event(&last);
                }
            }
            None if !self.too_large => {
                if let Some(u) = serde_json::from_slice(&self.json)
                    .ok()
                    .and_then(WithUsage::usage)
                {
                    self.usage = Some(u);
                }
            }
            None => {}
        }
        self.usage.take()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_from_sse_split_anywhere_and_from_json() {
        let sse = b"data: {\"choices\":[{\"text\":\"a\"}]}\n\ndata: {\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":3,\"total_tokens\":10,\"prompt_tokens_details\":{\"cached_tokens\":4}}}\n\ndata: [DONE]\n\n";
        for cut in [1, 17, 60, sse.len() - 3] {
            let mut r = UsageReader::new(true);
            r.push(&sse[..cut]);
            r.push(&sse[cut..]);
            let u = r.finish().expect("usage");
            assert_eq!((u.prompt_tokens, u.completion_tokens), (7, 3));
            assert_eq!(u.prompt_tokens_details.unwrap().cached_tokens, 4);
        }
        let mut r = UsageReader::new(false);
        r.push(b"{\"id\":\"x\",\"usage\":{\"prompt_tokens\":5,");
        r.push(b"\"completion_tokens\":1,\"total_tokens\":6}}");
        assert_eq!(r.finish().map(|u| u.total_tokens), Some(6));
        let mut r = UsageReader::new(false);
        r.push(b"{\"error\":{}}");
        assert_eq!(r.finish(), None);
    }

    #[test]
    fn usage_from_anthropic_and_responses_streams() {
        let anthropic = b"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"x\",\"usage\":{\"input_tokens\":12,\"output_tokens\":0}}}\n\nevent: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":5}}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";
        let mut r = UsageReader::new(true);
        r.push(anthropic);
        let u = r.finish().expect("usage");
        assert_eq!(
            (u.prompt_tokens, u.completion_tokens, u.total_tokens),
            (12, 5, 17)
        );
        let responses = b"event: response.completed\ndata: {\"response\":{\"id\":\"r\",\"usage\":{\"input_tokens\":4,\"input_tokens_details\":{\"cached_tokens\":2},\"output_tokens\":3,\"total_tokens\":7}},\"sequence_number\":9,\"type\":\"response.completed\"}\n\n";
        let mut r = UsageReader::new(true);
        r.push(responses);
        let u = r.finish().expect("usage");
        assert_eq!(
            (u.prompt_tokens, u.completion_tokens, u.total_tokens),
            (4, 3, 7)
        );
        assert_eq!(u.prompt_tokens_details.unwrap().cached_tokens, 2);
        // Anthropic's `input_tokens` leaves the cache reads out.
        let mut r = UsageReader::new(false);
        r.push(b"{\"type\":\"message\",\"usage\":{\"input_tokens\":4,\"output_tokens\":3,\"cache_read_input_tokens\":16}}");
        let u = r.finish().expect("usage");
        assert_eq!(
            (u.prompt_tokens, u.completion_tokens, u.total_tokens),
            (20, 3, 23)
        );
        assert_eq!(u.prompt_tokens_details.unwrap().cached_tokens, 16);
    }
}
