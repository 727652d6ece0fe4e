//! Reading `usage` from a model server's response as it passes through (the EPP's response
//! path, the router's program-aware fairness): from the
//! SSE events of a streamed answer (the event that carries `usage`, sent last by vLLM with
//! `stream_options.include_usage`), or from a whole JSON answer.

use crate::openai::Usage;
use crate::sse::SseDecoder;

/// Largest non-streamed answer kept to read its `usage`, bytes; a larger answer passes
/// through unread (its usage stays unknown).
pub const MAX_JSON_BYTES: usize = 4 << 20;

#[derive(serde::Deserialize)]
struct WithUsage {
    usage: Option<Usage>,
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
            if let Ok(WithUsage { usage: Some(u) }) = serde_json::from_str(data) {
                self.usage = Some(u);
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
                if let Ok(WithUsage { usage: Some(u) }) = serde_json::from_slice(&self.json) {
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
}
