//! Engines' router-owned fields ([`pdgate_coordinator::owned`]) taken out of an SSE stream on
//! its way to the client: complete lines pass through at once, a `data:` line naming such a
//! field is rewritten without it, and an incomplete last line waits for its end (an event is
//! dispatched only at its blank line anyway, so nothing a client could act on is delayed).

use bytes::{Bytes, BytesMut};
use pdgate_coordinator::owned;

/// The line filter of one SSE response.
#[derive(Debug, Default)]
pub struct OwnedFilter {
    /// The last, incomplete line of what came so far.
    tail: BytesMut,
}

impl OwnedFilter {
    /// The bytes of `data` (after what came before) that can go to the client now.
    pub fn push(&mut self, data: Bytes) -> Bytes {
        if self.tail.is_empty() && data.ends_with(b"\n") && !owned::mentions(&data) {
            return data; // The common case: whole lines, nothing to remove.
        }
        self.tail.extend_from_slice(&data);
        let Some(last) = self.tail.iter().rposition(|&b| b == b'\n') else {
            return Bytes::new();
        };
        let lines = self.tail.split_to(last + 1).freeze();
        if !owned::mentions(&lines) {
            return lines;
        }
        let mut out = Vec::with_capacity(lines.len());
        for line in lines.split_inclusive(|&b| b == b'\n') {
            match owned::strip_sse_line(line) {
                Some(clean) => out.extend_from_slice(&clean),
                None => out.extend_from_slice(line),
            }
        }
        Bytes::from(out)
    }

    /// What is left at the end of the stream (a last line without its end), as it came.
    pub fn finish(&mut self) -> Bytes {
        self.tail.split().freeze()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_pass_and_a_split_field_is_still_removed() {
        let mut f = OwnedFilter::default();
        let a = f.push(Bytes::from_static(b"data: {\"id\":1}\n\n"));
        assert_eq!(&a[..], b"data: {\"id\":1}\n\n");
        // The field's name is cut between two frames.
        let b = f.push(Bytes::from_static(b"data: {\"id\":2,\"kv_trans"));
        assert!(b.is_empty());
        let c = f.push(Bytes::from_static(
            b"fer_params\":{\"remote_host\":\"10.0.0.1\"}}\n\ndata: [DONE]\n\n",
        ));
        assert_eq!(&c[..], b"data: {\"id\":2}\n\ndata: [DONE]\n\n");
        let d = f.push(Bytes::from_static(b"data: {\"id\":3}"));
        assert!(d.is_empty());
        assert_eq!(&f.finish()[..], b"data: {\"id\":3}");
    }
}
