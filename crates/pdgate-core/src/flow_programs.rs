//! `program-aware-fairness`, served: the parts llm-d runs as the plugin's PreRequest and
//! ResponseBody hooks (the choice itself is [`pdgate_scheduler::flow::program_aware`]).
//!
//! Every request flow control dispatches while some band is program-aware gets a
//! [`ProgramTicket`] (its program counted in flight, its queue wait observed); the ticket
//! moves into the response body ([`metered`]), which reads the answer's `usage` as it passes
//! — from the SSE event that carries it, or from the whole JSON answer — and, when the body
//! ends or is dropped, reports the request's cost (`prompt_tokens + 2 × completion_tokens`)
//! and ends the in-flight count. A request that fails before its answer drops its ticket
//! with no cost.
//!
//! Gauges, with llm-d's names: `llm_d_epp_program_aware_attained_service_tokens{program_id}`,
//! `llm_d_epp_program_aware_avg_wait_time_milliseconds{program_id}` and
//! `llm_d_epp_program_aware_jains_fairness_index`; a program's series go when the eviction
//! sweep forgets it.

use crate::flow_control::FlowController;
use axum::body::Body;
use axum::response::Response;
use bytes::Bytes;
use http_body::{Frame, SizeHint};
use pdgate_api::Usage;
use prometheus::{Gauge, GaugeVec, Opts, Registry};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

pub use pdgate_api::usage_reader::MAX_JSON_BYTES;

/// The program-aware gauges.
#[derive(Clone)]
pub struct ProgramMetrics {
    /// `llm_d_epp_program_aware_attained_service_tokens{program_id}`, weighted tokens.
    pub service: GaugeVec,
    /// `llm_d_epp_program_aware_avg_wait_time_milliseconds{program_id}`, ms.
    pub avg_wait: GaugeVec,
    /// `llm_d_epp_program_aware_jains_fairness_index`.
    pub fairness: Gauge,
}

impl ProgramMetrics {
    /// Creates the gauges in `r`.
    pub fn new(r: &Registry) -> ProgramMetrics {
        let vec = |name: &str, help: &str| {
            let g = GaugeVec::new(Opts::new(name, help), &["program_id"]).expect("valid metric");
            // Names are static and unique within the registry, so registration cannot collide.
            let _ = r.register(Box::new(g.clone()));
            g
        };
        let fairness = Gauge::new(
            "llm_d_epp_program_aware_jains_fairness_index",
            "Jain's fairness index of the programs' mean queue waits (1 = equal).",
        )
        .expect("valid metric");
        let _ = r.register(Box::new(fairness.clone()));
        ProgramMetrics {
            service: vec(
                "llm_d_epp_program_aware_attained_service_tokens",
                "Time-decayed attained service per program (prompt + 2 x completion tokens).",
            ),
            avg_wait: vec(
                "llm_d_epp_program_aware_avg_wait_time_milliseconds",
                "Mean flow-control queue wait per program, ms.",
            ),
            fairness,
        }
    }

    /// Removes the series of a forgotten program.
    pub fn forget(&self, program: &str) {
        let _ = self.service.remove_label_values(&[program]);
        let _ = self.avg_wait.remove_label_values(&[program]);
    }
}

/// One dispatched request of a program, until its answer ends (see the module docs).
pub struct ProgramTicket {
    ctl: Arc<FlowController>,
    program: Arc<str>,
    usage: Option<Usage>,
}

impl ProgramTicket {
    /// A ticket of `program` (its dispatch already recorded by `ctl`).
    pub(crate) fn new(ctl: Arc<FlowController>, program: Arc<str>) -> ProgramTicket {
        ProgramTicket {
            ctl,
            program,
            usage: None,
        }
    }

    /// The program (fairness id).
    pub fn program(&self) -> &str {
        &self.program
    }

    /// Records the answer's `usage` (the request's cost, reported when the ticket drops).
    pub fn set_usage(&mut self, usage: Usage) {
        self.usage = Some(usage);
    }
}

impl Drop for ProgramTicket {
    fn drop(&mut self) {
        let cost = self.usage.as_ref().map(|u| {
            pdgate_scheduler::flow::program_aware::cost(
                u.prompt_tokens as u64,
                u.completion_tokens as u64,
            )
        });
        self.ctl.program_completed(&self.program, cost);
    }
}

/// Reads `usage` from body chunks (the one reader the EPP uses too).
pub type UsageTap = pdgate_api::usage_reader::UsageReader;

/// A response body that reads its `usage` into its [`ProgramTicket`] and releases the
/// ticket when it ends or is dropped.
pub struct MeteredBody<B> {
    inner: B,
    tap: UsageTap,
    ticket: Option<ProgramTicket>,
}

impl<B> MeteredBody<B> {
    fn release(&mut self) {
        if let Some(mut t) = self.ticket.take() {
            if let Some(u) = self.tap.finish() {
                t.set_usage(u);
            }
        }
    }
}

impl<B> Drop for MeteredBody<B> {
    fn drop(&mut self) {
        self.release();
    }
}

impl<B> http_body::Body for MeteredBody<B>
where
    B: http_body::Body<Data = Bytes> + Unpin,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = &mut *self;
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(f))) => {
                if let (Some(d), Some(_)) = (f.data_ref(), &this.ticket) {
                    this.tap.push(d);
                }
            }
            Poll::Ready(None) => this.release(),
            _ => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// `response` with its body metered for `ticket` (unchanged without one).
pub fn metered(response: Response, ticket: Option<ProgramTicket>) -> Response {
    let Some(ticket) = ticket else {
        return response;
    };
    let sse = crate::sse::is_event_stream(response.headers());
    response.map(|inner| {
        Body::new(MeteredBody {
            inner,
            tap: UsageTap::new(sse),
            ticket: Some(ticket),
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_from_json_and_from_a_split_sse_stream() {
        let mut t = UsageTap::new(false);
        let body =
            br#"{"id":"x","usage":{"prompt_tokens":16,"completion_tokens":10,"total_tokens":26}}"#;
        t.push(&body[..20]);
        t.push(&body[20..]);
        let u = t.finish().unwrap();
        assert_eq!((u.prompt_tokens, u.completion_tokens), (16, 10));
        let mut t = UsageTap::new(true);
        let stream = "data: {\"choices\":[{\"text\":\"a\"}]}\n\ndata: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":4,\"total_tokens\":7}}\n\ndata: [DONE]\n\n";
        for c in stream.as_bytes().chunks(7) {
            t.push(c);
        }
        let u = t.finish().unwrap();
        assert_eq!((u.prompt_tokens, u.completion_tokens), (3, 4));
        // No usage, or an answer over the cap: unknown.
        let mut t = UsageTap::new(true);
        t.push(b"data: {\"choices\":[]}\n\n");
        assert_eq!(t.finish(), None);
        let mut t = UsageTap::new(false);
        t.push(&vec![b' '; MAX_JSON_BYTES]);
        t.push(body);
        assert_eq!(t.finish(), None);
    }
}
