//! Upstream timeouts with LLM semantics, defined once (design.md §5.5).
//!
//! A non-streamed vLLM answer arrives only when generation ends — minutes for a long output —
//! so a non-streamed leg (and every prefill leg, which is sent with `stream: false`) is bounded
//! by a total deadline, never by a response-head timeout. A streamed leg gets its head as soon
//! as the engine accepted the request, then one chunk per token: it is bounded by a head
//! timeout and by an idle timeout between chunks, and has no total cap unless one is set.
//! Once a non-streamed head has come, the rest of the body must follow within the body
//! timeout (an engine that sends a head and then nothing does not hold a request forever).
//!
//! | leg | connect | head | between chunks | whole leg |
//! |---|---|---|---|---|
//! | streamed | `connect` | `stream_head` | `stream_idle` | `stream_total` (none by default) |
//! | non-streamed, prefill | `connect` | — | `body` (after the head) | `deadline` |
//!
//! Defaults: connect 5 s (Envoy's `connect_timeout` default), stream head 60 s (llm-d's
//! coordinator gateway timeout), stream idle 300 s (Envoy's `stream_idle_timeout` default: a
//! busy engine may queue a request for minutes before its first token), deadline 30 min,
//! body 300 s. A healthy engine that is still generating is never cut off by these defaults.

/// The longest timeout a flag takes, s (one year): longer would overflow clock arithmetic and
/// means nothing for a request.
pub const MAX_TIMEOUT_SECS: u64 = 365 * 24 * 3600;

use std::time::Duration;

/// Default TCP connect timeout, s.
pub const DEFAULT_CONNECT_TIMEOUT_SECS: u64 = 5;
/// Default time to the response head of a streamed leg, s.
pub const DEFAULT_STREAM_HEAD_TIMEOUT_SECS: u64 = 60;
/// Default longest gap between two chunks of a streamed leg, s.
pub const DEFAULT_STREAM_IDLE_TIMEOUT_SECS: u64 = 300;
/// Default total deadline of a non-streamed leg (and a prefill leg), s: 30 min.
pub const DEFAULT_LEG_DEADLINE_SECS: u64 = 1800;
/// Default time for the body of a non-streamed leg once its head has come, s.
pub const DEFAULT_BODY_TIMEOUT_SECS: u64 = 300;

/// Every upstream timeout of a router (`pdgate serve --*-timeout-secs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UpstreamTimeouts {
    /// TCP connect.
    pub connect: Duration,
    /// Streamed leg: request sent → response head.
    pub stream_head: Duration,
    /// Streamed leg: longest gap between two body chunks (the head counts as the first).
    pub stream_idle: Duration,
    /// Streamed leg: whole leg, head and body; `None` = no cap.
    pub stream_total: Option<Duration>,
    /// Non-streamed and prefill legs: whole leg, head and body.
    pub deadline: Duration,
    /// Non-streamed and prefill legs: head → end of body.
    pub body: Duration,
}

impl Default for UpstreamTimeouts {
    fn default() -> Self {
        UpstreamTimeouts {
            connect: Duration::from_secs(DEFAULT_CONNECT_TIMEOUT_SECS),
            stream_head: Duration::from_secs(DEFAULT_STREAM_HEAD_TIMEOUT_SECS),
            stream_idle: Duration::from_secs(DEFAULT_STREAM_IDLE_TIMEOUT_SECS),
            stream_total: None,
            deadline: Duration::from_secs(DEFAULT_LEG_DEADLINE_SECS),
            body: Duration::from_secs(DEFAULT_BODY_TIMEOUT_SECS),
        }
    }
}

/// The bounds of one leg, from [`UpstreamTimeouts::for_leg`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LegTimeouts {
    /// The leg streams its body to the client (SSE): head and idle bounds apply.
    pub streamed: bool,
    /// Request sent → response head.
    pub head: Duration,
    /// Streamed: the longest gap between chunks. Non-streamed: head → end of body.
    pub body: Duration,
    /// Whole leg; `None` = no cap.
    pub total: Option<Duration>,
}

impl UpstreamTimeouts {
    /// The bounds of a leg that streams (`streamed`) or answers whole. A non-streamed leg's
    /// head is bounded by its deadline alone.
    pub fn for_leg(&self, streamed: bool) -> LegTimeouts {
        if streamed {
            LegTimeouts {
                streamed,
                head: self
                    .stream_total
                    .map_or(self.stream_head, |t| t.min(self.stream_head)),
                body: self.stream_idle,
                total: self.stream_total,
            }
        } else {
            LegTimeouts {
                streamed,
                head: self.deadline,
                body: self.body,
                total: Some(self.deadline),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: fn(u64) -> Duration = Duration::from_secs;

    #[test]
    fn defaults_fit_long_generations() {
        let t = UpstreamTimeouts::default();
        assert_eq!(
            (
                t.connect,
                t.stream_head,
                t.stream_idle,
                t.stream_total,
                t.deadline,
                t.body
            ),
            (S(5), S(60), S(300), None, S(1800), S(300))
        );
    }

    #[test]
    fn a_leg_gets_the_bounds_of_its_kind() {
        let t = UpstreamTimeouts::default();
        assert_eq!(
            t.for_leg(true),
            LegTimeouts {
                streamed: true,
                head: S(60),
                body: S(300),
                total: None
            }
        );
        assert_eq!(
            t.for_leg(false),
            LegTimeouts {
                streamed: false,
                head: S(1800),
                body: S(300),
                total: Some(S(1800))
            }
        );
        let capped = UpstreamTimeouts {
            stream_total: Some(S(20)),
            ..t
        };
        assert_eq!(
            capped.for_leg(true).head,
            S(20),
            "a total cap bounds the head too"
        );
        assert_eq!(capped.for_leg(true).total, Some(S(20)));
    }
}
