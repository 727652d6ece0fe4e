//! Benchmarks for pdgate (design.md §7): Mooncake trace loading, built-in workload
//! generators, a replay client for any OpenAI-compatible server, and its report.
//!
//! Flow: [`load_mooncake`] → [`mooncake_work`] (or [`chat_workload`]) gives [`WorkItem`]s;
//! [`replay()`] sends them on schedule and returns a [`Report`]; [`Report::render_table`] and
//! [`render_side_by_side`] print it. [`run`] does all of it for `pdgate bench` ([`BenchArgs`]).

#![warn(missing_docs)]

pub mod ceiling;
pub mod chat;
pub mod cli;
pub mod client;
pub mod engine_cache;
pub mod engine_metrics;
pub mod mooncake;
pub mod quality;
pub mod record;
pub mod render;
pub mod replay;
pub mod report;
mod rng;
pub use pdgate_api::sse;
pub mod stats;
pub mod targets;
pub mod trace;
mod words;
pub mod work;

pub use ceiling::{CacheShare, Ceiling};
pub use chat::{chat_workload, ChatWorkloadConfig};
pub use cli::{run, BenchArgs};
pub use engine_cache::{CacheCounters, CounterDelta, FleetReuse};
pub use mooncake::{mooncake_work, MOONCAKE_BLOCK_TOKENS};
pub use record::{RequestRecord, ServedBy};
pub use render::render_side_by_side;
pub use replay::{replay, ReplayConfig};
pub use report::Report;
pub use stats::Percentiles;
pub use targets::Targets;
pub use trace::{load_mooncake, TraceError, TraceRecord};
pub use work::{ChatMessage, WorkItem, WorkPrompt};
