//! Reading `usage` from the model server's response as it passes through the EPP: the one
//! reader of [`pdgate_api::usage_reader`], bounded as `serve` bounds what it holds of an
//! answer (issue 26). [`BoundedUsage`] stops reading (the answer still passes through to the
//! client unchanged) when
//!
//! - an SSE line grows past [`MAX_SSE_LINE_BYTES`] without its end (`line_too_long`): serve's
//!   cap (`pdgate_core::owned_filter`), where the bare reader held the line whole (issue 26:
//!   a 390 MB line took 1.19 GB);
//! - an SSE event (its lines up to the blank line that ends it) grows past the same bound
//!   (`event_too_long`): the reader joins an event's `data` lines before parsing it;
//! - a non-streamed answer is over [`MAX_JSON_BYTES`] (`answer_too_large`).

use pdgate_api::openai::Usage;
pub use pdgate_api::usage_reader::{UsageReader, MAX_JSON_BYTES};
pub use pdgate_core::owned_filter::MAX_SSE_LINE_BYTES;

/// Why usage reading stopped for one answer (the `reason` label of
/// `pdgate_epp_usage_unread_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unread {
    /// An SSE line over [`MAX_SSE_LINE_BYTES`] without its end.
    LineTooLong,
    /// An SSE event over [`MAX_SSE_LINE_BYTES`] without the blank line that ends it.
    EventTooLong,
    /// A non-streamed answer over [`MAX_JSON_BYTES`].
    AnswerTooLarge,
}

impl Unread {
    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            Unread::LineTooLong => "line_too_long",
            Unread::EventTooLong => "event_too_long",
            Unread::AnswerTooLarge => "answer_too_large",
        }
    }
}

/// A [`UsageReader`] that holds at most [`MAX_SSE_LINE_BYTES`] (SSE) or [`MAX_JSON_BYTES`]
/// (JSON) of an answer (see the module docs).
#[derive(Debug)]
pub struct BoundedUsage {
    reader: Option<UsageReader>,
    sse: bool,
    /// Bytes of the current (unfinished) line, its line end excluded.
    line: usize,
    /// The current line's last byte (a line of one `\r` is blank).
    last: u8,
    /// Bytes of the current event's finished lines (their line ends excluded).
    event: usize,
    /// Bytes of a non-streamed answer so far.
    total: usize,
}

impl BoundedUsage {
    /// A reader for a streamed (`text/event-stream`) answer when `sse`, else for JSON.
    pub fn new(sse: bool) -> Self {
        BoundedUsage {
            reader: Some(UsageReader::new(sse)),
            sse,
            line: 0,
            last: 0,
            event: 0,
            total: 0,
        }
    }

    /// Feeds one chunk of the body. Returns why reading stopped, once, when this chunk
    /// stopped it (nothing of it was read then; nothing more is).
    pub fn push(&mut self, chunk: &[u8]) -> Option<Unread> {
        self.reader.as_ref()?;
        let over = if self.sse {
            self.scan(chunk)
        } else {
            self.total = self.total.saturating_add(chunk.len());
            (self.total > MAX_JSON_BYTES).then_some(Unread::AnswerTooLarge)
        };
        match over {
            None => {
                if let Some(reader) = &mut self.reader {
                    reader.push(chunk);
                }
                None
            }
            Some(why) => {
                self.reader = None; // what it held is freed
                Some(why)
            }
        }
    }

    /// Follows line and event lengths over `chunk`; the first bound passed, if any.
    fn scan(&mut self, mut chunk: &[u8]) -> Option<Unread> {
        while let Some(i) = chunk.iter().position(|&b| b == b'\n') {
            self.line += i;
            if i > 0 {
                self.last = chunk[i - 1];
            }
            if self.line > MAX_SSE_LINE_BYTES {
                return Some(Unread::LineTooLong);
            }
            let blank = self.line == 0 || (self.line == 1 && self.last == b'\r');
            if blank {
                self.event = 0;
            } else {
                self.event += self.line;
                if self.event > MAX_SSE_LINE_BYTES {
                    return Some(Unread::EventTooLong);
                }
            }
            self.line = 0;
            self.last = 0;
            chunk = &chunk[i + 1..];
        }
        self.line += chunk.len();
        if let Some(&b) = chunk.last() {
            self.last = b;
        }
        (self.line > MAX_SSE_LINE_BYTES).then_some(Unread::LineTooLong)
    }

    /// True while the answer is still read.
    pub fn reading(&self) -> bool {
        self.reader.is_some()
    }

    /// Ends the body: the usage read, if any (none once reading stopped).
    pub fn finish(&mut self) -> Option<Usage> {
        self.reader.as_mut()?.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const USAGE: &[u8] =
        b"data: {\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":2,\"total_tokens\":7}}\n\n";

    #[test]
    fn normal_streams_are_read_across_chunks() {
        let mut u = BoundedUsage::new(true);
        let mut body = b"data: {\"choices\":[]}\r\n\r\n: ping\n\n".to_vec();
        body.extend_from_slice(USAGE);
        body.extend_from_slice(b"data: [DONE]\n\n");
        for piece in body.chunks(7) {
            assert_eq!(u.push(piece), None);
        }
        assert_eq!(u.finish().unwrap().prompt_tokens, 5);
    }

    #[test]
    fn a_line_over_the_cap_stops_reading_once() {
        let mut u = BoundedUsage::new(true);
        assert_eq!(u.push(b"data: "), None);
        let piece = vec![b'x'; (MAX_SSE_LINE_BYTES - 6) / 4];
        for _ in 0..4 {
            assert_eq!(u.push(&piece), None);
        }
        let rest = vec![b'x'; MAX_SSE_LINE_BYTES - 6 - 4 * piece.len()];
        assert_eq!(u.push(&rest), None);
        assert!(u.reading(), "a line of exactly the cap so far");
        assert_eq!(u.push(b"x"), Some(Unread::LineTooLong));
        assert!(!u.reading());
        // Nothing more is read, the usage that follows included.
        assert_eq!(u.push(b"\n\n"), None);
        assert_eq!(u.push(USAGE), None);
        assert!(u.finish().is_none());
    }

    #[test]
    fn a_line_of_exactly_the_cap_is_read() {
        let mut u = BoundedUsage::new(true);
        let mut line = vec![b'x'; MAX_SSE_LINE_BYTES];
        line.extend_from_slice(b"\n\n");
        assert_eq!(u.push(&line), None);
        assert_eq!(u.push(USAGE), None);
        assert_eq!(u.finish().unwrap().completion_tokens, 2);
    }

    #[test]
    fn an_event_of_many_lines_over_the_cap_stops_reading() {
        let mut u = BoundedUsage::new(true);
        let line = [b"data: ".as_slice(), &vec![b'y'; 1 << 20], b"\r\n"].concat();
        let mut stopped = None;
        for _ in 0..5 {
            stopped = stopped.or(u.push(&line));
        }
        assert_eq!(stopped, Some(Unread::EventTooLong));
        // Lines that each end an event never add up.
        let mut u = BoundedUsage::new(true);
        let event = [line.as_slice(), b"\r\n"].concat();
        for _ in 0..8 {
            assert_eq!(u.push(&event), None);
        }
    }

    #[test]
    fn a_json_answer_over_its_cap_is_not_read() {
        let mut u = BoundedUsage::new(false);
        assert_eq!(u.push(&vec![b' '; MAX_JSON_BYTES]), None);
        assert_eq!(u.push(b"{}"), Some(Unread::AnswerTooLarge));
        assert!(u.finish().is_none());
    }
}
