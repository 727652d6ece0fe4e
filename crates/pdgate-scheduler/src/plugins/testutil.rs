//! Helpers for plugin unit tests.

use crate::endpoint::{Endpoint, EndpointLoad, EndpointState};
use crate::request::{RequestCtx, SchedulingRequest};
use pdgate_api::PromptInput;
use std::collections::BTreeMap;
use std::sync::Arc;

/// An endpoint named `name` with optional role label.
pub fn ep(name: &str, role: Option<&str>) -> Arc<EndpointState> {
    let mut labels = BTreeMap::new();
    if let Some(r) = role {
        labels.insert(pdgate_api::labels::ROLE.to_string(), r.to_string());
    }
    Arc::new(EndpointState {
        endpoint: Endpoint::new(name, format!("{name}:8000"), labels),
        load: Arc::new(EndpointLoad::default()),
    })
}

/// Runs `f` with a context for a token prompt.
pub fn with_ctx<R>(prompt: &PromptInput, f: impl FnOnce(&RequestCtx<'_>) -> R) -> R {
    let req = SchedulingRequest::new("r", "m", prompt);
    let ctx = RequestCtx::new(&req, 4);
    f(&ctx)
}

/// An endpoint named `name` with the given labels.
pub fn ep_labels(name: &str, labels: &[(&str, &str)]) -> Arc<EndpointState> {
    let labels: BTreeMap<String, String> = labels
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Arc::new(EndpointState {
        endpoint: Endpoint::new(name, format!("{name}:8000"), labels),
        load: Arc::new(EndpointLoad::default()),
    })
}
