//! Dispatch: the request context, the two dispatchers (engines, per-role routers), phase legs, the upstream client, retries and timeouts.

pub(crate) mod ctx;
pub(crate) mod engine_dispatch;
pub(crate) mod leg_body;
pub(crate) mod leg_send;
pub(crate) mod phase_routers;
pub(crate) mod retry;
pub(crate) mod router_dispatch;
pub(crate) mod served;
pub(crate) mod timeouts;
pub(crate) mod upstream;
