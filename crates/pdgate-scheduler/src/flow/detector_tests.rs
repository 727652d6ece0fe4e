use super::*;
use crate::endpoint::{monotonic_ms, Endpoint, EndpointLoad, InFlightGuard};
use pdgate_api::Role;

fn ep(name: &str, role: Option<Role>) -> Arc<EndpointState> {
    let mut e = Endpoint::new(name, "127.0.0.1:1", Default::default());
    e.role = role;
    Arc::new(EndpointState {
        endpoint: e,
        load: Arc::new(EndpointLoad::default()),
    })
}

#[test]
fn utilization_is_the_mean_of_max_ratios_and_stale_counts_full() {
    let d = UtilizationDetector::default();
    let (a, b, c) = (ep("a", None), ep("b", None), ep("c", None));
    a.load.set_scraped(Some(0.0), Some(2.5), Some(0.2)); // max(2.5/5, 0.2/0.8) = 0.5
    b.load.set_scraped(Some(0.0), Some(0.0), Some(0.6)); // 0.6/0.8 = 0.75
    let now = monotonic_ms();
    // c never scraped: 1.0.
    let s = d.saturation(&[&a, &b, &c], 0, now);
    assert!((s - (0.5 + 0.75 + 1.0) / 3.0).abs() < 1e-9, "{s}");
    assert_eq!(d.stale(&[&a, &b, &c], now), 1);
    // 300 ms later every gauge is stale (threshold 200 ms).
    assert_eq!(d.saturation(&[&a, &b], 0, now + 300), 1.0);
    // Bookings beyond the scraped running count as waiting; pending spreads evenly.
    let _g: Vec<InFlightGuard> = (0..5).map(|_| InFlightGuard::book(&b.load)).collect();
    assert!((d.saturation(&[&b], 0, now) - 1.0).abs() < 1e-9); // 5 waiting / 5
    assert!((d.saturation(&[&a], 5, now) - 1.5).abs() < 1e-9); // (2.5 + 5) / 5
    assert_eq!(d.saturation(&[], 0, now), 1.0);
    // A failed scrape (all gauges unknown) is stale at once: it must not read as idle.
    a.load.set_scraped(None, None, None);
    assert_eq!(d.saturation(&[&a], 0, monotonic_ms()), 1.0);
    assert_eq!(d.stale(&[&a], monotonic_ms()), 1);
}

#[test]
fn concurrency_is_bookings_over_capacity() {
    let d = ConcurrencyDetector {
        params: ConcurrencyParams {
            concurrency_mode: "requests".into(),
            max_concurrency: 4,
            max_token_concurrency: 1,
            headroom: 0.0,
        },
    };
    let (a, b) = (ep("a", None), ep("b", None));
    let _g: Vec<InFlightGuard> = (0..3).map(|_| InFlightGuard::book(&a.load)).collect();
    assert!((d.saturation(&[&a, &b], 0, 0) - 3.0 / 8.0).abs() < 1e-9);
    assert!((d.saturation(&[&a, &b], 5, 0) - 1.0).abs() < 1e-9);
}

fn names(c: &Candidates<'_>) -> Vec<String> {
    c.iter().map(|e| e.endpoint.name.clone()).collect()
}

#[test]
fn utilization_filter_keeps_fresh_endpoints_under_the_slackened_thresholds() {
    // headroom 0.25: limits 5 × 1.25 = 6.25 waiting and 0.8 × 1.25 = 1.0 KV.
    let d = UtilizationDetector::new(UtilizationParams {
        headroom: 0.25,
        ..UtilizationParams::default()
    });
    let (a, b, c, s) = (ep("a", None), ep("b", None), ep("c", None), ep("s", None));
    a.load.set_scraped(Some(0.0), Some(6.0), Some(0.5)); // 6 < 6.25, 0.5 < 1: kept
    b.load.set_scraped(Some(0.0), Some(7.0), Some(0.1)); // 7 ≥ 6.25: dropped
    c.load.set_scraped(Some(0.0), Some(0.0), Some(0.99)); // 0.99 < 1.0: kept
                                                          // s never scraped: stale, dropped.
    let now = monotonic_ms();
    let all = [&a, &b, &c, &s];
    let mut cand: Candidates<'_> = all.to_vec();
    d.filter_at(&mut cand, now);
    assert_eq!(names(&cand), ["a", "c"]);
    // The detector reads the same thresholds at × 1: max(6/5, 0.5/0.8) = 1.2 for a,
    // max(7/5, 0.1/0.8) = 1.4 for b, max(0, 0.99/0.8) = 1.2375 for c, 1.0 for s.
    let sat = d.saturation(&all, 0, now);
    assert!(
        (sat - (1.2 + 1.4 + 1.2375 + 1.0) / 4.0).abs() < 1e-12,
        "{sat}"
    );
    // None passes: the input is returned unchanged (fails open).
    let mut cand: Candidates<'_> = vec![&b, &s];
    d.filter_at(&mut cand, now);
    assert_eq!(names(&cand), ["b", "s"]);
    // Strictly under: exactly at the limit is out (kv 1.0 = 0.8 × 1.25).
    c.load.set_scraped(Some(0.0), Some(0.0), Some(1.0));
    let mut cand: Candidates<'_> = vec![&a, &c];
    d.filter_at(&mut cand, monotonic_ms());
    assert_eq!(names(&cand), ["a"]);
    assert_eq!(
        d.thresholds(1.25),
        Thresholds {
            queue: 6.25,
            kv: 1.0
        }
    );
}

