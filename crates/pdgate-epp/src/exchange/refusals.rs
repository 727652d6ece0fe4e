//! Ending an exchange early with an immediate response: for an [`ApiError`] (`serve`'s status
//! and body), or a refusal of its own (counted by reason).

use super::{Answers, Exchange};
use crate::messages;
use crate::pick;
use pdgate_core::errors::ApiError;

impl Exchange {
    /// Ends the exchange with an immediate response for `e` (the statuses and OpenAI bodies
    /// of `pdgate serve`, design.md §5.5).
    pub(super) fn reject(&mut self, e: ApiError) -> Answers {
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
    pub(super) fn refuse(
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
