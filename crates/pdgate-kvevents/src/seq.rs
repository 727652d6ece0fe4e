//! Per-publisher sequence tracking (pure).
//!
//! vLLM's publisher numbers its messages 0, 1, 2, ... (frame 2, +1 per message, from 0 at
//! process start). Rules, applied to each message's seq against the last one seen:
//!
//! - no message seen yet → [`SeqVerdict::First`] (nothing to compare; apply it);
//! - `seq == last + 1` → [`SeqVerdict::InOrder`];
//! - `seq > last + 1` → [`SeqVerdict::Gap`]: `last + 1 .. seq` were missed (dropped by ZMQ's
//!   high-water mark, by our bounded queue, or undecodable); replay them or clear;
//! - `seq <= last` → [`SeqVerdict::Restart`]: a publisher never repeats or goes back, so a
//!   new process started numbering again (its cache is empty); clear, then apply.
//!
//! Every message becomes the new `last`, whatever the verdict. What cannot be seen from seqs
//! alone: a restart whose new seq already passed the old one (we missed the new process's
//! first messages and its counter overtook ours) looks like a gap; the subscriber also
//! clears on a disconnect to cover it.

use std::ops::Range;

/// What one message's seq says about the stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SeqVerdict {
    /// The first message since the tracker was created or reset.
    First,
    /// The next message in order.
    InOrder,
    /// These seqs were missed (`missing.start` = last seen + 1, `missing.end` = this seq).
    Gap {
        /// The missed seqs, in order.
        missing: Range<u64>,
    },
    /// The seq went backwards or repeated: the publisher restarted.
    Restart {
        /// The last seq of the previous stream.
        previous: u64,
    },
}

/// The last seq seen from one publisher.
#[derive(Debug, Clone, Default)]
pub struct SeqTracker {
    last: Option<u64>,
}

impl SeqTracker {
    /// A tracker that has seen nothing.
    pub fn new() -> Self {
        Self::default()
    }

    /// Judges `seq` against the last one and records it as the new last (see the module
    /// docs for the rules).
    pub fn observe(&mut self, seq: u64) -> SeqVerdict {
        let verdict = match self.last {
            None => SeqVerdict::First,
            Some(last) if seq <= last => SeqVerdict::Restart { previous: last },
            Some(last) if seq == last + 1 => SeqVerdict::InOrder,
            Some(last) => SeqVerdict::Gap {
                missing: last + 1..seq,
            },
        };
        self.last = Some(seq);
        verdict
    }

    /// The last seq seen, if any.
    pub fn last(&self) -> Option<u64> {
        self.last
    }

    /// Forgets the last seq (after a disconnect: the next message is [`SeqVerdict::First`]).
    pub fn reset(&mut self) {
        self.last = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdicts_follow_the_rules() {
        let mut t = SeqTracker::new();
        assert_eq!(t.observe(6096), SeqVerdict::First);
        assert_eq!(t.observe(6097), SeqVerdict::InOrder);
        assert_eq!(
            t.observe(6100),
            SeqVerdict::Gap {
                missing: 6098..6100
            }
        );
        assert_eq!(t.observe(6101), SeqVerdict::InOrder);
        assert_eq!(t.observe(6101), SeqVerdict::Restart { previous: 6101 });
        assert_eq!(t.observe(0), SeqVerdict::Restart { previous: 6101 });
        assert_eq!(t.observe(1), SeqVerdict::InOrder);
        assert_eq!(t.last(), Some(1));
        t.reset();
        assert_eq!(t.last(), None);
        assert_eq!(t.observe(7), SeqVerdict::First);
    }

    #[test]
    fn a_gap_of_one_names_the_one_missing_seq() {
        let mut t = SeqTracker::new();
        t.observe(0);
        let SeqVerdict::Gap { missing } = t.observe(2) else {
            panic!("expected a gap");
        };
        assert_eq!(missing.collect::<Vec<_>>(), vec![1]);
    }
}
