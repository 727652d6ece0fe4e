//! `pdgate epp`: pdgate as an Envoy external-processing endpoint picker (EPP), the second
//! front end beside `pdgate serve`, over the same scheduler, config, screeners and endpoint
//! state (`pdgate-fleet`). It implements the Gateway API Inference Extension endpoint-picker
//! protocol v1.0 (`docs/proposals/004-endpoint-picker-protocol` of
//! kubernetes-sigs/gateway-api-inference-extension) over `envoy.service.ext_proc.v3`, with
//! Envoy's `FULL_DUPLEX_STREAMED` body mode:
//!
//! - [`exchange`]: one ext_proc stream (one HTTP request) as a sync state machine;
//! - [`pick`]: routing a buffered request (the same scheduling as `serve`);
//! - [`metadata`], [`messages`]: the protocol's metadata keys and the answers' shapes;
//! - [`usage`]: `usage` read from the answer on its way back;
//! - [`service`]: the tonic servers (ext_proc, gRPC health) and the metrics port;
//! - [`limits`], [`incoming`]: what a data plane may hold (issue 26: streams, connections,
//!   timeouts, header and body bytes), and the gRPC ports' connections let in under them;
//! - [`state`], [`args`]: shared state, flags and `run`.
//!
//! P/D is done the llm-d way: the destination is the decode endpoint and
//! `x-prefiller-host-port` names the prefill endpoint, which llm-d's routing sidecar in front
//! of the decode pod reads.

pub mod args;
pub mod exchange;
pub mod incoming;
pub mod limits;
pub mod messages;
pub mod metadata;
pub mod pick;
pub mod service;
pub mod state;
pub mod usage;

pub use args::{run, EppArgs};
pub use limits::EppLimits;
pub use state::{Epp, EppOptions};
