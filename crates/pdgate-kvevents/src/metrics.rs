//! Counters of KV-event ingestion, shared by every subscriber of one process. Each field is
//! named as the Prometheus series the server exports (all are counters, `_total`).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

macro_rules! kv_event_metrics {
    ($($(#[$doc:meta])* $name:ident),* $(,)?) => {
        /// Atomic counters; bump with `fetch_add(1, Relaxed)`, read with [`Self::snapshot`].
        #[derive(Debug, Default)]
        #[allow(non_snake_case)]
        pub struct KvEventMetrics {
            $($(#[$doc])* pub $name: AtomicU64,)*
        }

        /// A point-in-time copy of [`KvEventMetrics`].
        #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
        pub struct KvEventMetricsSnapshot {
            $($(#[$doc])* pub $name: u64,)*
        }

        impl KvEventMetrics {
            /// Reads every counter (each atomically; not one consistent cut).
            pub fn snapshot(&self) -> KvEventMetricsSnapshot {
                KvEventMetricsSnapshot { $($name: self.$name.load(Relaxed),)* }
            }
        }

        impl KvEventMetricsSnapshot {
            /// `(series name, value)` pairs, in declaration order, for an exporter.
            pub fn series(&self) -> Vec<(&'static str, u64)> {
                vec![$((stringify!($name), self.$name),)*]
            }
        }
    };
}

kv_event_metrics! {
    /// ZMQ messages received on SUB sockets (decodable or not).
    pdgate_kv_events_received_total,
    /// Batches handed to the sink (`apply`), live or replayed.
    pdgate_kv_events_applied_total,
    /// Batches dropped because a publisher's queue was full (each is then handled as a gap).
    pdgate_kv_events_dropped_total,
    /// Messages that failed to decode (wrong frames, malformed msgpack); handled as a gap.
    pdgate_kv_events_decode_errors_total,
    /// Messages dropped undecoded because they were larger than the subscriber's cap
    /// ([`crate::subscriber::SubscriberConfig::max_message_bytes`], the sum of every frame's
    /// length in bytes): live messages from the SUB socket (then handled as a gap, or as a
    /// disconnect when a frame alone was over the cap) and replay replies of a missed seq (a
    /// gap's replay then fails; a history replay keeps only the run after the last over-size
    /// reply). A message dropped live and again in a replay counts twice.
    pdgate_kv_events_oversize_dropped_total,
    /// Seq gaps detected (missed messages).
    pdgate_kv_events_seq_gaps_total,
    /// Engine restarts detected (seq backwards or repeated).
    pdgate_kv_events_restarts_total,
    /// Replay requests sent to a replay socket.
    pdgate_kv_events_replays_requested_total,
    /// Replays that delivered every missing batch.
    pdgate_kv_events_replays_succeeded_total,
    /// Replays that failed, timed out or came back incomplete (the endpoint is then cleared).
    pdgate_kv_events_replays_failed_total,
    /// Histories replayed on subscribe (a stream's first batch had seq > 0 and the engine's
    /// buffer delivered a contiguous run up to it).
    pdgate_kv_events_history_replays_total,
    /// History replays on subscribe that failed (the index then starts from the live stream).
    pdgate_kv_events_history_replays_failed_total,
    /// Events of unknown type skipped.
    pdgate_kv_events_unknown_events_total,
    /// `clear` calls made on the sink (restart, gap, unsubscribed).
    pdgate_kv_events_clears_total,
}

impl KvEventMetrics {
    /// `counter += 1`.
    pub(crate) fn inc(counter: &AtomicU64) {
        counter.fetch_add(1, Relaxed);
    }

    /// `counter += n`.
    pub(crate) fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Relaxed);
    }
}
