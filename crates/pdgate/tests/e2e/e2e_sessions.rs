//! Stateful session affinity (`x-session-id`, issue 5 item 4): turns of one session stay on
//! one endpoint per phase; when that endpoint leaves they move once and stay.

use crate::support;

use pdgate_scenario::fleet::{self, FleetSpec};
use pdgate_scheduler::DEFAULT_CONFIG_YAML;
use support::endpoints;

/// Prefill and decode endpoints of one 64-token turn (unrelated prompts: only the session
/// keeps turns together, not their prefixes).
async fn turn(url: &str, session: Option<&str>, first: u32) -> (String, String) {
    let headers: Vec<_> = session.map(|s| ("x-session-id", s)).into_iter().collect();
    let r = support::send(url, &headers, &support::body(first, 64, 2)).await;
    assert_eq!(r.status, 200);
    (
        r.headers["x-pdgate-prefill-endpoint"]
            .to_str()
            .unwrap()
            .to_string(),
        r.headers["x-pdgate-decode-endpoint"]
            .to_str()
            .unwrap()
            .to_string(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_turns_stay_then_move_once_when_the_endpoint_leaves() {
    let f = fleet::start(&FleetSpec::new(2, 3, 50.0), DEFAULT_CONFIG_YAML)
        .await
        .unwrap();
    let first = turn(&f.url(), Some("chat-42"), 0).await;
    for i in 1..20 {
        assert_eq!(
            turn(&f.url(), Some("chat-42"), i * 1000).await,
            first,
            "turn {i}"
        );
    }
    // Another session (and no session) are free to go elsewhere: over 12 requests without a
    // session, more than one decode endpoint is used.
    let mut free = std::collections::BTreeSet::new();
    for i in 0..12 {
        free.insert(turn(&f.url(), None, 500_000 + i * 1000).await.1);
    }
    assert!(free.len() > 1, "{free:?}");
    // The session's decode endpoint leaves the fleet.
    let keep = endpoints(f.workers.iter().filter(|w| w.name() != first.1));
    f.router.state.registry.apply(keep);
    let moved = turn(&f.url(), Some("chat-42"), 900_000).await;
    assert_eq!(moved.0, first.0, "prefill binding untouched");
    assert_ne!(moved.1, first.1, "decode moved off the removed endpoint");
    for i in 1..10 {
        assert_eq!(
            turn(&f.url(), Some("chat-42"), 900_000 + i * 1000).await,
            moved
        );
    }
    assert_eq!(f.in_flight(), 0);
}
