//! Conditional decode end to end, in layout (b): a coordinator (`pdgate serve` with
//! `--prefill-router/--decode-router --conditional-decode`) in front of a prefill router and
//! a decode router (each a pdgate selecting its profile from `x-llm-d-epp-profile`), in
//! front of simulator workers; all in-process on 127.0.0.1:0 (design.md §4).

use crate::support;

use pdgate_scenario::fleet::{self, FleetSpec, LocalFleet};
use pdgate_scheduler::DEFAULT_CONFIG_YAML;
use pdgate_server::app::PhaseRouters;
use pdgate_server::ServerHandle;
use serde_json::Value;
use support::{coordinator, endpoints, metric, metrics, router, url};

struct Layout {
    /// Workers + the prefill router (the fleet's own router).
    fleet: LocalFleet,
    decode_router: ServerHandle,
    coordinator: ServerHandle,
}

impl Layout {
    fn url(&self) -> String {
        url(&self.coordinator)
    }
    fn decode_url(&self) -> String {
        url(&self.decode_router)
    }
    fn prefill_legs(&self) -> u64 {
        self.fleet.workers[0].stats().prefill_legs
    }
    fn in_flight(&self) -> u32 {
        self.fleet.in_flight() + self.decode_router.state.in_flight_total()
    }
}

/// 1 prefill + 2 decode simulators; the decode router schedules with `decode_yaml`.
async fn layout(decode_yaml: &str, conditional: bool) -> Layout {
    // The fleet's router is the prefill router: it trusts the coordinator (on loopback).
    let mut spec = FleetSpec::new(1, 2, 50.0);
    spec.trust = support::loopback_trusted();
    let fleet = fleet::start(&spec, DEFAULT_CONFIG_YAML).await.unwrap();
    let decode_router = router(endpoints(&fleet.workers), decode_yaml).await;
    let routers = PhaseRouters::new(
        &fleet.router.addr.to_string(),
        &decode_router.addr.to_string(),
        conditional,
    );
    let coordinator = coordinator(routers).await;
    // Let the decode router learn the engines' model lists.
    fleet::wait_for_models(&decode_router).await;
    Layout {
        fleet,
        decode_router,
        coordinator,
    }
}

fn body(first: u32) -> Value {
    support::body(first, 256, 4)
}

