//! The one failure rule: for everything that can go wrong on a leg, whether to retry it on
//! another endpoint, whether it counts against the endpoint's circuit breaker, and what the
//! client gets (design.md §5.5). The live retry loop, the breakers, the error-to-status
//! mapping (`errors.rs`) and the streaming body all read [`rule`]; its table is the test at
//! the bottom.
//!
//! Principles (Envoy `retry_on: connect-failure,reset,gateway-error`; Pingora's
//! `RetryType`: never retry once bytes went downstream):
//! - retry only what happened before any byte reached the client, and only where another
//!   endpoint may do better (connect failures, resets, 502/503/504, a head that never came,
//!   a body that broke before it was passed on);
//! - count against the breaker what says the endpoint is unwell (the same, plus a stalled
//!   body or stream), never a client mistake (4xx), never an engine's own answer to this
//!   request (500), never a deadline (a long generation is not a failure), never a client
//!   that left;
//! - a timeout is 504, any other upstream failure 502, an open circuit 503 when no other
//!   endpoint is left; after streaming began the client gets an SSE error event.

use pdgate_coordinator::FailureKind;

/// Something that happened on a leg (a response head, or a failure).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LegEvent {
    /// The endpoint answered with this status (before any byte reached the client).
    Answered(u16),
    /// The leg produced no usable response.
    Failed(FailureKind),
    /// A streamed body sent nothing for longer than its idle timeout (after the head).
    StreamIdle,
    /// A streamed body hit its total cap.
    StreamDeadline,
    /// A streamed body failed (reset, truncated) after streaming began.
    StreamBroken,
    /// The engine put an error object in its stream (a bare JSON line or an SSE error event).
    StreamErrorLine,
    /// The client went away.
    ClientGone,
}

/// What the breaker learns from an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BreakerEffect {
    /// The endpoint worked (closes a half-open breaker).
    Success,
    /// The endpoint failed (consecutive failures open the breaker).
    Failure,
    /// Says nothing about the endpoint's health.
    Neutral,
}

/// What the client gets when the event ends the leg.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientSees {
    /// The upstream answer, status and body, as is (2xx, and 4xx: the client's mistake).
    Upstream,
    /// A router error with this status and an OpenAI error body naming the endpoint.
    Status(u16),
    /// The stream already began: an SSE `data: {"error":…}` event ends it (a non-SSE body is
    /// cut).
    StreamError,
    /// Nobody: the client is gone (upstream legs are dropped, so the engine aborts).
    Nothing,
}

/// The rule's answer for one event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Verdict {
    /// Try another endpoint of the same phase and revision (unless pinned, within the retry
    /// budget).
    pub retry: bool,
    /// What the endpoint's breaker records.
    pub breaker: BreakerEffect,
    /// What the client gets if this ends the leg.
    pub client: ClientSees,
}

const fn v(retry: bool, breaker: BreakerEffect, client: ClientSees) -> Verdict {
    Verdict {
        retry,
        breaker,
        client,
    }
}

/// The failure rule (see the module docs).
pub fn rule(event: LegEvent) -> Verdict {
    use BreakerEffect::{Failure, Neutral, Success};
    use ClientSees::{Nothing, Status, StreamError, Upstream};
    use FailureKind as K;
    match event {
        LegEvent::Answered(s) if s < 400 => v(false, Success, Upstream),
        LegEvent::Answered(502..=504) => v(true, Failure, Status(502)),
        LegEvent::Answered(s) if s >= 500 => v(false, Neutral, Status(502)),
        LegEvent::Answered(_) => v(false, Neutral, Upstream),
        LegEvent::Failed(kind) => match kind {
            K::ConnectRefused | K::Reset | K::BodyBroken => v(true, Failure, Status(502)),
            K::ConnectTimeout | K::HeadTimeout => v(true, Failure, Status(504)),
            K::Status(502..=504) => v(true, Failure, Status(502)),
            K::Status(_) => v(false, Neutral, Status(502)),
            K::Deadline => v(false, Neutral, Status(504)),
            K::BodyTimeout => v(false, Failure, Status(504)),
            K::BreakerOpen => v(true, Neutral, Status(503)),
            K::Unscheduled(s) => v(false, Neutral, Status(s)),
        },
        LegEvent::StreamIdle => v(false, Failure, StreamError),
        LegEvent::StreamDeadline => v(false, Neutral, StreamError),
        LegEvent::StreamBroken => v(false, Failure, StreamError),
        LegEvent::StreamErrorLine => v(false, Neutral, StreamError),
        LegEvent::ClientGone => v(false, Neutral, Nothing),
    }
}

