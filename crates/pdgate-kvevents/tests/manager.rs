//! SubscriptionManager follows the wanted list: start, stop + clear(Unsubscribed), restart on
//! an address change; dropping it stops everything.

mod support;

use pdgate_kvevents::{
    ClearReason, Encoding, KvEventMetrics, Publisher, Subscription, SubscriptionManager,
};
use std::sync::Arc;
use std::time::Duration;
use support::{removed, Call, RecordingSink, BOUND};

async fn publisher() -> Publisher {
    Publisher::bind("tcp://127.0.0.1:0", None, Encoding::Tagged, 0, None)
        .await
        .unwrap()
}

fn sub(name: &str, p: &Publisher) -> Subscription {
    Subscription {
        endpoint: name.into(),
        publish: format!("tcp://127.0.0.1:{}", p.publish_port()),
        replay: None,
    }
}

/// Publishes `hash` until the sink has applied it for `endpoint`.
async fn reaches(p: &Publisher, sink: &RecordingSink, endpoint: &str, hash: u64) {
    tokio::time::timeout(BOUND, async {
        while !sink
            .calls
            .lock()
            .iter()
            .any(|c| matches!(c, Call::Apply(e, _, ev) if e == endpoint && *ev == removed(hash)))
        {
            p.publish(removed(hash));
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{endpoint} never received {hash}"));
}

#[tokio::test]
async fn sync_starts_stops_and_restarts_subscribers() {
    let (a, b, b2) = (publisher().await, publisher().await, publisher().await);
    let sink = Arc::new(RecordingSink::default());
    let manager = SubscriptionManager::new(sink.clone(), Arc::new(KvEventMetrics::default()));
    manager.sync(vec![sub("a", &a), sub("b", &b)]);
    assert_eq!(manager.endpoints(), vec!["a", "b"]);
    reaches(&a, &sink, "a", 1).await;
    reaches(&b, &sink, "b", 2).await;
    sink.take();

    // Unchanged entries are left alone; b moves to a new address; a leaves.
    manager.sync(vec![sub("b", &b2)]);
    assert_eq!(manager.endpoints(), vec!["b"]);
    let calls = sink.take();
    assert!(
        calls.contains(&Call::Clear("a".into(), ClearReason::Unsubscribed)),
        "{calls:?}"
    );
    assert!(
        calls.contains(&Call::Clear("b".into(), ClearReason::Unsubscribed)),
        "{calls:?}"
    );
    assert_eq!(calls.len(), 2, "{calls:?}");
    reaches(&b2, &sink, "b", 3).await;

    // The same list again: nothing restarts, nothing is cleared.
    sink.take();
    manager.sync(vec![sub("b", &b2)]);
    reaches(&b2, &sink, "b", 4).await;
    assert!(!sink.take().iter().any(|c| matches!(c, Call::Clear(..))));

    // Nothing from the stopped subscribers, even while their publishers keep going.
    for _ in 0..5 {
        a.publish(removed(9));
        b.publish(removed(9));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop(manager);
    for _ in 0..5 {
        b2.publish(removed(9));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let late: Vec<Call> = sink
        .take()
        .into_iter()
        .filter(|c| matches!(c, Call::Apply(_, _, ev) if *ev == removed(9)))
        .collect();
    assert!(late.is_empty(), "after unsubscribe/drop: {late:?}");
}
