//! Unit tests of `program_aware.rs`.

use super::*;

fn id(s: &str) -> Arc<str> {
    Arc::from(s)
}

fn no_decay() -> Las {
    Las {
        half_life_ms: 0.0,
        ..Las::default()
    }
}

#[test]
fn least_served_program_wins_over_a_longer_wait() {
    let mut l = Ledger::new(no_decay());
    let (heavy, light) = (id("heavy"), id("light"));
    l.dispatched(&heavy, None, 0);
    assert_eq!(l.completed(&heavy, Some(cost(16, 10)), 10), 36.0);
    // heavy's head waited 100 ms, light's 40 ms, at t = 1000 ms:
    // heavy: 0.8 × (1 − 1) + 0.2 × 1 = 0.2; light: 0.8 × (1 − 0) + 0.2 × 0 = 0.8.
    let heads = [(&heavy, 900), (&light, 960)];
    assert_eq!(l.choose(heads.iter().copied(), 1000), Some(&light));
    // With the head wait weighted 0.9 instead: heavy 0.9, light 0.8 → heavy.
    let mut l2 = l.clone();
    l2.las.weight_head_wait = 0.9;
    assert_eq!(l2.choose(heads.iter().copied(), 1000), Some(&heavy));
}

#[test]
fn equal_scores_go_to_the_longest_wait_then_the_first() {
    let mut l = Ledger::new(no_decay());
    let (a, b, c) = (id("a"), id("b"), id("c"));
    // One flow: norm = 0.5 for both terms, score 0.5; it is served.
    assert_eq!(l.choose([(&a, 5)].into_iter(), 10), Some(&a));
    // Equal service and equal waits: every score is 0.8 × 0.5 + 0.2 × 0.5; the first.
    assert_eq!(l.choose([(&b, 5), (&a, 5)].into_iter(), 10), Some(&b));
    // Weights 0: every score 0; the longest wait (c) wins.
    l.las.weight_service = 0.0;
    l.las.weight_head_wait = 0.0;
    assert_eq!(
        l.choose([(&a, 5), (&c, 2), (&b, 7)].into_iter(), 10),
        Some(&c)
    );
    assert_eq!(l.choose(std::iter::empty(), 10), None);
}

#[test]
fn service_decays_lazily_by_half_lives() {
    let mut l = Ledger::new(Las {
        half_life_ms: 1000.0,
        ..Las::default()
    });
    let p = id("p");
    // First touch anchors at t = 0 without decay; 40 tokens added at t = 0.
    assert_eq!(l.completed(&p, Some(40.0), 0), 40.0);
    // One half-life later: 20; two more: 5.
    assert_eq!(l.service(&p, 1000), 20.0);
    assert_eq!(l.service(&p, 3000), 5.0);
    // Reading again at the same time does not decay again.
    assert_eq!(l.service(&p, 3000), 5.0);
    // Decay, then add: 5 × 2^(−1) + 7 = 9.5.
    assert_eq!(l.completed(&p, Some(7.0), 4000), 9.5);
}

#[test]
fn waits_average_and_fairness_index() {
    let mut l = Ledger::new(Las::default());
    let (a, b, c) = (id("a"), id("b"), id("c"));
    assert_eq!(l.fairness_index(), 1.0);
    l.dispatched(&a, Some(10), 0);
    l.dispatched(&a, Some(30), 0); // mean 20
    assert_eq!(l.program("a").unwrap().avg_wait_ms, 20.0);
    assert_eq!(l.fairness_index(), 1.0); // n = 1
    l.dispatched(&b, Some(40), 0);
    l.dispatched(&c, None, 0); // no wait observed: not counted
                               // x = (20, 40): (60)² / (2 × (400 + 1600)) = 3600 / 4000 = 0.9.
    assert_eq!(l.fairness_index(), 0.9);
    let pa = l.program("a").unwrap();
    assert_eq!((pa.in_flight, pa.dispatched, pa.waits), (2, 2, 2));
    assert_eq!(l.program("c").unwrap().waits, 0);
}

#[test]
fn idle_programs_are_evicted_on_the_sweep() {
    let las = Las {
        eviction_ttl_ms: 1000,
        eviction_sweep_ms: 300,
        ..Las::default()
    };
    let mut l = Ledger::new(las);
    let (busy, idle, fresh) = (id("busy"), id("idle"), id("fresh"));
    l.dispatched(&busy, None, 0);
    l.dispatched(&idle, None, 0);
    l.completed(&idle, None, 100);
    l.dispatched(&fresh, None, 900); // created at 900, in flight
    l.completed(&fresh, None, 950);
    // t = 1100: idle finished 1000 ms ago (not > ttl): kept.
    assert!(l.sweep(1100).is_empty());
    // t = 1300: not due (last sweep 1100, period 300).
    assert!(l.sweep(1300).is_empty());
    // t = 1400: idle's last completion is 1300 ms old → evicted; busy has one in flight;
    // fresh finished 450 ms ago.
    assert_eq!(l.sweep(1400), vec![idle.clone()]);
    assert!(l.program("idle").is_none());
    assert_eq!(l.len(), 2);
    // TTL 0: never.
    let mut never = Ledger::new(Las {
        eviction_ttl_ms: 0,
        ..las
    });
    never.completed(&idle, None, 0);
    assert!(never.sweep(u64::MAX).is_empty());
}

#[test]
fn parameters_are_validated_by_name() {
    let bad = |f: fn(&mut ProgramAwareParams)| {
        let mut p = ProgramAwareParams::default();
        f(&mut p);
        p.las().err().unwrap()
    };
    let e = bad(|p| p.strategy = "wfq".into());
    assert_eq!(e.path.as_deref(), Some("strategy"));
    assert_eq!(
        e.message,
        "unknown scoring strategy \"wfq\": only \"las\" is supported"
    );
    for (field, f) in [
        (
            "lasWeightService",
            (|p: &mut ProgramAwareParams| p.las_weight_service = -0.1)
                as fn(&mut ProgramAwareParams),
        ),
        ("lasWeightHeadWait", |p| p.las_weight_head_wait = f64::NAN),
        ("lasHalfLifeSeconds", |p| p.las_half_life_seconds = -1.0),
        ("evictionTtlSeconds", |p| p.eviction_ttl_seconds = -1.0),
        ("evictionSweepSeconds", |p| p.eviction_sweep_seconds = 0.0),
    ] {
        assert_eq!(bad(f).path.as_deref(), Some(field));
    }
    let empty = ProgramAwareParams {
        strategy: String::new(),
        las_half_life_seconds: 0.0,
        eviction_ttl_seconds: 0.0,
        ..ProgramAwareParams::default()
    };
    let las = empty.las().unwrap();
    assert_eq!(
        (las.half_life_ms, las.eviction_ttl_ms, las.eviction_sweep_ms),
        (0.0, 0, 300_000)
    );
}
