//! Bounded state through the real router (issue 9, item 5): a rollout that replaces every
//! endpoint leaves the prefix index at the size of the fleet, a name that comes back gets no
//! credit, and an engine restarted in place loses its credit.

use crate::support;

use pdgate_scenario::fleet::{self, FleetSpec};
use pdgate_scheduler::DEFAULT_CONFIG_YAML;
use std::time::Duration;
use support::vllm::*;

const FLEET: usize = 50;

/// A 640-byte text prompt (10 blocks of 16 tokens at 4 bytes per token) unique to `i`.
fn prompt(i: usize) -> String {
    format!("conversation {i:03} says hello; ").repeat(30)[..640].to_string()
}

fn pin(name: &str) -> [(&'static str, &str); 1] {
    [("x-worker-instance-id", name)]
}

#[tokio::test]
async fn a_rollout_of_50_endpoints_leaves_the_prefix_index_at_the_50_endpoint_level() {
    let engine = VllmEngine::default().start().await;
    let ep = |name: &str| endpoint(name, &engine, "decode");
    let prefill = endpoint("prefill-0", &engine, "prefill");
    let mut names: Vec<String> = (0..FLEET).map(|i| format!("pod-{i}-a")).collect();
    let list = |names: &[String]| {
        let mut l: Vec<_> = names.iter().map(|n| ep(n)).collect();
        l.push(prefill.clone());
        l
    };
    let r = fleet::router_with(list(&names), DEFAULT_CONFIG_YAML, |o| {
        o.scrape_interval = Duration::from_millis(50)
    })
    .await
    .unwrap();
    let url = format!("http://{}", r.addr);
    for (i, n) in names.iter().enumerate() {
        assert_eq!(
            complete(&url, &prompt(i), &pin(n)).await,
            (200, "split".into())
        );
    }
    let before = r.state.scheduler.prefix_stats();
    // 50 decode endpoints and the prefill endpoint, 10 blocks per prompt on each side.
    assert_eq!(
        (before.endpoints, before.blocks, before.credits),
        (FLEET + 1, FLEET * 10, 2 * FLEET * 10)
    );

    for i in 0..FLEET {
        // The new pod joins and serves; then the old one leaves.
        let new = format!("pod-{i}-b");
        let mut both = names.clone();
        both.push(new.clone());
        r.state.registry.apply(list(&both));
        assert_eq!(
            complete(&url, &prompt(i), &pin(&new)).await,
            (200, "split".into())
        );
        names[i] = new;
        r.state.registry.apply(list(&names));
    }
    let after = r.state.scheduler.prefix_stats();
    println!("prefix index: 50 endpoints {before:?}; after replacing all 50 {after:?}");
    assert_eq!(
        (after.endpoints, after.blocks, after.credits),
        (before.endpoints, before.blocks, before.credits)
    );
    // Back to the 50-endpoint level within 1% (the estimate follows table capacities and
    // interned names' allocations, which may differ by a few bytes).
    assert!(
        after.bytes <= before.bytes + before.bytes / 100,
        "{after:?} vs {before:?}"
    );
    let breakers = r.state.breakers.snapshot();
    assert!(
        breakers
            .iter()
            .all(|(n, ..)| n == "prefill-0" || n.ends_with("-b")),
        "{breakers:?}"
    );

    // The cached prompt stays on its pod (aggregated); the same name, gone and back, has no
    // credit for it: split again.
    assert_eq!(
        complete(&url, &prompt(0), &pin("pod-0-b")).await,
        (200, "aggregated".into())
    );
    let without: Vec<String> = names[1..].to_vec();
    r.state.registry.apply(list(&without));
    r.state.registry.apply(list(&names));
    assert_eq!(
        complete(&url, &prompt(0), &pin("pod-0-b")).await,
        (200, "split".into())
    );
}

#[tokio::test]
async fn a_simulator_worker_restarted_in_place_gets_no_credit_for_its_old_blocks() {
    let spec = FleetSpec::new(1, 1, 50.0);
    let mut f = fleet::start(&spec, DEFAULT_CONFIG_YAML).await.unwrap();
    let text = prompt(7);
    assert_eq!(complete(&f.url(), &text, &[]).await, (200, "split".into()));
    assert_eq!(
        complete(&f.url(), &text, &[]).await,
        (200, "aggregated".into())
    );
    assert_eq!(f.workers[0].stats().prefill_legs, 1);

    // Restart decode-0 in place: same name, same port, a new engine with an empty cache.
    let old = f.workers.remove(1);
    let (addr, worker) = (old.addr(), old.spec().clone());
    old.shutdown().await;
    let l = tokio::net::TcpListener::bind(addr).await.unwrap();
    let new = pdgate_sim::spawn_worker(worker, spec.sim.clone(), l)
        .await
        .unwrap();
    f.workers.push(new);
    let metrics = f.router.state.metrics.clone();
    wait_for(
        Duration::from_secs(10),
        "the router to see the restart",
        || {
            let n = metrics.engine_restarts.get();
            async move { n >= 1 }
        },
    )
    .await;

    assert_eq!(complete(&f.url(), &text, &[]).await, (200, "split".into()));
    let (prefill, decode) = (f.workers[0].stats(), f.workers[1].stats());
    assert_eq!(prefill.prefill_legs, 2, "the prompt was prefilled again");
    assert_eq!((decode.completions, decode.remote_decode_legs), (1, 1));
    assert_eq!(metrics.engine_restarts.get(), 1);
}
