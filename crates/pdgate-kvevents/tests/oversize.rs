//! The message size cap over real ZMQ on 127.0.0.1: a message over
//! `SubscriberConfig::max_message_bytes` (all frames counted) is dropped undecoded and
//! counted, live or replayed, and the stream goes on; a frame alone over the cap also makes
//! the subscriber reconnect.

mod support;

use bytes::Bytes;
use pdgate_kvevents::subscriber::{spawn, SubscriberConfig, DEFAULT_MAX_MESSAGE_BYTES};
use pdgate_kvevents::wire::{encode, Encoding};
use pdgate_kvevents::{
    BlockRemoved, ClearReason, EventBatch, KvEvent, KvEventMetrics, KvEventMetricsSnapshot,
};
use std::sync::Arc;
use std::time::Duration;
use support::{batch, removed, Call, FakeEngine, RecordingSink};
use zeromq::{SocketSend, ZmqMessage};

fn subscribe(
    engine: &FakeEngine,
    replay: bool,
    max_message_bytes: usize,
    sink: &Arc<RecordingSink>,
) -> (pdgate_kvevents::SubscriberHandle, Arc<KvEventMetrics>) {
    let metrics = Arc::new(KvEventMetrics::default());
    let mut config = SubscriberConfig::new(
        "ep-a",
        engine.publish_addr(),
        replay.then(|| engine.replay_addr()),
    );
    config.replay_timeout = Duration::from_secs(5);
    config.max_message_bytes = max_message_bytes;
    config.reconnect_interval = Duration::from_millis(50);
    (spawn(config, sink.clone(), metrics.clone()), metrics)
}

/// A batch of one `BlockRemoved` whose payload (tagged msgpack) is as large as it can be
/// without exceeding `max_payload` bytes: every hash is ≥ 2^32, so 9 bytes on the wire.
fn big_batch(seq: u64, max_payload: usize) -> EventBatch {
    let with = |n: usize| {
        batch(
            seq,
            vec![KvEvent::BlockRemoved(BlockRemoved {
                block_hashes: (0..n as u64).map(|h| (1 << 40) + h).collect(),
                medium: Some("GPU".into()),
                group_idx: Some(0),
            })],
        )
    };
    let overhead = encode(&with(0), Encoding::Tagged, b"")[2].len();
    let fitted = with((max_payload - overhead - 8) / 9);
    assert!(encode(&fitted, Encoding::Tagged, b"")[2].len() <= max_payload);
    fitted
}

/// Sends `b` with its topic frame padded so the whole message (topic + seq + payload) is
/// exactly `total` bytes; returns the payload's length.
async fn send_sized(engine: &mut FakeEngine, b: &EventBatch, total: usize) -> usize {
    let [_, seq, payload] = encode(b, Encoding::Tagged, b"");
    let topic = vec![b'k'; total - seq.len() - payload.len()];
    let len = payload.len();
    let frames = vec![Bytes::from(topic), Bytes::from(seq), Bytes::from(payload)];
    let m = ZmqMessage::try_from(frames).unwrap();
    engine.pub_socket.send(m).await.unwrap();
    len
}

/// `(seq, event count)` of each call, `None` for a clear of a gap (anything else panics).
fn shape(calls: &[Call]) -> Vec<Option<(u64, usize)>> {
    calls
        .iter()
        .map(|c| match c {
            Call::Apply(ep, seq, events) if ep == "ep-a" => Some((*seq, events.len())),
            Call::Clear(ep, ClearReason::Gap) if ep == "ep-a" => None,
            other => panic!("unexpected call {other:?}"),
        })
        .collect()
}

