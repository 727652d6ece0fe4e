//! Routing the request: a header-only one (or one on a path the scheduler does not read) to
//! a random ready endpoint, a buffered one through [`crate::pick`]; the request headers answer
//! naming the destination.

use super::{Answers, Exchange};
use crate::messages::{self, Chunks, Half};
use crate::metadata;
use crate::pick::{self, Buffered};
use envoy_types::pb::envoy::service::ext_proc::v3::ProcessingResponse;
use pdgate_api::headers;
use pdgate_core::errors::ApiError;

impl Exchange {
    /// Routes a header-only request (no body follows) to a random ready endpoint of the
    /// subset.
    pub(super) fn header_only(&mut self) -> Answers {
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
    pub(super) async fn route(&mut self, body_ends: bool) -> Answers {
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
}
