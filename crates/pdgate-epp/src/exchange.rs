//! One ext_proc stream: the life of one HTTP request through Envoy, as a sync state machine.
//! Each message Envoy sends goes in; the answers to send back come out, in the order Envoy
//! requires (request headers → request body, then response headers → response body).
//!
//! - Request headers: kept, once per stream (a second request-headers message: 400), at
//!   most [`MAX_REQUEST_HEADERS`] fields and [`MAX_REQUEST_HEADER_BYTES`] (counted before any
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

use crate::limits::{MAX_REQUEST_HEADERS, MAX_REQUEST_HEADER_BYTES};
use crate::messages::{self, Chunks, Half};
use crate::metadata;
use crate::pick::{self, Buffered, Routed};
use crate::state::Epp;
use crate::usage::BoundedUsage;
use bytes::{Bytes, BytesMut};
use envoy_types::pb::envoy::config::core::v3::HeaderMap as EnvoyHeaders;
use envoy_types::pb::envoy::service::ext_proc::v3::{
    processing_request::Request, ProcessingRequest, ProcessingResponse,
};
use http::{HeaderMap, HeaderName, HeaderValue};
use pdgate_api::headers;
use pdgate_core::body_budget::BodyLease;
use pdgate_core::errors::ApiError;
use pdgate_scheduler::{InFlightGuard, Pick};
use std::collections::{BTreeSet, VecDeque};
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
    fn one(answer: ProcessingResponse) -> Answers {
        let mut a = Answers::default();
        a.push(answer);
        a
    }

    fn push(&mut self, answer: ProcessingResponse) {
        self.parts.push_back(Part::One(Box::new(answer)));
    }

    fn push_body(&mut self, chunks: Chunks) {
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

    /// The request body did not end within `--client-body-timeout-ms` of its headers: the
    /// 408 answer (`serve`'s), counted as `pdgate_client_timeouts_total{kind="body"}`.
    pub fn body_timed_out(&mut self) -> Answers {
        let ms = self.epp.limits.client.body_timeout.as_millis();
        self.epp
            .metrics
            .client_timeouts
            .with_label_values(&["body"])
            .inc();
        self.body = BytesMut::new();
        self.reject(ApiError::BodyTimeout { ms })
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

    /// Makes the body's lease cover `total` bytes (taking it on first use).
    ///
    /// Errors: over `--max-body-bytes` (413) or the in-flight budget (429, counted).
    fn lease_body(&mut self, total: usize) -> Result<(), ApiError> {
        let limit = self.epp.max_body_bytes;
        if total > limit {
            return Err(ApiError::BodyTooLarge { limit });
        }
        let lease = self
            .lease
            .get_or_insert_with(|| self.epp.body_budget.lease());
        lease.cover(total).map_err(|over| {
            self.epp.metrics.body_budget_refusals.inc();
            let e = ApiError::BodyBudget { limit: over.limit };
            if pdgate_core::log_limit::allow(&pdgate_core::log_limit::BODIES_REFUSED) {
                tracing::warn!(error = %e, held = self.epp.body_budget.used(),
                    "ext_proc request body refused");
            }
            e
        })
    }

    /// Keeps the request's headers (`:path` as the path; the other pseudo-headers dropped),
    /// after checking the whole list against [`MAX_REQUEST_HEADERS`] and
    /// [`MAX_REQUEST_HEADER_BYTES`] (nothing is kept from a list over either).
    ///
    /// Errors: the 431 answer naming the limit.
    fn read_request_headers(&mut self, h: Option<&EnvoyHeaders>) -> Result<(), Answers> {
        let list = h.map(|h| h.headers.as_slice()).unwrap_or_default();
        let value_of = |hv: &envoy_types::pb::envoy::config::core::v3::HeaderValue| -> usize {
            if hv.raw_value.is_empty() {
                hv.value.len()
            } else {
                hv.raw_value.len()
            }
        };
        let fields = list.iter().filter(|hv| !hv.key.starts_with(':')).count();
        let bytes: usize = list.iter().map(|hv| hv.key.len() + value_of(hv)).sum();
        let too_large = http::StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE;
        if fields > MAX_REQUEST_HEADERS {
            return Err(self.refuse(
                "too_many_headers",
                too_large,
                format!("request has {fields} header fields; the limit is {MAX_REQUEST_HEADERS}"),
            ));
        }
        if bytes > MAX_REQUEST_HEADER_BYTES {
            return Err(self.refuse(
                "headers_too_large",
                too_large,
                format!(
                    "request headers are {bytes} bytes; the limit is {MAX_REQUEST_HEADER_BYTES}"
                ),
            ));
        }
        for hv in list {
            let value = if hv.raw_value.is_empty() {
                hv.value.as_bytes()
            } else {
                &hv.raw_value
            };
            let key = hv.key.to_ascii_lowercase();
            if key == ":path" {
                self.path = String::from_utf8_lossy(value).into_owned();
                continue;
            }
            if key.starts_with(':') {
                continue;
            }
            if let (Ok(n), Ok(v)) = (
                HeaderName::from_bytes(key.as_bytes()),
                HeaderValue::from_bytes(value),
            ) {
                if n == http::header::CONTENT_LENGTH {
                    self.declared = v.to_str().ok().and_then(|v| v.trim().parse().ok());
                }
                self.headers.append(n, v);
            }
        }
        Ok(())
    }

    /// Router-owned headers the client sent: removed before the request goes upstream.
    fn owned_to_remove(&self) -> Vec<String> {
        let mut names: Vec<String> = (self.headers.keys())
            .map(|k| k.as_str())
            .filter(|k| headers::is_internal(k))
            .map(str::to_string)
            .collect();
        names.dedup();
        names
    }

    fn header_only(&mut self) -> Answers {
        match pick::random(&self.epp, self.subset.as_ref()) {
            Ok(dest) => {
                self.epp.counters.picks.with_label_values(&["random"]).inc();
                Answers::one(self.destination_headers(&dest, None, &[], None))
            }
            Err(e) => self.reject(e),
        }
    }

    /// The request headers answer: the destination list, the prefiller of a split request,
    /// the profile handler's `extra` headers, the body's length when one follows,
    /// router-owned client headers removed.
    fn destination_headers(
        &self,
        destinations: &str,
        prefiller: Option<&str>,
        extra: &[(String, String)],
        body_len: Option<usize>,
    ) -> ProcessingResponse {
        let mut set = vec![(metadata::DESTINATION.to_string(), destinations.to_string())];
        if let Some(p) = prefiller {
            set.push((headers::PREFILLER_HOST_PORT.to_string(), p.to_string()));
        }
        set.extend(extra.iter().cloned());
        if let Some(n) = body_len {
            set.push(("content-length".to_string(), n.to_string()));
        }
        let remove: Vec<String> = (self.owned_to_remove().into_iter())
            .filter(|n| !set.iter().any(|(k, _)| k == n))
            .collect();
        let meta = metadata::destination_metadata(destinations);
        messages::headers(Half::Request, &set, &remove, Some(meta))
    }

    /// Routes the buffered request; its body goes back with `end_of_stream` set when
    /// `body_ends` (false when trailers end the request).
    async fn route(&mut self, body_ends: bool) -> Answers {
        let body = std::mem::take(&mut self.body).freeze();
        let api = pick::api_of(&self.path);
        let Some(api) = api else {
            // Not an API the scheduler reads: a random ready endpoint, as for header-only. A
            // body naming a router-owned field cannot be cleaned here: refused as serve
            // refuses a path it does not route (404), never passed on.
            if let Some(field) = pdgate_core::intake::owned_field_in(&body) {
                tracing::warn!(field, path = %self.path, "router-owned field on an unparsed path refused");
                self.epp
                    .metrics
                    .client_fields_dropped
                    .with_label_values(&[field])
                    .inc();
                let path = self.path.clone();
                return self.reject(ApiError::NoRoute {
                    method: "POST".into(),
                    path,
                });
            }
            return match pick::random(&self.epp, self.subset.as_ref()) {
                Ok(dest) => {
                    self.epp.counters.picks.with_label_values(&["random"]).inc();
                    let mut out =
                        Answers::one(self.destination_headers(&dest, None, &[], Some(body.len())));
                    out.push_body(Chunks::new(Half::Request, body, body_ends));
                    out
                }
                Err(e) => self.reject(e),
            };
        };
        let mut parsed = match pick::parse(api, &body) {
            Ok(p) => p,
            Err(e) => return self.reject(e),
        };
        let buffered = Buffered {
            path: &self.path,
            headers: &self.headers,
            body: body.clone(),
            subset: self.subset.as_ref(),
        };
        let routed = match pick::route(&self.epp, &mut parsed, &buffered).await {
            Ok(r) => r,
            Err(e) => return self.reject(e),
        };
        // What goes on is the cleaned body (a client's router-owned fields removed).
        let body = parsed.body.bytes().clone();
        let destinations = routed.destinations.join(",");
        let prefiller = routed
            .prefill
            .as_ref()
            .map(|p| p.endpoint.endpoint.address.clone());
        self.epp.metrics.count_pd_decision(prefiller.is_some());
        let kind = if prefiller.is_some() {
            "split"
        } else {
            "scheduled"
        };
        self.epp.counters.picks.with_label_values(&[kind]).inc();
        let mut out = Answers::one(self.destination_headers(
            &destinations,
            prefiller.as_deref(),
            &routed.headers,
            Some(body.len()),
        ));
        out.push_body(Chunks::new(Half::Request, body, body_ends));
        self.routed = Some(routed);
        out
    }

    fn on_response_headers(
        &mut self,
        h: Option<&EnvoyHeaders>,
        served_meta: Option<String>,
        end_of_stream: bool,
    ) -> Answers {
        let mut sse = false;
        let mut served_header = None;
        for hv in h.map(|h| h.headers.as_slice()).unwrap_or_default() {
            let value = if hv.raw_value.is_empty() {
                hv.value.clone()
            } else {
                String::from_utf8_lossy(&hv.raw_value).into_owned()
            };
            match hv.key.to_ascii_lowercase().as_str() {
                ":status" => self.status = value.trim().parse().unwrap_or(0),
                "content-type" => sse = value.starts_with("text/event-stream"),
                metadata::SERVED => served_header = metadata::first_address(&value),
                _ => {}
            }
        }
        self.usage = Some(BoundedUsage::new(sse));
        let mut set = Vec::new();
        if let Some(mut routed) = self.routed.take() {
            // The sidecar ran the prefill leg before decode answered: that booking ends.
            if let Some(mut p) = routed.prefill.take() {
                if (200..300).contains(&self.status) {
                    p.guard.complete();
                }
            }
            // The first destination: the pick's address, or the address the profile handler
            // routes it through (a data-parallel rank behind its pod's primary port).
            let picked = (routed.destinations.first().cloned())
                .unwrap_or_else(|| routed.decode.endpoint.endpoint.address.clone());
            let served = served_meta.or(served_header).unwrap_or(picked.clone());
            if served == picked {
                for (k, v) in self
                    .epp
                    .scheduler
                    .response_received(&routed.decode, self.status)
                {
                    set.push((k, v));
                }
                self.serving = Some(Serving::Picked(routed.decode));
            } else {
                self.serving = self
                    .move_booking(&picked, &served)
                    .map(|b| Serving::Moved { _booking: b });
                // Dropped uncompleted: the pick did not serve (its abandon hooks fire).
                drop(routed.decode);
            }
        }
        let out = Answers::one(messages::headers(Half::Response, &set, &[], None));
        if end_of_stream {
            self.finish();
        }
        out
    }

    /// Books the endpoint at `served` (Envoy fell back from `picked`).
    fn move_booking(&self, picked: &str, served: &str) -> Option<InFlightGuard> {
        let snap = self.epp.registry.snapshot();
        let found = snap.endpoints.iter().find(|e| e.endpoint.address == served);
        tracing::info!(
            picked,
            served,
            known = found.is_some(),
            "data plane fell back to another endpoint; booking moved"
        );
        let outcome = if found.is_some() {
            "moved"
        } else {
            "unknown_endpoint"
        };
        self.epp
            .counters
            .fallbacks
            .with_label_values(&[outcome])
            .inc();
        found.map(|e| InFlightGuard::book(&e.load))
    }

    /// The response ended: the booking completes (2xx) and is released; the request is
    /// counted.
    fn finish(&mut self) {
        if let Some(u) = self.usage.as_mut().and_then(BoundedUsage::finish) {
            let cached = u.prompt_tokens_details.map_or(0, |d| d.cached_tokens);
            let tokens = &self.epp.counters.tokens;
            tokens
                .with_label_values(&["prompt"])
                .inc_by(u.prompt_tokens.into());
            tokens
                .with_label_values(&["completion"])
                .inc_by(u.completion_tokens.into());
            tokens.with_label_values(&["cached"]).inc_by(cached.into());
        }
        if let Some(Serving::Picked(mut p)) = self.serving.take() {
            if (200..300).contains(&self.status) {
                p.guard.complete();
            }
        }
        // `:status` is whatever the data plane sent: the label is bounded by the one rule.
        let status = pdgate_core::front::status_label(self.status);
        self.epp.metrics.count_request("ext_proc", status);
        self.done = true;
    }

    /// Ends the exchange with an immediate response for `e` (the statuses and OpenAI bodies
    /// of `pdgate serve`, design.md §5.5).
    fn reject(&mut self, e: ApiError) -> Answers {
        let details = e.to_string();
        let (status, h, body) = e.into_parts(pick::api_of(&self.path));
        let set: Vec<(String, String)> = h
            .iter()
            .filter(|(k, _)| *k != http::header::CONNECTION)
            .filter_map(|(k, v)| Some((k.as_str().to_string(), v.to_str().ok()?.to_string())))
            .collect();
        self.epp.metrics.count_request("ext_proc", status.as_str());
        self.done = true;
        Answers::one(messages::immediate(status.as_u16(), &set, body, &details))
    }

    /// Ends the exchange with an immediate `status` and an OpenAI error body saying
    /// `message` (a refusal with no [`ApiError`] of its own: the header limits, a second
    /// request-headers message), counted as `pdgate_epp_refusals_total{reason}`.
    fn refuse(
        &mut self,
        reason: &'static str,
        status: http::StatusCode,
        message: String,
    ) -> Answers {
        self.epp
            .counters
            .refusals
            .with_label_values(&[reason])
            .inc();
        if pdgate_core::log_limit::allow(&pdgate_core::log_limit::BODIES_REFUSED) {
            tracing::warn!(reason, %message, "ext_proc request refused");
        }
        let body = pdgate_api::ErrorBody::new(status.as_u16(), message.clone());
        let body = match pick::api_of(&self.path) {
            Some(api) => body.to_bytes_for(api),
            None => body.to_bytes(),
        };
        let set = [("content-type".to_string(), "application/json".to_string())];
        self.epp.metrics.count_request("ext_proc", status.as_str());
        self.done = true;
        Answers::one(messages::immediate(status.as_u16(), &set, body, &message))
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
