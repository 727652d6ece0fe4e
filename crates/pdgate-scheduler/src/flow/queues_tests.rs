use super::*;
use crate::flow::policy::{Fairness, Ordering};
use crate::flow::settings::FlowControlConfig;

fn item(id: u64, priority: i32, flow: &str, at: u64) -> Item {
    Item {
        id,
        priority,
        flow: flow.into(),
        bytes: 100,
        enqueued_ms: at,
        slo_ttft_ms: None,
    }
}

fn cfg(fairness: Fairness, ordering: Ordering) -> FlowControlConfig {
    let mut c = FlowControlConfig::default();
    for b in c
        .bands
        .iter_mut()
        .chain([&mut c.default_band, &mut c.negative_band])
    {
        b.fairness = fairness;
        b.ordering = ordering;
    }
    c
}

fn ids(q: &mut Queues) -> Vec<u64> {
    std::iter::from_fn(|| q.pop_next(1000).map(|i| i.id)).collect()
}

#[test]
fn strict_priority_then_fcfs_across_flows() {
    let mut q = Queues::new(&cfg(Fairness::GlobalStrict, Ordering::Fcfs), [10, -5]);
    q.enqueue(item(1, 0, "a", 1)).unwrap();
    q.enqueue(item(2, -5, "a", 2)).unwrap();
    q.enqueue(item(3, 0, "b", 3)).unwrap();
    q.enqueue(item(4, 10, "b", 4)).unwrap();
    q.enqueue(item(5, 0, "a", 5)).unwrap();
    assert_eq!((q.len(), q.bytes()), (5, 500));
    assert_eq!(ids(&mut q), vec![4, 1, 3, 5, 2]);
    assert!(q.is_empty() && q.bytes() == 0);
}

#[test]
fn round_robin_alternates_flows() {
    let mut q = Queues::new(&cfg(Fairness::RoundRobin, Ordering::Fcfs), []);
    for (id, f) in [(1, "a"), (2, "a"), (3, "a"), (4, "b"), (5, "c"), (6, "b")] {
        q.enqueue(item(id, 0, f, id)).unwrap();
    }
    // a, b, c in turn; then a, b; then a.
    assert_eq!(ids(&mut q), vec![1, 4, 5, 2, 6, 3]);
}

#[test]
fn unknown_priority_joins_band_zero() {
    let mut q = Queues::new(&FlowControlConfig::default(), []);
    q.enqueue(item(1, 7, "a", 1)).unwrap();
    assert_eq!(q.band_priority(7), 0);
    assert_eq!(q.bands().collect::<Vec<_>>(), vec![(0, 1, 100)]);
}

#[test]
fn limits_refuse_the_new_item_and_never_displace() {
    let mut c = FlowControlConfig {
        max_requests: 3,
        ..FlowControlConfig::default()
    };
    c.bands[0].max_bytes = 250;
    let mut q = Queues::new(&c, [5]);
    q.enqueue(item(1, 0, "a", 1)).unwrap();
    q.enqueue(item(2, 0, "a", 2)).unwrap();
    // Band 0 holds 200 of 250 bytes: a third 100-byte item is refused.
    assert_eq!(q.enqueue(item(3, 0, "a", 3)), Err(Refusal::Capacity));
    q.enqueue(item(4, 5, "a", 4)).unwrap();
    // Global maxRequests 3 reached.
    assert_eq!(q.enqueue(item(5, 5, "a", 5)), Err(Refusal::Capacity));
    assert_eq!(ids(&mut q), vec![4, 1, 2]);
}

#[test]
fn edf_and_slo_deadline_orderings() {
    let mut q = Queues::new(&cfg(Fairness::GlobalStrict, Ordering::SloDeadline), []);
    let mut a = item(1, 0, "a", 0);
    a.slo_ttft_ms = Some(500);
    let mut b = item(2, 0, "a", 100);
    b.slo_ttft_ms = Some(100); // deadline 200: first
    let c = item(3, 0, "a", 50); // no SLO: last
    for i in [a, b, c] {
        q.enqueue(i).unwrap();
    }
    assert_eq!(ids(&mut q), vec![2, 1, 3]);
    // EDF with one TTL for all is FCFS.
    let mut q = Queues::new(&cfg(Fairness::GlobalStrict, Ordering::Edf), []);
    q.enqueue(item(1, 0, "a", 30)).unwrap();
    q.enqueue(item(2, 0, "b", 10)).unwrap();
    assert_eq!(ids(&mut q), vec![2, 1]);
}

