//! The request body's bounds: its lease of the in-flight body budget (and the body limit),
//! and the answer when it does not end within the body timeout.

use super::{Answers, Exchange};
use bytes::BytesMut;
use pdgate_core::errors::ApiError;

impl Exchange {
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

    /// Makes the body's lease cover `total` bytes (taking it on first use).
    ///
    /// Errors: over `--max-body-bytes` (413) or the in-flight budget (429, counted).
    pub(super) fn lease_body(&mut self, total: usize) -> Result<(), ApiError> {
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
}
