//! Engines' router-owned fields ([`pdgate_coordinator::owned`]) taken out of an SSE stream on
//! its way to the client: complete lines (ended by LF, CR or CR LF) pass through at once, a `data:` line naming such a
//! field is rewritten without it, and an incomplete last line waits for its end (an event is
//! dispatched only at its blank line anyway, so nothing a client could act on is delayed).

use bytes::{Bytes, BytesMut};
use pdgate_coordinator::owned;

/// Longest SSE line held while waiting for its end, bytes: vLLM's lines are a chunk of a few
/// hundred bytes; an engine that sends more without a line end is broken, not streaming.
pub const MAX_SSE_LINE_BYTES: usize = 4 << 20;

/// An SSE line longer than [`MAX_SSE_LINE_BYTES`] without its end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LineTooLong;

/// The line filter of one SSE response.
#[derive(Debug, Default)]
pub struct OwnedFilter {
    /// The last, incomplete line of what came so far.
    tail: BytesMut,
}

impl OwnedFilter {
    /// The bytes of `data` (after what came before) that can go to the client now.
    ///
    /// Errors: [`LineTooLong`] when the incomplete last line grows past the limit (what it
    /// held is dropped).
    pub fn push(&mut self, data: Bytes) -> Result<Bytes, LineTooLong> {
        if self.tail.is_empty() && data.ends_with(b"\n") && !owned::mentions(&data) {
            return Ok(data); // The common case: whole lines, nothing to remove.
        }
        // `tail` holds no line end (it is what follows the last one), so only the new bytes
        // are searched: a line sent a byte at a time costs linear, not quadratic, time.
        let held = self.tail.len();
        self.tail.extend_from_slice(&data);
        let Some(last) = data.iter().rposition(|&b| is_line_end(b)).map(|i| held + i) else {
            if self.tail.len() > MAX_SSE_LINE_BYTES {
                self.tail = BytesMut::new();
                return Err(LineTooLong);
            }
            return Ok(Bytes::new());
        };
        let lines = self.tail.split_to(last + 1).freeze();
        if self.tail.len() > MAX_SSE_LINE_BYTES {
            self.tail = BytesMut::new();
            return Err(LineTooLong);
        }
        if !owned::mentions(&lines) {
            return Ok(lines);
        }
        let mut out = Vec::with_capacity(lines.len());
        for line in lines.split_inclusive(|&b| is_line_end(b)) {
            match owned::strip_sse_line(line) {
                Some(clean) => out.extend_from_slice(&clean),
                None => out.extend_from_slice(line),
            }
        }
        Ok(Bytes::from(out))
    }

    /// What is left at the end of the stream (a last line without its end), as it came.
    pub fn finish(&mut self) -> Bytes {
        self.tail.split().freeze()
    }
}

/// An SSE line ends at CR, LF or CR LF (the EventSource grammar); bytes pass unchanged, so
/// a CR LF split between two lines here still reaches the client as CR LF.
fn is_line_end(b: u8) -> bool {
    b == b'\n' || b == b'\r'
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_pass_and_a_split_field_is_still_removed() {
        let mut f = OwnedFilter::default();
        let a = f.push(Bytes::from_static(b"data: {\"id\":1}\n\n")).unwrap();
        assert_eq!(&a[..], b"data: {\"id\":1}\n\n");
        // The field's name is cut between two frames.
        let b = f.push(Bytes::from_static(b"data: {\"id\":2,\"kv_trans"));
        assert!(b.unwrap().is_empty());
        let c = f.push(Bytes::from_static(
            b"fer_params\":{\"remote_host\":\"10.0.0.1\"}}\n\ndata: [DONE]\n\n",
        ));
        assert_eq!(&c.unwrap()[..], b"data: {\"id\":2}\n\ndata: [DONE]\n\n");
        let d = f.push(Bytes::from_static(b"data: {\"id\":3}"));
        assert!(d.unwrap().is_empty());
        assert_eq!(&f.finish()[..], b"data: {\"id\":3}");
    }

    #[test]
    fn a_line_without_end_is_held_up_to_the_limit_only() {
        let mut f = OwnedFilter::default();
        let chunk = Bytes::from(vec![b'x'; 1 << 20]);
        for _ in 0..4 {
            assert_eq!(f.push(chunk.clone()).unwrap().len(), 0);
        }
        assert_eq!(f.push(chunk.clone()), Err(LineTooLong));
        assert!(f.finish().is_empty(), "what it held is dropped");
        // The same after complete lines in the same frame.
        let mut g = OwnedFilter::default();
        let mut big = b"data: {}\n".to_vec();
        big.extend(std::iter::repeat_n(b'y', MAX_SSE_LINE_BYTES + 1));
        assert_eq!(g.push(Bytes::from(big)), Err(LineTooLong));
    }

    /// Regression (fuzzing, `sse` at 2.8k execs/s): each push searched the whole held line,
    /// so an engine sending a 4 MB line a byte at a time cost ~8·10¹² byte reads.
    #[test]
    fn a_line_sent_a_byte_at_a_time_is_held_and_cut_in_linear_time() {
        let mut f = OwnedFilter::default();
        let x = Bytes::from_static(b"x");
        for _ in 0..MAX_SSE_LINE_BYTES {
            assert!(f.push(x.clone()).unwrap().is_empty());
        }
        assert_eq!(f.push(x.clone()), Err(LineTooLong));
        // A byte-wise line that ends passes whole, and the next one starts clean.
        for &b in b"data: {\"kv_transfer_params\":{},\"id\":7}\n" {
            let out = f.push(Bytes::copy_from_slice(&[b])).unwrap();
            if b == b'\n' {
                assert_eq!(&out[..], b"data: {\"id\":7}\n");
            } else {
                assert!(out.is_empty());
            }
        }
    }
}