#[test]
fn expiry_and_removal() {
    let mut q = Queues::new(&FlowControlConfig::default(), []);
    q.enqueue(item(1, 0, "a", 0)).unwrap();
    q.enqueue(item(2, 0, "b", 500)).unwrap();
    q.enqueue(item(3, 0, "a", 900)).unwrap();
    assert_eq!(q.remove(3).map(|i| i.id), Some(3));
    assert_eq!(q.remove(3), None);
    assert!(q.expire(999, |_| 1000, 0).is_empty());
    let gone: Vec<u64> = q.expire(1000, |_| 1000, 0).iter().map(|i| i.id).collect();
    assert_eq!(gone, vec![1]);
    // A regime change at 800 restarts the clock: item 2 is due at 1800, not 1500.
    assert!(q.expire(1700, |_| 1000, 800).is_empty());
    assert_eq!(q.expire(1800, |_| 1000, 800).len(), 1);
    // A zero budget never expires.
    q.enqueue(item(4, 0, "a", 0)).unwrap();
    assert!(q.expire(u64::MAX, |_| 0, 0).is_empty());
    assert_eq!(q.drain().len(), 1);
    assert!(q.is_empty());
}

#[test]
fn a_band_ttl_replaces_the_global_one_while_the_pool_has_endpoints() {
    let mut c = FlowControlConfig::default();
    c.bands.insert(
        0,
        crate::flow::BandConfig {
            priority: 10,
            ttl: Some(std::time::Duration::from_millis(200)),
            ..c.default_band
        },
    );
    c.default_ttl = std::time::Duration::from_millis(1000);
    c.no_endpoint_ttl = std::time::Duration::from_millis(5000);
    let mut q = Queues::new(&c, []);
    q.enqueue(item(1, 10, "a", 0)).unwrap();
    q.enqueue(item(2, 0, "a", 0)).unwrap();
    let with_endpoints = |b: &crate::flow::BandConfig| c.ttl(b, false).as_millis() as u64;
    assert!(q.expire(199, with_endpoints, 0).is_empty());
    assert_eq!(
        q.expire(200, with_endpoints, 0)
            .iter()
            .map(|i| i.id)
            .collect::<Vec<_>>(),
        vec![1]
    );
    assert!(q.expire(999, with_endpoints, 0).is_empty());
    // With no endpoints the global noEndpointRequestTTL holds for every band.
    q.enqueue(item(3, 10, "a", 0)).unwrap();
    let empty = |b: &crate::flow::BandConfig| c.ttl(b, true).as_millis() as u64;
    assert!(q.expire(4999, empty, 0).is_empty());
    assert_eq!(q.expire(5000, empty, 0).len(), 2);
}

#[test]
fn program_aware_serves_the_least_served_program_first() {
    use crate::flow::program_aware::{cost, Las};
    let las = Las {
        half_life_ms: 0.0,
        ..Las::default()
    };
    let mut c = cfg(Fairness::ProgramAware(las), Ordering::Fcfs);
    // Band 5 keeps global-strict: its dispatches count in flight, without a wait.
    c.bands.insert(
        0,
        crate::flow::BandConfig {
            priority: 5,
            fairness: Fairness::GlobalStrict,
            ..c.default_band
        },
    );
    let mut q = Queues::new(&c, []);
    assert!(q.program_aware());
    let (heavy, light): (Arc<str>, Arc<str>) = ("heavy".into(), "light".into());
    // heavy ran a request costing 16 + 2 × 10 = 36 tokens.
    q.record_dispatch(&heavy, 0, 0, 0);
    assert_eq!(
        q.record_completion(&heavy, Some(cost(16, 10)), 5),
        Some(36.0)
    );
    // heavy queues first, light later: FCFS would serve heavy; LAS serves light
    // (score 0.8 against heavy's 0.2), then heavy, then light's second.
    q.enqueue(item(1, 0, "heavy", 10)).unwrap();
    q.enqueue(item(2, 0, "light", 20)).unwrap();
    q.enqueue(item(3, 0, "light", 30)).unwrap();
    let first = q.pop_next(100).unwrap();
    assert_eq!(first.id, 2);
    q.record_dispatch(&first.flow, first.priority, 100 - first.enqueued_ms, 100);
    // light finished a request costing 10 + 2 × 50 = 110: now heavy is the least served.
    assert_eq!(
        q.record_completion(&light, Some(cost(10, 50)), 150),
        Some(110.0)
    );
    assert_eq!(q.pop_next(200).map(|i| i.id), Some(1));
    assert_eq!(q.pop_next(200).map(|i| i.id), Some(3));
    let p = q.program("light").unwrap();
    assert_eq!(
        (p.in_flight, p.waits, p.avg_wait_ms, p.service),
        (0, 1, 80.0, 110.0)
    );
    // A dispatch from the global-strict band: in flight, no wait observed (heavy's one
    // wait is its first dispatch's, 0 ms, from band 0).
    q.record_dispatch(&heavy, 5, 999, 300);
    let p = q.program("heavy").unwrap();
    assert_eq!((p.in_flight, p.waits, p.avg_wait_ms), (1, 1, 0.0));
    // Mean waits (80, 0): 80² / (2 × 80²) = 0.5.
    assert_eq!(q.fairness_index(), Some(0.5));
    // Without a program-aware band there is no ledger.
    let plain = Queues::new(&FlowControlConfig::default(), []);
    assert!(!plain.program_aware());
    assert_eq!(plain.fairness_index(), None);
}
