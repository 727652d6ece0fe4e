//! Ingress: the inference handler (ingress, the role, one planner per role), reading client bodies, the server threads.

pub(crate) mod client_body;
pub(crate) mod proxy;
pub(crate) mod threads;