/// The status a client gets for a leg that failed with `kind` (through [`rule`]).
pub fn client_status(kind: FailureKind) -> u16 {
    match rule(LegEvent::Failed(kind)).client {
        ClientSees::Status(s) => s,
        _ => 502,
    }
}

/// The label of a failure kind in metrics and logs.
pub fn kind_label(kind: FailureKind) -> &'static str {
    match kind {
        FailureKind::ConnectRefused => "connect_refused",
        FailureKind::ConnectTimeout => "connect_timeout",
        FailureKind::Reset => "reset",
        FailureKind::HeadTimeout => "head_timeout",
        FailureKind::Deadline => "deadline",
        FailureKind::BodyTimeout => "body_timeout",
        FailureKind::BodyBroken => "body_broken",
        FailureKind::Status(_) => "status_5xx",
        FailureKind::BreakerOpen => "breaker_open",
        FailureKind::Unscheduled(_) => "unscheduled",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use BreakerEffect::{Failure, Neutral, Success};
    use ClientSees::{Nothing, Status, StreamError, Upstream};
    use FailureKind as K;
    use LegEvent::*;

    /// The rule as a table: event → (retry elsewhere, breaker, client gets).
    #[test]
    fn the_failure_table() {
        let table: &[(LegEvent, bool, BreakerEffect, ClientSees)] = &[
            (Answered(200), false, Success, Upstream),
            (Answered(204), false, Success, Upstream),
            (Answered(400), false, Neutral, Upstream),
            (Answered(404), false, Neutral, Upstream),
            (Answered(412), false, Neutral, Upstream),
            (Answered(429), false, Neutral, Upstream),
            (Answered(500), false, Neutral, Status(502)),
            (Answered(501), false, Neutral, Status(502)),
            (Answered(502), true, Failure, Status(502)),
            (Answered(503), true, Failure, Status(502)),
            (Answered(504), true, Failure, Status(502)),
            (Answered(505), false, Neutral, Status(502)),
            (Failed(K::ConnectRefused), true, Failure, Status(502)),
            (Failed(K::ConnectTimeout), true, Failure, Status(504)),
            (Failed(K::Reset), true, Failure, Status(502)),
            (Failed(K::HeadTimeout), true, Failure, Status(504)),
            (Failed(K::BodyBroken), true, Failure, Status(502)),
            (Failed(K::Deadline), false, Neutral, Status(504)),
            (Failed(K::BodyTimeout), false, Failure, Status(504)),
            (Failed(K::Status(503)), true, Failure, Status(502)),
            (Failed(K::Status(500)), false, Neutral, Status(502)),
            (Failed(K::BreakerOpen), true, Neutral, Status(503)),
            (Failed(K::Unscheduled(503)), false, Neutral, Status(503)),
            (Failed(K::Unscheduled(429)), false, Neutral, Status(429)),
            (StreamIdle, false, Failure, StreamError),
            (StreamDeadline, false, Neutral, StreamError),
            (StreamBroken, false, Failure, StreamError),
            (StreamErrorLine, false, Neutral, StreamError),
            (ClientGone, false, Neutral, Nothing),
        ];
        for &(event, retry, breaker, client) in table {
            assert_eq!(
                rule(event),
                Verdict {
                    retry,
                    breaker,
                    client
                },
                "{event:?}"
            );
        }
    }

    #[test]
    fn client_statuses_follow_the_table() {
        assert_eq!(client_status(K::ConnectTimeout), 504);
        assert_eq!(client_status(K::Deadline), 504);
        assert_eq!(client_status(K::ConnectRefused), 502);
        assert_eq!(client_status(K::BreakerOpen), 503);
        assert_eq!(client_status(K::Unscheduled(429)), 429);
    }
}
