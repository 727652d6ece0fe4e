//! The trust boundary for coordinator-to-router headers (issue 10 item 2), through real
//! routers in front of simulated workers on 127.0.0.1: an untrusted caller's profile,
//! probe and revision headers are dropped unread (and counted), while a coordinator that
//! presents the shared token still drives its per-role routers.

use crate::support;

use pdgate_core::trust::TrustedCallers;
use pdgate_scenario::fleet::{self, FleetSpec};
use pdgate_scheduler::DEFAULT_CONFIG_YAML;
use pdgate_server::app::PhaseRouters;
use serde_json::json;
use support::{metric, metrics, send, url};

const TOKEN: &str = "0123456789abcdef-test-token";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_untrusted_prefill_profile_leaves_no_lease_on_any_engine() {
    // fleet::start's router has the default trust: nobody.
    let fleet = fleet::start(&FleetSpec::new(1, 1, 200.0), DEFAULT_CONFIG_YAML)
        .await
        .unwrap();
    let attack = [("x-llm-d-epp-profile", "prefill")];
    for i in 0..200 {
        let mut b = support::body(i * 1_000, 8, 2);
        b["kv_transfer_params"] = json!({"do_remote_decode": true, "do_remote_prefill": false});
        let r = send(&url(&fleet.router), &attack, &b).await;
        assert_eq!(r.status, 200, "{}", r.body);
        // Served as an ordinary request: the router's own decision, named in its headers.
        assert_ne!(r.header("x-pdgate-pd-mode"), "", "{:?}", r.headers);
    }
    // Every lease a prefill made was pulled by its decode; none is left (a lease would
    // live 480 s).
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let stats: Vec<_> = fleet.workers.iter().map(|w| w.stats()).collect();
    assert_eq!(stats.iter().map(|s| s.leases).collect::<Vec<_>>(), [0, 0]);
    assert_eq!(
        stats[0].prefill_legs, stats[1].remote_decode_legs,
        "{stats:?}"
    );
    let m = metrics(&url(&fleet.router)).await;
    assert_eq!(
        metric(
            &m,
            r#"pdgate_untrusted_headers_dropped_total{header="x-llm-d-epp-profile"}"#
        ),
        200
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_coordinator_with_the_token_drives_its_routers_and_a_client_without_it_does_not() {
    let workers = support::sim_workers(
        vec![
            support::spec("prefill-0", "prefill", None),
            support::spec("decode-0", "decode", None),
        ],
        support::sim_config(200.0),
    )
    .await;
    let trust = TrustedCallers::new(Vec::new(), Some(TOKEN)).unwrap();
    let role_router = || {
        let trust = trust.clone();
        fleet::router_with(
            support::endpoints(&workers),
            DEFAULT_CONFIG_YAML,
            move |o| o.trust = trust,
        )
    };
    let (prefill, decode) = (role_router().await.unwrap(), role_router().await.unwrap());
    fleet::wait_for_models(&prefill).await;
    fleet::wait_for_models(&decode).await;
    let routers = PhaseRouters::new(&prefill.addr.to_string(), &decode.addr.to_string(), false);
    let coordinator = fleet::router_with(Vec::new(), DEFAULT_CONFIG_YAML, |o| {
        o.routers = Some(routers);
        o.trust = trust.clone();
    })
    .await
    .unwrap();
    // Long prompts split: prefill on the prefill router's pick, decode on the decode router's.
    for i in 0..5 {
        let r = send(
            &url(&coordinator),
            &[],
            &support::body(i * 10_000, 2_000, 4),
        )
        .await;
        assert_eq!(r.status, 200, "{}", r.body);
        assert_eq!(
            r.served(),
            ["split", "prefill-0", "decode-0"].map(String::from)
        );
    }
    let stats: Vec<_> = workers.iter().map(|w| w.stats()).collect();
    assert_eq!((stats[0].prefill_legs, stats[1].remote_decode_legs), (5, 5));
    assert_eq!(stats[1].pulls_served + stats[0].pulls_served, 5);
    // The token reached the routers (trusted: nothing dropped) and no engine saw it.
    for r in [&prefill, &decode] {
        let m = metrics(&url(r)).await;
        assert!(
            !m.contains("pdgate_untrusted_headers_dropped_total{"),
            "{m}"
        );
    }
    // A client at the prefill router with the profile and a probe, but no token: ordinary.
    let sneaky = [
        ("x-llm-d-epp-profile", "prefill"),
        ("prefer", "if-available"),
        ("x-llm-d-revision-decision-id", "d-1"),
    ];
    let r = send(&url(&prefill), &sneaky, &support::body(900_000, 8, 2)).await;
    assert_eq!(r.status, 200, "{}", r.body);
    // A wrong token is no token.
    let wrong = [
        ("x-llm-d-epp-profile", "decode"),
        ("x-pdgate-coordinator-token", "0123456789abcdef-test-tokeX"),
        ("prefer", "if-available"),
    ];
    let r = send(&url(&decode), &wrong, &support::body(800_000, 2_000, 2)).await;
    assert_eq!(r.status, 200, "not a 412 probe answer: {}", r.body);
    let m = metrics(&url(&prefill)).await;
    for h in [
        "x-llm-d-epp-profile",
        "prefer",
        "x-llm-d-revision-decision-id",
    ] {
        let series = format!(r#"pdgate_untrusted_headers_dropped_total{{header="{h}"}}"#);
        assert_eq!(metric(&m, &series), 1, "{series}");
    }
    let m = metrics(&url(&decode)).await;
    assert_eq!(
        metric(
            &m,
            r#"pdgate_untrusted_headers_dropped_total{header="prefer"}"#
        ),
        1
    );
}
