//! The response: its headers move the booking to the endpoint that served and end a split
//! request's prefill booking; its end completes and releases the booking and counts the
//! request and its usage.

use super::{Answers, Exchange, Serving};
use crate::messages::{self, Half};
use crate::metadata;
use crate::usage::BoundedUsage;
use envoy_types::pb::envoy::config::core::v3::HeaderMap as EnvoyHeaders;
use pdgate_scheduler::InFlightGuard;

impl Exchange {
    /// The response headers: the status and content type read, the booking moved to the
    /// endpoint that served (`served_meta`, else the header, else the pick), the screener's
    /// stamps added.
    pub(super) fn on_response_headers(
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
    pub(super) fn finish(&mut self) {
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
}
