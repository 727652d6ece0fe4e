//! Subscriber over real ZMQ on 127.0.0.1: seq rules (restart, gap with and without replay),
//! events passed through untouched, disconnects, and a slow sink dropping only its own
//! publisher's batches.

mod support;

use pdgate_kvevents::subscriber::{spawn, SubscriberConfig};
use pdgate_kvevents::{BlockStored, ClearReason, Encoding, KvEvent, KvEventMetrics, Publisher};
use std::sync::Arc;
use std::time::Duration;
use support::{batch, removed, Call, FakeEngine, RecordingSink};

fn subscribe(
    engine: &FakeEngine,
    replay: bool,
    sink: &Arc<RecordingSink>,
) -> (pdgate_kvevents::SubscriberHandle, Arc<KvEventMetrics>) {
    let metrics = Arc::new(KvEventMetrics::default());
    let mut config = SubscriberConfig::new(
        "ep-a",
        engine.publish_addr(),
        replay.then(|| engine.replay_addr()),
    );
    config.replay_timeout = Duration::from_secs(5);
    (spawn(config, sink.clone(), metrics.clone()), metrics)
}

fn applies(n: usize) -> impl Fn(&[Call]) -> bool {
    move |c| c.iter().filter(|c| matches!(c, Call::Apply(..))).count() >= n
}

#[tokio::test]
async fn a_backwards_seq_clears_then_applies() {
    let mut engine = FakeEngine::start().await;
    let sink = Arc::new(RecordingSink::default());
    let (_sub, metrics) = subscribe(&engine, false, &sink);
    engine.warm_up(&sink, 100).await;
    engine.send(&batch(0, removed(7))).await;
    sink.wait_for("the restarted stream's batch", applies(1))
        .await;
    assert_eq!(
        sink.take(),
        vec![
            Call::Clear("ep-a".into(), ClearReason::Restart),
            Call::Apply("ep-a".into(), 0, removed(7)),
        ]
    );
    let m = metrics.snapshot();
    assert_eq!(m.pdgate_kv_events_restarts_total, 1);
    assert_eq!(m.pdgate_kv_events_seq_gaps_total, 0);
}

#[tokio::test]
async fn a_repeated_seq_is_a_restart() {
    let mut engine = FakeEngine::start().await;
    let sink = Arc::new(RecordingSink::default());
    let (_sub, metrics) = subscribe(&engine, false, &sink);
    let next = engine.warm_up(&sink, 0).await;
    engine.send(&batch(next - 1, removed(9))).await;
    sink.wait_for("the repeated batch", applies(1)).await;
    assert_eq!(
        sink.take(),
        vec![
            Call::Clear("ep-a".into(), ClearReason::Restart),
            Call::Apply("ep-a".into(), next - 1, removed(9)),
        ]
    );
    assert_eq!(metrics.snapshot().pdgate_kv_events_restarts_total, 1);
}

#[tokio::test]
async fn a_gap_without_replay_clears() {
    let mut engine = FakeEngine::start().await;
    let sink = Arc::new(RecordingSink::default());
    let (_sub, metrics) = subscribe(&engine, false, &sink);
    let next = engine.warm_up(&sink, 0).await;
    engine.send(&batch(next + 2, removed(1))).await;
    sink.wait_for("the batch after the gap", applies(1)).await;
    assert_eq!(
        sink.take(),
        vec![
            Call::Clear("ep-a".into(), ClearReason::Gap),
            Call::Apply("ep-a".into(), next + 2, removed(1)),
        ]
    );
    let m = metrics.snapshot();
    assert_eq!(m.pdgate_kv_events_seq_gaps_total, 1);
    assert_eq!(m.pdgate_kv_events_replays_requested_total, 0);
    assert_eq!(m.pdgate_kv_events_clears_total, 1);
}

