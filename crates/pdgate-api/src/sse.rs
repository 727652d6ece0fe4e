//! A minimal Server-Sent Events decoder: bytes in, the `data` payload of each complete event
//! out. Lines end with `\n` or `\r\n`; an event ends at a blank line; several `data:` lines of
//! one event are joined with `\n`; comments (`:`) and other fields are ignored.

/// Incremental decoder; feed it body chunks as they arrive.
#[derive(Debug, Default)]
pub struct SseDecoder {
    /// Bytes of an unfinished line.
    partial: Vec<u8>,
    /// `data` lines of the event being read.
    data: Vec<String>,
}

impl SseDecoder {
    /// Feeds one chunk; returns the `data` of every event completed by it, in order.
    pub fn push(&mut self, chunk: &[u8]) -> Vec<String> {
        let mut events = Vec::new();
        for &b in chunk {
            if b == b'\n' {
                let line = std::mem::take(&mut self.partial);
                self.line(&line, &mut events);
            } else {
                self.partial.push(b);
            }
        }
        events
    }

    /// Ends the stream: the `data` of a last event not followed by a blank line, if any.
    pub fn finish(&mut self) -> Option<String> {
        let mut events = Vec::new();
        if !self.partial.is_empty() {
            let line = std::mem::take(&mut self.partial);
            self.line(&line, &mut events);
        }
        self.line(b"", &mut events);
        events.pop()
    }

    fn line(&mut self, line: &[u8], events: &mut Vec<String>) {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.is_empty() {
            if !self.data.is_empty() {
                events.push(std::mem::take(&mut self.data).join("\n"));
            }
            return;
        }
        if let Some(rest) = line.strip_prefix(b"data:") {
            let rest = rest.strip_prefix(b" ").unwrap_or(rest);
            self.data.push(String::from_utf8_lossy(rest).into_owned());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_events_across_chunks() {
        let mut d = SseDecoder::default();
        assert_eq!(d.push(b"data: {\"a\":"), Vec::<String>::new());
        assert_eq!(
            d.push(b"1}\r\n\r\n: ping\n\ndata: x\ndata:y\n"),
            vec!["{\"a\":1}"]
        );
        assert_eq!(d.push(b"\ndata: [DONE]"), vec!["x\ny"]);
        assert_eq!(d.finish(), Some("[DONE]".to_string()));
        assert_eq!(d.finish(), None);
    }
}
