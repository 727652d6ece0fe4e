//! One ext_proc stream: the life of one HTTP request through Envoy, as a sync state machine.
//! Each message Envoy sends goes in; the answers to send back come out, in the order Envoy
//! requires (request headers → request body, then response headers → response body).
//!
//! - Request headers: kept, once per stream (a second request-headers message: 400), at
//!   most [`MAX_REQUEST_HEADERS`](crate::limits::MAX_REQUEST_HEADERS) fields and
//!   [`MAX_REQUEST_HEADER_BYTES`](crate::limits::MAX_REQUEST_HEADER_BYTES) (counted before any
//!   is kept; over: 431 naming the limit). A header-only request (`end_of_stream`) goes to a
//!   random ready endpoint of the subset at once. A declared `content-length` over the body
//!   limit is refused at once (413), as is one the in-flight body budget cannot take (429).
//! - Request body: buffered to `end_of_stream` under a lease of the in-flight body budget
//!   (`--max-inflight-body-bytes`, as `serve`: over it, 429 with `Retry-After`; over the body
//!   limit, 413), parsed once and routed ([`crate::pick`]); the answer is the headers answer
//!   (destination header, `x-prefiller-host-port` when split, router-owned client headers
//!   removed, dynamic metadata, route cache cleared) then the body in chunks of at most
//!   62,000 bytes, made as Envoy takes them. The lease is given back once the body was handed
//!   on ([`Exchange::handed_on`]) or the stream ends (dropped with the exchange).
//! - Response headers: the endpoint that served (`…-served` metadata, else the response
//!   header of that name, else the pick) gets the booking — it moves if Envoy fell back; the
//!   prefill booking of a split request ends (the sidecar ran prefill before decode
//!   answered); the screener's stamps (the served revision) are added.
//! - Response body: passed back chunk by chunk, `usage` read on the way (bounded:
//!   [`crate::usage`]); at end of stream the booking completes and is released.
//!
//! What the stream may wait for next, and for how long, is its [`Phase`] (the service ends a
//! stream that waits longer).
//!
//! Every booking is owned by the [`Exchange`]: dropping it (stream reset, Envoy gone) releases
//! them, as a response body's end does in `serve`.
//!
//! The stream's state and the dispatch of each message are here; its parts: `answers` (what a
//! message produced), `request_headers`, `request_body` (the lease and the body timeout),
//! `routing`, `response` and `refusals` (immediate responses).

mod answers;
mod refusals;
mod request_body;
mod request_headers;
mod response;
mod routing;

pub use answers::Answers;

use crate::messages::{self, Chunks, Half};
use crate::metadata;
use crate::pick::Routed;
use crate::state::Epp;
use crate::usage::BoundedUsage;
use bytes::{Bytes, BytesMut};
use envoy_types::pb::envoy::service::ext_proc::v3::{
    processing_request::Request, ProcessingRequest,
};
use http::HeaderMap;
use pdgate_core::body_budget::BodyLease;
use pdgate_core::errors::ApiError;
use pdgate_scheduler::{InFlightGuard, Pick};
use std::collections::BTreeSet;
use std::sync::Arc;
use tokio::time::Instant;

/// The booking of the endpoint that is serving the request.
#[derive(Debug)]
enum Serving {
    /// The pick served it (its booking fires the scheduler's hooks).
    Picked(Pick),
    /// Envoy fell back to another endpoint: that endpoint is booked instead.
    Moved { _booking: InFlightGuard },
}

/// One stream's state (see the module docs).
pub struct Exchange {
    epp: Arc<Epp>,
    path: String,
    headers: HeaderMap,
    subset: Option<BTreeSet<String>>,
    body: BytesMut,
    /// The body's share of the in-flight budget: held from the request headers (a declared
    /// length) or the first chunk until the body is handed on.
    lease: Option<BodyLease>,
    /// The `content-length` the request declared.
    declared: Option<usize>,
    /// When the request headers came (the body must end within the body timeout).
    headers_at: Option<Instant>,
    routed: Option<Routed>,
    serving: Option<Serving>,
    usage: Option<BoundedUsage>,
    status: u16,
    /// True once the request body ended (it is routed once).
    body_ended: bool,
    /// True once an immediate response was sent, or the response ended: nothing more is
    /// answered.
    done: bool,
}

/// What the stream waits for (the service bounds each wait).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// No request headers yet: they must come within `--client-header-timeout-ms` of the
    /// stream's opening.
    Headers,
    /// The request body, since the headers came at `since`: it must end within
    /// `--client-body-timeout-ms` of them (else 408).
    Body {
        /// When the request headers came.
        since: Instant,
    },
    /// The request went upstream (or is a header-only one): the response's messages, each
    /// within `--ext-proc-idle-timeout-ms` of the last.
    Upstream,
    /// Answered (an immediate response, or the response ended): only Envoy's close is
    /// expected, within `--client-header-timeout-ms`.
    Done,
}