#[tokio::test]
async fn a_gap_with_replay_delivers_the_missed_batches_in_order_without_clearing() {
    let mut engine = FakeEngine::start().await;
    let sink = Arc::new(RecordingSink::default());
    let (_sub, metrics) = subscribe(&engine, true, &sink);
    let next = engine.warm_up(&sink, 0).await;
    engine.buffer_only(&batch(next, removed(10)));
    engine.buffer_only(&batch(next + 1, removed(11)));
    engine.send(&batch(next + 2, removed(12))).await;
    sink.wait_for("the replayed and the live batch", applies(3))
        .await;
    assert_eq!(
        sink.take(),
        vec![
            Call::Apply("ep-a".into(), next, removed(10)),
            Call::Apply("ep-a".into(), next + 1, removed(11)),
            Call::Apply("ep-a".into(), next + 2, removed(12)),
        ]
    );
    let m = metrics.snapshot();
    assert_eq!(m.pdgate_kv_events_seq_gaps_total, 1);
    assert_eq!(m.pdgate_kv_events_replays_requested_total, 1);
    assert_eq!(m.pdgate_kv_events_replays_succeeded_total, 1);
    assert_eq!(m.pdgate_kv_events_clears_total, 0);
}

#[tokio::test]
async fn a_replay_missing_a_batch_clears() {
    let mut engine = FakeEngine::start().await;
    let sink = Arc::new(RecordingSink::default());
    let (_sub, metrics) = subscribe(&engine, true, &sink);
    let next = engine.warm_up(&sink, 0).await;
    // `next` is gone from the engine's buffer; only `next + 1` can be replayed.
    engine.buffer_only(&batch(next + 1, removed(11)));
    engine.send(&batch(next + 2, removed(12))).await;
    sink.wait_for("the live batch", applies(1)).await;
    assert_eq!(
        sink.take(),
        vec![
            Call::Clear("ep-a".into(), ClearReason::Gap),
            Call::Apply("ep-a".into(), next + 2, removed(12)),
        ]
    );
    let m = metrics.snapshot();
    assert_eq!(m.pdgate_kv_events_replays_failed_total, 1);
    assert_eq!(m.pdgate_kv_events_replays_succeeded_total, 0);
}

