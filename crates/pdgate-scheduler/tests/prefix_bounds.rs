//! The prefix index stays bounded by the fleet: a rollout that replaces every endpoint leaves
//! it at the size of the fleet, and a name that comes back starts with no credit.

use pdgate_scheduler::prefix::{BlockHasher, PrefixIndex, PrefixStats};
use pdgate_scheduler::{Endpoint, EndpointLoad, EndpointState};
use std::collections::BTreeMap;
use std::sync::Arc;

const FLEET: usize = 50;
const BLOCKS: u64 = 200;

fn index() -> PrefixIndex {
    let hasher = BlockHasher {
        block_tokens: 16,
        max_blocks: 256,
    };
    PrefixIndex::new(0, hasher, 1_000)
}

/// An endpoint named `name` with a fresh load cell (one lifecycle of that name).
fn pod(name: &str) -> EndpointState {
    EndpointState {
        endpoint: Endpoint::new(name, format!("{name}:8000"), BTreeMap::new()),
        load: Arc::new(EndpointLoad::default()),
    }
}

/// Block hashes of endpoint `i`'s conversation: one shared system-prompt block, then its own.
fn blocks(i: usize) -> Vec<u64> {
    std::iter::once(1)
        .chain((0..BLOCKS).map(|b| 1_000_000 * (i as u64 + 1) + b))
        .collect()
}

#[test]
fn a_rollout_of_50_endpoints_leaves_the_index_at_the_50_endpoint_level() {
    let ix = index();
    let old: Vec<EndpointState> = (0..FLEET).map(|i| pod(&format!("pod-{i}-a"))).collect();
    let new: Vec<EndpointState> = (0..FLEET).map(|i| pod(&format!("pod-{i}-b"))).collect();
    for (i, p) in old.iter().enumerate() {
        ix.record(p, &blocks(i));
    }
    let before = ix.stats();
    assert_eq!(
        (before.endpoints, before.blocks, before.credits),
        (
            FLEET,
            1 + FLEET * BLOCKS as usize,
            FLEET * (BLOCKS as usize + 1)
        )
    );
    let mut peak = PrefixStats::default();
    for (i, pod) in new.iter().enumerate() {
        // The new pod serves first, then the old one leaves discovery.
        ix.record(pod, &blocks(i));
        peak.endpoints = peak.endpoints.max(ix.stats().endpoints);
        let gone = format!("pod-{i}-a");
        assert_eq!(ix.retain(|n| n != gone), 1);
    }
    let after = ix.stats();
    println!(
        "50-endpoint rollout: before {before:?}, peak endpoints {}, after {after:?}",
        peak.endpoints
    );
    assert_eq!(peak.endpoints, FLEET + 1);
    assert_eq!(
        (after.endpoints, after.blocks, after.credits),
        (before.endpoints, before.blocks, before.credits)
    );
    // Back to the 50-endpoint level within 1% (the estimate follows table and free-list
    // capacities, which may keep a few bytes after the peak).
    assert!(
        after.bytes <= before.bytes + before.bytes / 100,
        "{after:?} vs {before:?}"
    );
    assert_eq!(ix.match_length(&blocks(7), &old[7]), 0);
    assert_eq!(ix.match_length(&blocks(7), &new[7]), BLOCKS as usize + 1);

    // A pod that restarts under the same name (forgotten, then seen again) has no credit.
    assert!(ix.forget("pod-7-b"));
    assert_eq!(ix.match_length(&blocks(7), &new[7]), 0);
    ix.record(&new[7], &blocks(7)[..1]);
    assert_eq!(ix.match_length(&blocks(7), &new[7]), 1);
    // Replaced under the same name (a new load cell): no credit from the old lifecycle.
    let again = pod("pod-7-b");
    assert_eq!(ix.match_length(&blocks(7), &again), 0);
}