#[test]
fn utilization_filter_judges_staleness_at_the_requests_now() {
    // Gauges stamped at 1000 and 1100 ms, both well under the thresholds (waiting 1 of 5,
    // KV 0.1 of 0.8); staleness threshold 200 ms (the default).
    let d = UtilizationDetector::default();
    let (a, b) = (ep("a", None), ep("b", None));
    a.load
        .set_scraped_at(Some(0.0), Some(1.0), Some(0.1), 1_000);
    b.load
        .set_scraped_at(Some(0.0), Some(1.0), Some(0.1), 1_100);
    let prompt = pdgate_api::PromptInput::Tokens(vec![]);
    // The filter as a profile runs it: the time is the request's `now_ms`, no clock.
    let at = |now_ms: u64| {
        let req = crate::SchedulingRequest {
            now_ms,
            ..crate::SchedulingRequest::new("r", "m", &prompt)
        };
        let mut cand: Candidates<'_> = vec![&a, &b];
        d.filter(&RequestCtx::new(&req, 0), &mut cand);
        names(&cand)
    };
    // 200 ms old is still fresh: both kept.
    assert_eq!(at(1_200), ["a", "b"]);
    // 1 ms later `a` is 201 ms old: stale, dropped.
    assert_eq!(at(1_201), ["b"]);
    assert_eq!(at(1_300), ["b"]);
    // Both stale: none passes and the filter fails open.
    assert_eq!(at(1_301), ["a", "b"]);
    assert_eq!(d.stale(&[&a, &b], 1_201), 1);
    assert_eq!(d.stale(&[&a, &b], 1_301), 2);
}

#[test]
fn concurrency_filter_truncates_the_limit_and_never_fails_open() {
    let d = |headroom| ConcurrencyDetector {
        params: ConcurrencyParams {
            concurrency_mode: "requests".into(),
            max_concurrency: 4,
            max_token_concurrency: 1,
            headroom,
        },
    };
    let (a, b) = (ep("a", None), ep("b", None));
    let _ga: Vec<InFlightGuard> = (0..5).map(|_| InFlightGuard::book(&a.load)).collect();
    let _gb: Vec<InFlightGuard> = (0..6).map(|_| InFlightGuard::book(&b.load)).collect();
    let ctx_run = |det: &ConcurrencyDetector| {
        let mut cand: Candidates<'_> = vec![&a, &b];
        crate::plugins::testutil::with_ctx(&pdgate_api::PromptInput::Tokens(vec![]), |ctx| {
            det.filter(ctx, &mut cand)
        });
        names(&cand)
    };
    // 4 × 1.5 = 6: a (5) kept, b (6) dropped.
    assert_eq!(d(0.5).limit(1.5), 6);
    assert_eq!(ctx_run(&d(0.5)), ["a"]);
    // 4 × 1.3 = 5.2 → 5: both dropped, and the set stays empty.
    assert_eq!(d(0.3).limit(1.3), 5);
    assert!(ctx_run(&d(0.3)).is_empty());
    // The detector divides by the same limit at × 1: (5 + 6) / (2 × 4).
    assert_eq!(d(0.3).saturation(&[&a, &b], 0, 0), 11.0 / 8.0);
}

#[test]
fn stages_split_by_role_and_take_the_larger() {
    let d = ConcurrencyDetector {
        params: ConcurrencyParams {
            concurrency_mode: "requests".into(),
            max_concurrency: 2,
            max_token_concurrency: 1,
            headroom: 0.0,
        },
    };
    let p = ep("p", Some(Role::Prefill));
    let dd = ep("d", Some(Role::Decode));
    let enc = ep("e", Some(Role::Encode));
    let _g: Vec<InFlightGuard> = (0..2).map(|_| InFlightGuard::book(&p.load)).collect();
    let _e: Vec<InFlightGuard> = (0..9).map(|_| InFlightGuard::book(&enc.load)).collect();
    let s = pool_saturation(&d, &[p, dd, enc], 0, 0);
    assert_eq!(s.prefill, Some(1.0));
    assert_eq!(s.decode, Some(0.0));
    assert_eq!(s.effective, 1.0);
    assert_eq!(pool_saturation(&d, &[], 0, 0).effective, 1.0);
}