impl Exchange {
    /// A new stream of `epp`.
    pub fn new(epp: Arc<Epp>) -> Self {
        Exchange {
            epp,
            path: String::new(),
            headers: HeaderMap::new(),
            subset: None,
            body: BytesMut::new(),
            lease: None,
            declared: None,
            headers_at: None,
            routed: None,
            serving: None,
            usage: None,
            status: 0,
            body_ended: false,
            done: false,
        }
    }

    /// True once an immediate response ended the exchange.
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// What the stream waits for now.
    pub fn phase(&self) -> Phase {
        match (self.done, self.body_ended, self.headers_at) {
            (true, _, _) => Phase::Done,
            (false, true, _) => Phase::Upstream,
            (false, false, Some(since)) => Phase::Body { since },
            (false, false, None) => Phase::Headers,
        }
    }

    /// The answers of the last message were handed to the stream: once the request body has
    /// ended (routed, refused, or header-only), its lease of the in-flight budget is given
    /// back.
    pub fn handed_on(&mut self) {
        if self.body_ended || self.done {
            self.lease = None;
        }
    }
    /// Handles one message from Envoy; returns the answers to send. Awaits only while a
    /// request body is routed (the token-producer step may call an engine).
    pub async fn on_message(&mut self, msg: ProcessingRequest) -> Answers {
        if self.done {
            return Answers::default();
        }
        let meta = msg.metadata_context.as_ref();
        match msg.request {
            Some(Request::RequestHeaders(_)) if self.headers_at.is_some() || self.body_ended => {
                self.refuse(
                    "duplicate_request_headers",
                    http::StatusCode::BAD_REQUEST,
                    "a second request headers message on one ext_proc stream".to_string(),
                )
            }
            Some(Request::RequestHeaders(h)) => {
                self.headers_at = Some(Instant::now());
                if let Err(refused) = self.read_request_headers(h.headers.as_ref()) {
                    return refused;
                }
                match metadata::subset_hint(meta) {
                    Ok(subset) => self.subset = subset,
                    Err(reason) => {
                        return self.reject(ApiError::InvalidHeader {
                            header: metadata::SUBSET,
                            reason,
                        })
                    }
                }
                if h.end_of_stream {
                    // A header-only request: no body follows.
                    self.body_ended = true;
                    return self.header_only();
                }
                if let Some(n) = self.declared {
                    if let Err(e) = self.lease_body(n) {
                        return self.reject(e);
                    }
                }
                Answers::default()
            }
            Some(Request::RequestBody(_)) if self.body_ended => {
                tracing::warn!("request body after its end of stream; ignored");
                Answers::default()
            }
            Some(Request::RequestBody(b)) => {
                let total = self.body.len() + b.body.len();
                if let Err(e) = self.lease_body(total) {
                    return self.reject(e);
                }
                if self.body.is_empty() {
                    // The whole declared body at once (leased already): no doubling.
                    self.body
                        .reserve(self.declared.unwrap_or(0).max(b.body.len()));
                }
                self.body.extend_from_slice(&b.body);
                if b.end_of_stream {
                    self.body_ended = true;
                    return self.route(true).await;
                }
                Answers::default()
            }
            // Trailers end a request body that did not end itself: route it then.
            Some(Request::RequestTrailers(_)) if !self.body_ended => {
                self.body_ended = true;
                let mut out = self.route(false).await;
                if !self.done {
                    out.push(messages::trailers(Half::Request));
                }
                out
            }
            Some(Request::RequestTrailers(_)) => Answers::one(messages::trailers(Half::Request)),
            Some(Request::ResponseHeaders(h)) => {
                // The request phase is over, whatever Envoy sent of it.
                self.body_ended = true;
                let served = metadata::served(meta);
                self.on_response_headers(h.headers.as_ref(), served, h.end_of_stream)
            }
            Some(Request::ResponseBody(b)) => {
                if let Some(u) = &mut self.usage {
                    if let Some(why) = u.push(&b.body) {
                        (self.epp.counters.usage_unread)
                            .with_label_values(&[why.label()])
                            .inc();
                    }
                }
                let chunks = Chunks::new(Half::Response, Bytes::from(b.body), b.end_of_stream);
                let mut answers = Answers::default();
                answers.push_body(chunks);
                if b.end_of_stream {
                    self.finish();
                }
                answers
            }
            Some(Request::ResponseTrailers(_)) => {
                self.finish();
                Answers::one(messages::trailers(Half::Response))
            }
            None => Answers::default(),
        }
    }
}

impl Drop for Exchange {
    /// A stream that ends before its response did (Envoy reset it, the client left): its
    /// bookings are released with the fields; the request is counted as 499.
    fn drop(&mut self) {
        if !self.done && (self.routed.is_some() || self.serving.is_some()) {
            self.epp.metrics.count_request("ext_proc", "499");
            self.epp.counters.resets.inc();
        }
    }
}