/// Status, served-by headers and the body; `prefer` goes straight to a decode router (with
/// the decode profile).
async fn send(url: &str, body: &Value, prefer: Option<&str>) -> (u16, [String; 3], Value) {
    let headers = match prefer {
        Some(p) => vec![("prefer", p), ("x-llm-d-epp-profile", "decode")],
        None => Vec::new(),
    };
    let r = support::send(url, &headers, body).await;
    (r.status, r.served(), r.body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uncached_probe_is_412_then_prefill_and_decode_and_cached_probe_is_served_by_decode() {
    let l = layout(DEFAULT_CONFIG_YAML, true).await;
    // Nothing cached: the probe is deferred (412), then prefill + decode.
    let (status, served, v) = send(&l.url(), &body(0), None).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(served[0..2], ["split".to_string(), "prefill-0".to_string()]);
    let decode = served[2].clone();
    assert!(decode.starts_with("decode-"), "{served:?}");
    assert_eq!(l.prefill_legs(), 1);
    // Same prompt: the decode router's index now has it on `decode`: served there, no
    // prefill leg; the decode engine reports the prompt's full blocks as cached.
    let (status, served, v) = send(&l.url(), &body(0), None).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        served,
        ["aggregated".to_string(), decode.clone(), decode.clone()]
    );
    assert_eq!(l.prefill_legs(), 1, "no prefill leg for a served probe");
    assert_eq!(
        v["usage"]["prompt_tokens_details"]["cached_tokens"], 240,
        "{v}"
    );
    // A different prompt misses again.
    let (status, served, _) = send(&l.url(), &body(10_000), None).await;
    assert_eq!((status, served[0].as_str()), (200, "split"));
    assert_eq!(l.prefill_legs(), 2);

    let coord = metrics(&l.url()).await;
    let probes = |r: &str| {
        metric(
            &coord,
            &format!("pdgate_conditional_decode_probes_total{{result=\"{r}\"}}"),
        )
    };
    assert_eq!(
        (probes("served"), probes("deferred"), probes("error")),
        (1, 2, 0)
    );
    let decode_router = metrics(&l.decode_url()).await;
    assert_eq!(
        metric(
            &decode_router,
            "pdgate_requests_total{api=\"completions\",status=\"412\"}"
        ),
        2
    );
    // The decode router ran the decode profile three times (served probe + 2 decode legs).
    assert_eq!(
        metric(
            &decode_router,
            "pdgate_phase_requests_total{phase=\"decode\",status=\"200\"}"
        ),
        3
    );
    assert_eq!(l.in_flight(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn coordinator_lists_the_routers_models_and_a_dead_router_is_a_502_without_a_mode() {
    let l = layout(DEFAULT_CONFIG_YAML, true).await;
    let models: Value = reqwest::get(format!("{}/v1/models", l.url()))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(models["data"][0]["id"], "pdgate-sim", "{models}");
    // A coordinator whose decode router is gone (a port nobody listens on any more).
    let dead = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let dead_addr = dead.local_addr().unwrap().to_string();
    drop(dead);
    let routers = PhaseRouters::new(&l.fleet.router.addr.to_string(), &dead_addr, true);
    let coordinator = coordinator(routers).await;
    let r = support::send(&url(&coordinator), &[], &body(0)).await;
    assert_eq!(r.status, 502);
    assert!(
        r.headers.get("x-pdgate-pd-mode").is_none(),
        "{:?}",
        r.headers
    );
    assert!(r.headers.get("x-pdgate-decode-endpoint").is_none());
    let v = r.body;
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("decode leg failed: upstream decode-router unreachable"),
        "{v}"
    );
    assert_eq!(l.in_flight(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn non_cached_tokens_zero_or_no_decider_never_412() {
    let zero = DEFAULT_CONFIG_YAML.replace("nonCachedTokens: 16", "nonCachedTokens: 0");
    let no_decider = DEFAULT_CONFIG_YAML.replace("prefill: prefix-based-pd-decider", "{}");
    assert_ne!(zero, DEFAULT_CONFIG_YAML);
    assert_ne!(no_decider, DEFAULT_CONFIG_YAML);
    for yaml in [zero, no_decider] {
        let l = layout(&yaml, true).await;
        for first in [0, 20_000, 40_000] {
            let (status, served, v) = send(&l.url(), &body(first), None).await;
            assert_eq!((status, served[0].as_str()), (200, "aggregated"), "{v}");
        }
        assert_eq!(l.prefill_legs(), 0);
        let m = metrics(&l.decode_url()).await;
        assert_eq!(
            metric(
                &m,
                "pdgate_requests_total{api=\"completions\",status=\"412\"}"
            ),
            0
        );
        assert_eq!(l.in_flight(), 0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prefer_header_is_parsed_per_rfc_7240_by_the_decode_router() {
    let l = layout(DEFAULT_CONFIG_YAML, false).await;
    // Sent straight to the decode router with the decode profile, nothing cached.
    for (prefer, want) in [
        ("if-available", 412),
        ("If-Available", 412),
        ("respond-async, if-available; x=\"a,b\"", 412),
        ("wait=5, IF-AVAILABLE", 412),
        ("if-availablex", 200),
        ("x-if-available", 200),
        ("\"if-available\"", 200),
        ("return=minimal", 200),
    ] {
        let (status, _, v) = send(&l.decode_url(), &body(50_000), Some(prefer)).await;
        assert_eq!(status, want, "Prefer: {prefer} → {v}");
        if want == 412 {
            assert_eq!(v["error"]["code"], 412, "{v}");
            assert!(
                v["error"]["message"]
                    .as_str()
                    .unwrap()
                    .starts_with("conditional decode deferred: decode endpoint `decode-"),
                "{v}"
            );
        }
    }
    // Without a coordinator probe the coordinator never sends `Prefer` (flag off).
    let (status, served, _) = send(&l.url(), &body(60_000), None).await;
    assert_eq!((status, served[0].as_str()), (200, "split"));
    let coord = metrics(&l.url()).await;
    assert!(
        !coord.contains("pdgate_conditional_decode_probes_total{"),
        "{coord}"
    );
    assert_eq!(l.in_flight(), 0);
}
