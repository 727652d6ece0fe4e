//! vLLM KV events: the wire and the transport.
//!
//! - [`wire`]: ZMQ frames `[topic, seq, payload]` ↔ [`EventBatch`] (msgpack, both event
//!   encodings vLLM has used). Pure.
//! - [`seq`]: per-publisher sequence tracking (in order / gap / engine restart). Pure.
//! - [`subscriber`]: one tokio task per publisher (ZMQ SUB, replay over DEALER), feeding a
//!   [`KvEventSink`] through a bounded per-publisher queue.
//! - [`manager`]: [`SubscriptionManager`] keeps the running subscribers equal to a wanted
//!   list (discovery).
//! - [`publisher`]: [`Publisher`], vLLM's `ZmqEventPublisher` (PUB + replay ROUTER), for the
//!   simulator.
//! - [`metrics`]: [`KvEventMetrics`] counters shared by subscribers.
//!
//! Source of the wire contract: vLLM `vllm/distributed/kv_events.py` and the capture in
//! `shared/fixtures/vllm-0.32-cpu/kv-events.raw.jsonl`.

mod log_limit;
pub mod manager;
pub mod metrics;
pub mod publisher;
pub mod seq;
pub mod sink;
pub mod subscriber;
pub mod wire;

pub use manager::{Subscription, SubscriptionManager};
pub use metrics::{KvEventMetrics, KvEventMetricsSnapshot};
pub use pdgate_api::kv_events::{BlockRemoved, BlockStored, EngineHash, EventBatch, KvEvent};
pub use publisher::{Publisher, PublisherError};
pub use seq::{SeqTracker, SeqVerdict};
pub use sink::{ClearReason, KvEventSink};
pub use subscriber::{SubscriberConfig, SubscriberHandle};

pub use wire::{decode, encode, Encoding, WireError};