/// Sends seqs from `from` (each also buffered for replay) until the sink applied one, then
/// waits for the last one sent; returns the sink's calls.
async fn send_until_applied(engine: &mut FakeEngine, sink: &RecordingSink, from: u64) -> Vec<Call> {
    let mut seq = from;
    tokio::time::timeout(support::BOUND, async {
        while !sink
            .calls
            .lock()
            .iter()
            .any(|c| matches!(c, Call::Apply(..)))
        {
            engine.send(&batch(seq, removed(seq))).await;
            seq += 1;
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the subscriber receives");
    let last = seq - 1;
    sink.wait_for("the last batch sent", |c| {
        c.iter()
            .any(|c| matches!(c, Call::Apply(_, s, _) if *s == last))
    })
    .await;
    sink.take()
}

/// Counter increments between two snapshots, by series name (zero ones left out).
fn delta(
    before: &KvEventMetricsSnapshot,
    after: &KvEventMetricsSnapshot,
) -> Vec<(&'static str, u64)> {
    let b = before.series();
    after
        .series()
        .into_iter()
        .zip(b)
        .map(|((name, a), (_, b))| (name, a - b))
        .filter(|(_, d)| *d > 0)
        .collect()
}

#[tokio::test]
async fn a_live_message_over_the_cap_is_dropped_undecoded_and_the_next_one_applied() {
    let cap = DEFAULT_MAX_MESSAGE_BYTES;
    let mut engine = FakeEngine::start().await;
    let sink = Arc::new(RecordingSink::default());
    let (_sub, metrics) = subscribe(&engine, false, cap, &sink);
    let next = engine.warm_up(&sink, 0).await;
    let before = metrics.snapshot();
    // Exactly at the cap: kept. One byte over: dropped. Then a normal message.
    let at_cap = big_batch(next, cap - 8);
    let payload = send_sized(&mut engine, &at_cap, cap).await;
    assert!(
        payload > cap - 64,
        "the payload carries the size ({payload})"
    );
    let over = big_batch(next + 1, cap - 8);
    send_sized(&mut engine, &over, cap + 1).await;
    engine.send(&batch(next + 2, removed(3))).await;
    sink.wait_for("the normal message after the over-size one", |c| {
        c.iter()
            .any(|c| matches!(c, Call::Apply(_, s, _) if *s == next + 2))
    })
    .await;
    // Nothing else still on its way.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let calls = sink.take();
    assert_eq!(
        shape(&calls),
        vec![Some((next, 1)), None, Some((next + 2, 1))],
        "at-cap applied, over-cap never applied (a gap, cleared: no replay socket), normal applied"
    );
    // (Not assert_eq: a mismatch would print 16 MiB.)
    assert!(
        calls[0] == Call::Apply("ep-a".into(), next, at_cap.events.clone()),
        "the at-cap batch is applied whole"
    );
    assert_eq!(calls[2], Call::Apply("ep-a".into(), next + 2, removed(3)));
    assert_eq!(
        delta(&before, &metrics.snapshot()),
        vec![
            ("pdgate_kv_events_received_total", 3),
            ("pdgate_kv_events_applied_total", 2),
            ("pdgate_kv_events_oversize_dropped_total", 1),
            ("pdgate_kv_events_seq_gaps_total", 1),
            ("pdgate_kv_events_clears_total", 1),
        ]
    );
}

#[tokio::test]
async fn a_replayed_message_over_the_cap_fails_the_gaps_replay() {
    let cap = 4096;
    let mut engine = FakeEngine::start().await;
    let sink = Arc::new(RecordingSink::default());
    let (_sub, metrics) = subscribe(&engine, true, cap, &sink);
    let next = engine.warm_up(&sink, 0).await;
    let before = metrics.snapshot();
    // Missed live; only the replay socket holds it, and it is over the cap (about 2×).
    engine.buffer_only(&big_batch(next, 2 * cap));
    engine.send(&batch(next + 1, removed(1))).await;
    sink.wait_for("the live batch after the gap", |c| {
        c.iter().any(|c| matches!(c, Call::Apply(..)))
    })
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        sink.take(),
        vec![
            Call::Clear("ep-a".into(), ClearReason::Gap),
            Call::Apply("ep-a".into(), next + 1, removed(1)),
        ]
    );
    assert_eq!(
        delta(&before, &metrics.snapshot()),
        vec![
            ("pdgate_kv_events_received_total", 1),
            ("pdgate_kv_events_applied_total", 1),
            ("pdgate_kv_events_oversize_dropped_total", 1),
            ("pdgate_kv_events_seq_gaps_total", 1),
            ("pdgate_kv_events_replays_requested_total", 1),
            ("pdgate_kv_events_replays_failed_total", 1),
            ("pdgate_kv_events_clears_total", 1),
        ]
    );
}

#[tokio::test]
async fn a_history_replay_starts_after_a_message_over_the_cap() {
    let cap = 4096;
    let mut engine = FakeEngine::start().await;
    // The engine ran before pdgate subscribed: 0 and 2 are normal, 1 is over the cap (~2×).
    engine.buffer_only(&batch(0, removed(100)));
    engine.buffer_only(&big_batch(1, 2 * cap));
    engine.buffer_only(&batch(2, removed(102)));
    let sink = Arc::new(RecordingSink::default());
    let (_sub, metrics) = subscribe(&engine, true, cap, &sink);
    let calls = send_until_applied(&mut engine, &sink, 3).await;
    assert_eq!(calls[0], Call::Apply("ep-a".into(), 2, removed(102)));
    let seqs: Vec<u64> = shape(&calls).into_iter().map(|c| c.unwrap().0).collect();
    assert_eq!(seqs, (2..2 + seqs.len() as u64).collect::<Vec<_>>());
    let m = metrics.snapshot();
    assert_eq!(m.pdgate_kv_events_oversize_dropped_total, 1);
    assert_eq!(m.pdgate_kv_events_history_replays_total, 1);
    assert_eq!(m.pdgate_kv_events_history_replays_failed_total, 0);
    assert_eq!(m.pdgate_kv_events_clears_total, 0);
}

#[tokio::test]
async fn a_frame_over_the_cap_also_reconnects_and_the_stream_resumes_right_after_it() {
    let cap = 4096;
    let mut engine = FakeEngine::start().await;
    let sink = Arc::new(RecordingSink::default());
    let (_sub, metrics) = subscribe(&engine, true, cap, &sink);
    let next = engine.warm_up(&sink, 0).await;
    let before = metrics.snapshot();
    // The payload frame alone is over the cap (about 2×); the engine's replay buffer has it
    // too.
    engine.send(&big_batch(next, 2 * cap)).await;
    sink.wait_for("the reconnect's clear", |c| !c.is_empty())
        .await;
    // Back on a new connection: its history replay drops the over-size message again and
    // applies everything after it.
    let mut calls = send_until_applied(&mut engine, &sink, next + 1).await;
    assert_eq!(
        calls.remove(0),
        Call::Clear("ep-a".into(), ClearReason::Disconnected)
    );
    let seqs: Vec<u64> = shape(&calls).into_iter().map(|c| c.unwrap().0).collect();
    assert_eq!(
        seqs,
        (next + 1..next + 1 + seqs.len() as u64).collect::<Vec<_>>(),
        "every seq after the over-size one, once, in order"
    );
    let m = metrics.snapshot();
    let counts = |s: &KvEventMetricsSnapshot| {
        [
            s.pdgate_kv_events_oversize_dropped_total,
            s.pdgate_kv_events_decode_errors_total,
            s.pdgate_kv_events_clears_total,
            s.pdgate_kv_events_seq_gaps_total,
            s.pdgate_kv_events_restarts_total,
            s.pdgate_kv_events_history_replays_total,
            s.pdgate_kv_events_history_replays_failed_total,
        ]
    };
    let (after, before_counts) = (counts(&m), counts(&before));
    let d: Vec<u64> = after
        .iter()
        .zip(before_counts)
        .map(|(a, b)| a - b)
        .collect();
    // Dropped live and again in the history replay; one clear (the reconnect); one replay.
    assert_eq!(d, vec![2, 0, 1, 0, 0, 1, 0]);
    assert_eq!(
        m.pdgate_kv_events_applied_total - before.pdgate_kv_events_applied_total,
        seqs.len() as u64
    );
}
