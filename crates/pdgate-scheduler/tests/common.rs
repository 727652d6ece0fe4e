// shared test helpers (included with `mod common;`)
#![allow(dead_code)]

use pdgate_scheduler::{Endpoint, EndpointLoad, EndpointState, Snapshot};
use std::collections::BTreeMap;
use std::sync::Arc;

pub fn compat(name: &str) -> String {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/compat/llm-d/");
    std::fs::read_to_string(format!("{dir}{name}")).expect("compat file")
}

pub fn ep(name: &str, role: Option<&str>) -> Arc<EndpointState> {
    let mut labels = BTreeMap::new();
    if let Some(r) = role {
        labels.insert("llm-d.ai/role".to_string(), r.to_string());
    }
    Arc::new(EndpointState {
        endpoint: Endpoint::new(name, format!("{name}:8000"), labels),
        load: Arc::new(EndpointLoad::default()),
    })
}

pub fn snapshot(eps: &[Arc<EndpointState>]) -> Snapshot {
    Snapshot {
        endpoints: eps.to_vec(),
        version: 1,
    }
}
