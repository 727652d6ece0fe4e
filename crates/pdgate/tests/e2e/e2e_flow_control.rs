//! Flow control (issue 10 item 6) against simulator workers: queueing under the
//! concurrency detector, band limits, priority order, TTL expiry, client disconnect, no
//! endpoints, and legacy sheddable admission without the gate (in-flight eviction:
//! `e2e_flow_eviction`). The engine-side claims (never more than `maxConcurrency` requests on
//! the engine) are read from the simulator.

use crate::support;

use pdgate_scenario::fleet;
use pdgate_server::ServerHandle;
use std::time::{Duration, Instant};
use support::flow::*;
use support::*;

/// Sends a request of `max_tokens` (prompt ids from `first`) and waits until the router has
/// booked it: the engine's one slot is then taken.
async fn occupy(r: &ServerHandle, first: u32, max_tokens: u32) -> tokio::task::JoinHandle<Reply> {
    let u = url(r);
    hold(r, 1, async move {
        send(&u, &[], &body(first, 16, max_tokens)).await
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queues_up_to_the_band_limit_and_never_exceeds_the_engine_concurrency() {
    let yaml = config(
        true,
        2,
        "  defaultRequestTTL: 30s\n  defaultPriorityBand: {maxRequests: 4}\n",
    );
    let (w, r) = fleet_with(&yaml, &[]).await;
    let u = url(&r);
    let all = futures_util::future::join_all((0..10).map(|i| {
        let u = u.clone();
        async move { send(&u, &[], &body(i * 100, 16, 60)).await }
    }));
    tokio::pin!(all);
    // The engine's own count of running + waiting requests, sampled every 2 ms.
    let mut peak = 0;
    let replies = loop {
        tokio::select! {
            r = &mut all => break r,
            _ = tokio::time::sleep(Duration::from_millis(2)) => {
                let st = w.stats();
                peak = peak.max(st.running + st.waiting);
            }
        }
    };
    let ok = replies.iter().filter(|r| r.status == 200).count();
    let refused: Vec<&Reply> = replies.iter().filter(|r| r.status == 429).collect();
    // 2 run at once, 4 wait in the band, 4 are refused at once.
    assert_eq!((ok, refused.len()), (6, 4), "{replies:?}");
    for r in &refused {
        assert_eq!(
            r.header("x-llm-d-request-dropped-reason"),
            "rejected-saturated"
        );
        assert!(
            r.body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("queue at capacity"),
            "{:?}",
            r.body
        );
    }
    assert_eq!(w.stats().completions, 6);
    assert!((1..=2).contains(&peak), "engine saw {peak} at once");
    let m = metrics(&u).await;
    let series = |o: &str| outcomes(&m, o, 0);
    assert_eq!(
        (series("Dispatched"), series("RejectedCapacity")),
        (6, 4),
        "{m}"
    );
    assert_eq!(
        gauge(&m, "llm_d_epp_flow_control_queue_size{priority=\"0\"}"),
        0.0
    );
    assert_eq!(r.state.flow.queued(), 0);
    assert_eq!(r.state.in_flight_total(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_higher_band_goes_first_and_sheddable_waits() {
    let yaml = config(true, 1, "  defaultRequestTTL: 30s\n");
    let (_w, r) = fleet_with(&yaml, &["chat=10", "batch=-1"]).await;
    let u = url(&r);
    // One request occupies the engine; three batch requests queue, then one chat request.
    let first = occupy(&r, 0, 40).await;
    let t0 = Instant::now();
    let mut lows = Vec::new();
    for i in 0..3 {
        let u = u.clone();
        lows.push(tokio::spawn(async move {
            let r = send(
                &u,
                &[("x-llm-d-inference-objective", "batch")],
                &body(1000 + i * 100, 16, 40),
            )
            .await;
            (r.status, t0.elapsed())
        }));
    }
    wait_until(Duration::from_secs(5), "batch requests queued", || {
        r.state.flow.queued() == 3
    })
    .await;
    let high = tokio::spawn({
        let u = u.clone();
        async move {
            let r = send(
                &u,
                &[("x-gateway-inference-objective", "chat")],
                &body(5000, 16, 40),
            )
            .await;
            (r.status, t0.elapsed())
        }
    });
    let (hs, ht) = high.await.unwrap();
    assert_eq!(first.await.unwrap().status, 200);
    assert_eq!(hs, 200);
    for l in lows {
        let (ls, lt) = l.await.unwrap();
        assert_eq!(ls, 200);
        assert!(
            ht < lt,
            "chat finished at {ht:?}, a batch request at {lt:?}"
        );
    }
    let m = metrics(&u).await;
    assert_eq!(outcomes(&m, "Dispatched", -1), 3);
    assert_eq!(outcomes(&m, "Dispatched", 10), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ttl_expiry_and_client_disconnect_while_queued() {
    let yaml = config(true, 1, "  defaultRequestTTL: 300ms\n");
    let (w, r) = fleet_with(&yaml, &[]).await;
    let u = url(&r);
    let long = occupy(&r, 0, 200).await;
    // A client that gives up after 100 ms while queued.
    let gone = reqwest::Client::new()
        .post(format!("{u}/v1/completions"))
        .json(&body(500, 16, 10))
        .timeout(Duration::from_millis(100))
        .send()
        .await;
    assert!(gone.is_err());
    let t = Instant::now();
    let expired = send(&u, &[], &body(900, 16, 10)).await;
    let waited = t.elapsed();
    assert_eq!(expired.status, 429, "{expired:?}");
    assert_eq!(
        expired.header("x-llm-d-request-dropped-reason"),
        "rejected-ttl-expired"
    );
    assert!(
        waited >= Duration::from_millis(300) && waited < Duration::from_millis(1500),
        "{waited:?}"
    );
    assert_eq!(long.await.unwrap().status, 200);
    let m = metrics(&u).await;
    let series = |o: &str| outcomes(&m, o, 0);
    assert_eq!(
        (
            series("Dispatched"),
            series("EvictedTTL"),
            series("EvictedContextCancelled")
        ),
        (1, 1, 1),
        "{m}"
    );
    // Only the long request reached the engine.
    assert_eq!(w.stats().completions, 1);
    assert_eq!(r.state.flow.queued(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_pool_answers_503_after_the_no_endpoint_ttl() {
    let yaml = config(true, 1, "  noEndpointRequestTTL: 200ms\n");
    let scheduler = pdgate_scheduler::Scheduler::from_yaml(&yaml, "test").unwrap();
    assert!(scheduler.flow().gate);
    let r = fleet::router_with(Vec::new(), &yaml, |_| {}).await.unwrap();
    let t = Instant::now();
    let reply = send(&url(&r), &[], &body(0, 16, 10)).await;
    assert_eq!(reply.status, 503, "{reply:?}");
    assert_eq!(
        reply.header("x-llm-d-request-dropped-reason"),
        "rejected-no-endpoints"
    );
    assert!(
        t.elapsed() >= Duration::from_millis(200),
        "{:?}",
        t.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_gate_only_sheddable_requests_are_refused_when_saturated() {
    let yaml = config(false, 1, "");
    let (w, r) = fleet_with(&yaml, &["batch=-1"]).await;
    let u = url(&r);
    // Idle pool: a sheddable request passes.
    let idle = send(
        &u,
        &[("x-llm-d-inference-objective", "batch")],
        &body(0, 16, 4),
    )
    .await;
    assert_eq!(idle.status, 200);
    let long = occupy(&r, 100, 100).await;
    let shed = send(
        &u,
        &[("x-llm-d-inference-objective", "batch")],
        &body(200, 16, 4),
    )
    .await;
    assert_eq!(shed.status, 429, "{shed:?}");
    assert_eq!(
        shed.header("x-llm-d-request-dropped-reason"),
        "rejected-saturated"
    );
    assert!(shed.body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("sheddable request dropped"));
    // Priority 0 is never refused by legacy admission (it queues at the engine).
    let normal = send(&u, &[], &body(300, 16, 4)).await;
    assert_eq!(normal.status, 200);
    assert_eq!(long.await.unwrap().status, 200);
    assert_eq!(w.stats().completions, 3);
    let m = metrics(&u).await;
    assert_eq!(
        metric(&m, "pdgate_sheddable_rejections_total{priority=\"-1\"}"),
        1
    );
    // Regressions (adversarial try): flow-control headers never fail a request without the
    // gate, and the saturation gauge follows the pool when traffic stops.
    let long_id = "f".repeat(300);
    let lenient = send(
        &u,
        &[("x-llm-d-inference-fairness-id", long_id.as_str())],
        &body(400, 16, 2),
    )
    .await;
    assert_eq!(lenient.status, 200, "{lenient:?}");
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let m = metrics(&u).await;
        let s = gauge(
            &m,
            "llm_d_epp_flow_control_pool_saturation{stage=\"effective\"}",
        );
        if s == 0.0 {
            break;
        }
        assert!(Instant::now() < deadline, "saturation gauge stuck at {s}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_split_request_releases_its_prefill_booking_when_the_prefill_answers() {
    // Regression (adversarial try): the prefill booking was held until the decode ended, so a
    // prefill pod with nothing running looked saturated and split requests were throttled.
    let workers = sim_workers(
        vec![
            spec("prefill-0", "prefill", None),
            spec("decode-0", "decode", None),
        ],
        sim_config(1.0),
    )
    .await;
    let r = router(endpoints(&workers), pdgate_scheduler::DEFAULT_CONFIG_YAML).await;
    let u = url(&r);
    let long = tokio::spawn(async move { send(&u, &[], &body(0, 2000, 150)).await });
    let booked = |name: &str| {
        r.state
            .registry
            .snapshot()
            .get(name)
            .map_or(0, |e| e.load.in_flight())
    };
    wait_until(Duration::from_secs(5), "the decode leg running", || {
        booked("decode-0") == 1 && workers[1].stats().running == 1
    })
    .await;
    assert_eq!(workers[0].stats().running, 0, "the prefill engine is idle");
    assert_eq!(booked("prefill-0"), 0, "the prefill booking is over");
    let reply = long.await.unwrap();
    assert_eq!(reply.status, 200, "{reply:?}");
    assert_eq!(reply.header("x-pdgate-pd-mode"), "split");
    assert_eq!(r.state.in_flight_total(), 0);
}