/// Sends seqs from `from` (each also buffered for replay) until the sink applied one;
/// returns the sink's calls up to the last seq sent.
async fn send_until_applied(engine: &mut FakeEngine, sink: &RecordingSink, from: u64) -> Vec<Call> {
    let mut seq = from;
    tokio::time::timeout(support::BOUND, async {
        loop {
            engine.send(&batch(seq, removed(seq))).await;
            seq += 1;
            tokio::time::sleep(Duration::from_millis(20)).await;
            if applies(1)(&sink.calls.lock()) {
                break;
            }
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

fn seqs(calls: &[Call]) -> Vec<u64> {
    calls
        .iter()
        .map(|c| match c {
            Call::Apply(_, seq, _) => *seq,
            other => panic!("only applies expected, got {other:?}"),
        })
        .collect()
}

#[tokio::test]
async fn a_first_batch_past_zero_replays_the_engines_history_first() {
    let mut engine = FakeEngine::start().await;
    // The engine ran before pdgate subscribed: seqs 0..3 are only in its replay buffer.
    for seq in 0..3 {
        engine.buffer_only(&batch(seq, removed(100 + seq)));
    }
    let sink = Arc::new(RecordingSink::default());
    let (_sub, metrics) = subscribe(&engine, true, &sink);
    let calls = send_until_applied(&mut engine, &sink, 3).await;
    assert_eq!(
        &calls[..3],
        &[
            Call::Apply("ep-a".into(), 0, removed(100)),
            Call::Apply("ep-a".into(), 1, removed(101)),
            Call::Apply("ep-a".into(), 2, removed(102)),
        ]
    );
    let got = seqs(&calls);
    assert_eq!(
        got,
        (0..got.len() as u64).collect::<Vec<_>>(),
        "every seq once, in order"
    );
    let m = metrics.snapshot();
    assert_eq!(m.pdgate_kv_events_history_replays_total, 1);
    assert_eq!(m.pdgate_kv_events_history_replays_failed_total, 0);
    assert_eq!(m.pdgate_kv_events_seq_gaps_total, 0);
    assert_eq!(m.pdgate_kv_events_clears_total, 0);
}

#[tokio::test]
async fn a_history_replay_starts_where_the_engines_buffer_starts() {
    let mut engine = FakeEngine::start().await;
    // Seq 0 and 1 already left the engine's buffer; 2..5 are there.
    for seq in 2..5 {
        engine.buffer_only(&batch(seq, removed(100 + seq)));
    }
    let sink = Arc::new(RecordingSink::default());
    let (_sub, metrics) = subscribe(&engine, true, &sink);
    let calls = send_until_applied(&mut engine, &sink, 5).await;
    let got = seqs(&calls);
    assert_eq!(got, (2..2 + got.len() as u64).collect::<Vec<_>>());
    assert_eq!(calls[0], Call::Apply("ep-a".into(), 2, removed(102)));
    assert_eq!(metrics.snapshot().pdgate_kv_events_history_replays_total, 1);
}

#[tokio::test]
async fn without_a_replay_socket_a_late_subscriber_starts_from_the_live_stream() {
    let mut engine = FakeEngine::start().await;
    for seq in 0..3 {
        engine.buffer_only(&batch(seq, removed(100 + seq)));
    }
    let sink = Arc::new(RecordingSink::default());
    let (_sub, metrics) = subscribe(&engine, false, &sink);
    let calls = send_until_applied(&mut engine, &sink, 3).await;
    let got = seqs(&calls);
    assert!(got[0] >= 3, "{got:?}");
    let m = metrics.snapshot();
    assert_eq!(
        (
            m.pdgate_kv_events_history_replays_total,
            m.pdgate_kv_events_clears_total
        ),
        (0, 0)
    );
}

#[tokio::test]
async fn events_pass_through_untouched_cleared_duplicates_and_hybrid_groups() {
    let mut engine = FakeEngine::start().await;
    let sink = Arc::new(RecordingSink::default());
    let (_sub, _metrics) = subscribe(&engine, false, &sink);
    let next = engine.warm_up(&sink, 0).await;
    let stored = BlockStored {
        block_hashes: vec![1, 2],
        parent_block_hash: None,
        token_ids: (0..64).collect(),
        block_size: 32,
        medium: Some("GPU".into()),
        group_idx: Some(0),
        kv_cache_spec_kind: Some("full_attention".into()),
        ..Default::default()
    };
    let sliding = BlockStored {
        group_idx: Some(1),
        kv_cache_spec_kind: Some("sliding_window".into()),
        ..stored.clone()
    };
    let events = vec![
        KvEvent::BlockStored(stored.clone()),
        KvEvent::BlockStored(stored.clone()),
        KvEvent::BlockStored(sliding),
        KvEvent::AllBlocksCleared,
    ];
    engine.send(&batch(next, events.clone())).await;
    sink.wait_for("the batch", applies(1)).await;
    assert_eq!(sink.take(), vec![Call::Apply("ep-a".into(), next, events)]);
}

#[tokio::test]
async fn a_publisher_going_away_clears_and_a_new_one_is_followed() {
    let publisher = Publisher::bind("tcp://127.0.0.1:0", None, Encoding::Tagged, 0, None)
        .await
        .unwrap();
    let port = publisher.publish_port();
    let sink = Arc::new(RecordingSink::default());
    let metrics = Arc::new(KvEventMetrics::default());
    let mut config = SubscriberConfig::new("ep-a", format!("tcp://127.0.0.1:{port}"), None);
    config.reconnect_interval = Duration::from_millis(50);
    let _sub = spawn(config, sink.clone(), metrics.clone());
    tokio::time::timeout(support::BOUND, async {
        while !sink
            .calls
            .lock()
            .iter()
            .any(|c| matches!(c, Call::Apply(..)))
        {
            publisher.publish(removed(1));
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("first publisher reaches the sink");
    drop(publisher);
    sink.wait_for("a clear on disconnect", |c| {
        c.contains(&Call::Clear("ep-a".into(), ClearReason::Disconnected))
    })
    .await;
    sink.take();
    // The engine comes back on the same port, numbering from 0 again.
    let again = Publisher::bind(
        &format!("tcp://127.0.0.1:{port}"),
        None,
        Encoding::Tagged,
        0,
        None,
    )
    .await
    .expect("rebind the same port");
    tokio::time::timeout(support::BOUND, async {
        while !sink
            .calls
            .lock()
            .iter()
            .any(|c| matches!(c, Call::Apply(..)))
        {
            again.publish(removed(2));
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the new publisher reaches the sink");
    let calls = sink.take();
    let Call::Apply(_, seq, events) = &calls[0] else {
        panic!("expected an apply first, got {calls:?}");
    };
    assert_eq!(events, &removed(2));
    assert!(*seq < 500, "a new stream from 0, got seq {seq}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_slow_sink_drops_only_its_own_publishers_batches() {
    let fast_pub = Publisher::bind("tcp://127.0.0.1:0", None, Encoding::Tagged, 0, None)
        .await
        .unwrap();
    let slow_pub = Publisher::bind("tcp://127.0.0.1:0", None, Encoding::Tagged, 0, None)
        .await
        .unwrap();
    let fast_sink = Arc::new(RecordingSink::default());
    let slow_sink = Arc::new(RecordingSink {
        slow: Some(Duration::from_millis(30)),
        ..Default::default()
    });
    let (fast_m, slow_m) = (
        Arc::new(KvEventMetrics::default()),
        Arc::new(KvEventMetrics::default()),
    );
    let mut fast_cfg = SubscriberConfig::new(
        "fast",
        format!("tcp://127.0.0.1:{}", fast_pub.publish_port()),
        None,
    );
    let mut slow_cfg = SubscriberConfig::new(
        "slow",
        format!("tcp://127.0.0.1:{}", slow_pub.publish_port()),
        None,
    );
    fast_cfg.queue_capacity = 8;
    slow_cfg.queue_capacity = 8;
    let _fast = spawn(fast_cfg, fast_sink.clone(), fast_m.clone());
    let _slow = spawn(slow_cfg, slow_sink.clone(), slow_m.clone());
    // Warm up both until each has applied something, then forget the warm-up.
    tokio::time::timeout(support::BOUND, async {
        loop {
            let f = fast_sink
                .calls
                .lock()
                .iter()
                .any(|c| matches!(c, Call::Apply(..)));
            let s = slow_sink
                .calls
                .lock()
                .iter()
                .any(|c| matches!(c, Call::Apply(..)));
            if f && s {
                break;
            }
            fast_pub.publish(removed(0));
            slow_pub.publish(removed(0));
            tokio::time::sleep(Duration::from_millis(40)).await;
        }
    })
    .await
    .expect("both subscribed");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let fast_before = fast_m.snapshot();
    fast_sink.take();
    // 60 batches 3 ms apart: the fast sink keeps up, the slow one (30 ms a batch) cannot.
    for i in 1..=60 {
        fast_pub.publish(removed(i));
        slow_pub.publish(removed(i));
        tokio::time::sleep(Duration::from_millis(3)).await;
    }
    fast_sink
        .wait_for("all 60 fast batches", |c| {
            c.iter().filter(|c| matches!(c, Call::Apply(..))).count() >= 60
        })
        .await;
    slow_sink
        .wait_for("a clear of the slow endpoint", |c| {
            c.contains(&Call::Clear("slow".into(), ClearReason::Gap))
        })
        .await;
    let fast_calls = fast_sink.take();
    let hashes: Vec<Vec<KvEvent>> = fast_calls
        .iter()
        .map(|c| match c {
            Call::Apply(_, _, e) => e.clone(),
            other => panic!("fast sink got {other:?}"),
        })
        .collect();
    assert_eq!(hashes, (1..=60).map(removed).collect::<Vec<_>>());
    let fast = fast_m.snapshot();
    assert_eq!(
        fast.pdgate_kv_events_dropped_total,
        fast_before.pdgate_kv_events_dropped_total
    );
    assert_eq!(fast.pdgate_kv_events_clears_total, 0);
    let slow = slow_m.snapshot();
    assert!(slow.pdgate_kv_events_dropped_total > 0, "slow: {slow:?}");
    assert!(slow.pdgate_kv_events_seq_gaps_total > 0, "slow: {slow:?}");
}
