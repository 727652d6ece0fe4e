//! What one ext_proc message produced: the answers to send back, in order, a body's chunks
//! made as Envoy takes them.

use crate::messages::Chunks;
use envoy_types::pb::envoy::service::ext_proc::v3::ProcessingResponse;
use std::collections::VecDeque;

/// One part of what a message produced.
enum Part {
    One(Box<ProcessingResponse>),
    Body(Chunks),
}

/// What one message produced: the answers to send, in order; a body's chunks are made as
/// they are taken.
#[derive(Default)]
pub struct Answers {
    parts: VecDeque<Part>,
}

impl Answers {
    /// The answers of one message: `answer` alone.
    pub(super) fn one(answer: ProcessingResponse) -> Answers {
        let mut a = Answers::default();
        a.push(answer);
        a
    }

    /// Adds `answer` after the others.
    pub(super) fn push(&mut self, answer: ProcessingResponse) {
        self.parts.push_back(Part::One(Box::new(answer)));
    }

    /// Adds a body, its chunks made as they are taken.
    pub(super) fn push_body(&mut self, chunks: Chunks) {
        self.parts.push_back(Part::Body(chunks));
    }
}

impl Iterator for Answers {
    type Item = ProcessingResponse;

    fn next(&mut self) -> Option<ProcessingResponse> {
        loop {
            match self.parts.front_mut()? {
                Part::One(_) => {
                    let Some(Part::One(a)) = self.parts.pop_front() else {
                        unreachable!("the front part is one answer")
                    };
                    return Some(*a);
                }
                Part::Body(chunks) => match chunks.next() {
                    Some(a) => return Some(a),
                    None => {
                        self.parts.pop_front();
                    }
                },
            }
        }
    }
}
