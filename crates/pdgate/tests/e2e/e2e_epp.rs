//! The ext_proc front end (`pdgate epp`) driven as Envoy drives it (`support::envoy`): real
//! gRPC, the request's and the response's message sequences, and the destination called for
//! real (simulator workers) in between.

use crate::support;

use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::time::Duration;
use support::envoy::{self, aggregated, completion, list, string, EppUnderTest, JSON};
use support::{endpoints, member, sim_config, sim_workers, wait_until};

/// Waits until every endpoint's model list was scraped.
async fn models_known(e: &EppUnderTest) {
    wait_until(Duration::from_secs(5), "model lists scraped", || {
        let snap = e.epp.registry.snapshot();
        snap.endpoints.iter().all(|s| s.load.models().is_some())
    })
    .await;
}

fn addresses(workers: &[pdgate_sim::WorkerHandle]) -> BTreeMap<String, String> {
    workers
        .iter()
        .map(|w| (w.addr().to_string(), w.name().to_string()))
        .collect()
}

#[tokio::test]
async fn chat_and_completions_stream_and_not_go_to_the_destination_and_back() {
    let (workers, e) = aggregated(2).await;
    let by_addr = addresses(&workers);
    let chat = |stream: bool| {
        json!({"model": "pdgate-sim", "stream": stream, "max_tokens": 3,
               "messages": [{"role": "user", "content": "hello there, how are you"}]})
    };
    let cases = [
        ("/v1/completions", completion(0, 40, false), false),
        ("/v1/completions", completion(100, 40, true), true),
        ("/v1/chat/completions", chat(false), false),
        ("/v1/chat/completions", chat(true), true),
    ];
    for (path, body, stream) in cases {
        let bytes = serde_json::to_vec(&body).unwrap();
        let mut s = e.stream().await;
        let r = s.request(path, &[JSON], &bytes, 100, None).await;
        assert_eq!(r.immediate, None, "{path}: {:?}", r.immediate_json());
        let dest = r.destination();
        assert!(by_addr.contains_key(&dest), "{path}: destination {dest}");
        // Header and metadata carry the same list (the pick, then its fallback).
        let header = &r.set["x-gateway-destination-endpoint"];
        assert_eq!(r.metadata_destination.as_deref(), Some(header.as_str()));
        let listed: Vec<&str> = header.split(',').collect();
        assert_eq!(listed.len(), 2, "{header}");
        assert!(listed.iter().all(|a| by_addr.contains_key(*a)) && listed[0] != listed[1]);
        assert!(r.clear_route_cache);
        assert_eq!(r.set["content-length"], bytes.len().to_string());
        assert_eq!(r.body(), bytes, "{path}: the body comes back byte for byte");
        assert_eq!(e.in_flight(&dest), 1, "booked at pick time");
        let up = s.call_destination(&r, path, &[JSON], Some(&dest)).await;
        assert_eq!(up.status, 200, "{path}");
        assert_eq!(up.headers["x-sim-worker"], by_addr[&dest].as_str());
        let text = String::from_utf8(up.body).unwrap();
        if stream {
            assert!(
                text.starts_with("data: ") && text.ends_with("data: [DONE]\n\n"),
                "{text}"
            );
        } else {
            let v: Value = serde_json::from_str(&text).unwrap();
            assert!(v["usage"]["prompt_tokens"].as_u64().unwrap() > 0, "{v}");
        }
        assert_eq!(e.in_flight(&dest), 0, "{path}: released at end of stream");
    }
    // A header-only request (GET /v1/models) goes to a ready endpoint at once, unbooked.
    let mut s = e.stream().await;
    let r = s.request("/v1/models", &[], b"", 1, None).await;
    assert!(by_addr.contains_key(&r.destination()), "{r:?}");
    assert!(r.chunks.is_empty());
    let text = e.epp.metrics.render();
    let text = String::from_utf8(text).unwrap();
    assert_eq!(
        support::metric(&text, "pdgate_epp_picks_total{kind=\"scheduled\"}"),
        4
    );
    assert_eq!(
        support::metric(&text, "pdgate_epp_picks_total{kind=\"random\"}"),
        1
    );
    assert_eq!(
        support::metric(
            &text,
            "pdgate_requests_total{api=\"ext_proc\",status=\"200\"}"
        ),
        4
    );
    // Usage read on the way back from the three answers that carry it (both non-streamed
    // ones, and the completions stream with `include_usage`): 40 + 40 + the chat prompt in,
    // at most 4 + 4 + 3 out.
    let tokens = |kind: &str| {
        support::metric(
            &text,
            &format!("pdgate_epp_usage_tokens_total{{kind=\"{kind}\"}}"),
        )
    };
    assert!(tokens("prompt") > 80, "{}", tokens("prompt"));
    assert!(
        (3..=11).contains(&tokens("completion")),
        "{}",
        tokens("completion")
    );
}

#[tokio::test]
async fn a_200_kb_body_comes_back_in_chunks_of_at_most_62000_bytes() {
    let (_workers, e) = aggregated(1).await;
    let prompt = "lorem ipsum dolor ".repeat(200_000 / 18);
    let bytes =
        serde_json::to_vec(&json!({"model": "pdgate-sim", "prompt": prompt, "max_tokens": 1}))
            .unwrap();
    assert!(bytes.len() >= 200_000, "{}", bytes.len());
    let mut s = e.stream().await;
    let r = s
        .request("/v1/completions", &[JSON], &bytes, 16_384, None)
        .await;
    assert_eq!(r.immediate, None);
    let sizes: Vec<usize> = r.chunks.iter().map(Vec::len).collect();
    assert!(
        sizes.len() >= 4 && sizes.iter().all(|n| *n <= 62_000),
        "{sizes:?}"
    );
    assert_eq!(r.body(), bytes);
    let up = s
        .call_destination(&r, "/v1/completions", &[JSON], None)
        .await;
    assert_eq!(up.status, 200);
}

#[tokio::test]
async fn the_subset_hint_restricts_candidates_and_an_empty_one_answers_503() {
    let (workers, e) = aggregated(3).await;
    let addrs: Vec<String> = workers.iter().map(|w| w.addr().to_string()).collect();
    let body = serde_json::to_vec(&completion(0, 40, false)).unwrap();
    for i in 0..8 {
        let mut s = e.stream().await;
        let r = s
            .request(
                "/v1/completions",
                &[JSON],
                &body,
                1000,
                Some(list(&[&addrs[1]])),
            )
            .await;
        assert_eq!(
            r.set["x-gateway-destination-endpoint"], addrs[1],
            "request {i}: one candidate, no fallback outside the subset"
        );
        drop(s);
        let mut s = e.stream().await;
        let two = format!("{}, {}", addrs[0], addrs[2]);
        let r = s
            .request("/v1/completions", &[JSON], &body, 1000, Some(string(&two)))
            .await;
        let d = r.destination();
        assert!(d == addrs[0] || d == addrs[2], "request {i}: {d}");
        assert!(!r.set["x-gateway-destination-endpoint"].contains(&addrs[1]));
    }
    for subset in [list(&[]), string(""), list(&["10.255.0.1:8000"])] {
        let mut s = e.stream().await;
        let r = s
            .request("/v1/completions", &[JSON], &body, 1000, Some(subset))
            .await;
        assert_eq!(r.immediate, Some(503));
        let err = r.immediate_json();
        assert!(
            err["error"]["message"].as_str().unwrap().contains("subset"),
            "{err}"
        );
        assert_eq!(r.immediate_headers["content-type"], "application/json");
    }
    wait_until(
        Duration::from_secs(2),
        "streams closed and bookings released",
        || addrs.iter().all(|a| e.in_flight(a) == 0),
    )
    .await;
}

#[tokio::test]
async fn client_mistakes_are_immediate_responses_with_openai_bodies() {
    let (_workers, e) = aggregated(1).await;
    models_known(&e).await;
    let cases: [(&[u8], u16, &str); 3] = [
        (
            br#"{"model": "no-such-model", "prompt": "hi"}"#,
            404,
            "no-such-model",
        ),
        (
            br#"{"model": "pdgate-sim", "prompt": "hi""#,
            400,
            "not valid JSON",
        ),
        (br#"{"prompt": "hi"}"#, 400, "model"),
    ];
    for (body, status, needle) in cases {
        let mut s = e.stream().await;
        let r = s.request("/v1/completions", &[JSON], body, 7, None).await;
        assert_eq!(
            r.immediate,
            Some(status),
            "{}",
            String::from_utf8_lossy(body)
        );
        let err = r.immediate_json();
        assert_eq!(err["error"]["code"], status, "{err}");
        assert!(
            err["error"]["message"].as_str().unwrap().contains(needle),
            "{err}"
        );
    }
    // A client's router-owned headers are removed before the request goes upstream.
    let body = serde_json::to_vec(&completion(0, 40, false)).unwrap();
    let mut s = e.stream().await;
    let forged = [
        JSON,
        ("x-prefiller-host-port", "10.0.0.9:1"),
        ("x-llm-d-revision-decision-id", "x"),
    ];
    let r = s
        .request("/v1/completions", &forged, &body, 1000, None)
        .await;
    assert!(
        r.removed.contains(&"x-prefiller-host-port".to_string()),
        "{:?}",
        r.removed
    );
    assert!(r
        .removed
        .contains(&"x-llm-d-revision-decision-id".to_string()));
    assert!(!r.set.contains_key("x-prefiller-host-port"));
}

/// A request routed on a new stream, and an endpoint other than its pick; checks the pick is
/// booked and the other not.
async fn routed_with_other(
    e: &EppUnderTest,
    addrs: &[String],
    body: &[u8],
) -> (envoy::Stream, envoy::Routing, String) {
    let mut s = e.stream().await;
    let r = s
        .request("/v1/completions", &[JSON], body, 1000, None)
        .await;
    let picked = r.destination();
    let other = addrs.iter().find(|a| **a != picked).unwrap().clone();
    assert_eq!((e.in_flight(&picked), e.in_flight(&other)), (1, 0));
    (s, r, other)
}

#[tokio::test]
async fn the_booking_follows_the_endpoint_that_served_and_a_reset_releases_it() {
    let (workers, e) = aggregated(2).await;
    let addrs: Vec<String> = workers.iter().map(|w| w.addr().to_string()).collect();
    let body = serde_json::to_vec(&completion(0, 40, false)).unwrap();
    let (mut s, mut served, other) = routed_with_other(&e, &addrs, &body).await;
    // Envoy fell back: it called the other endpoint, and the served metadata names it.
    served
        .set
        .insert("x-gateway-destination-endpoint".into(), other.clone());
    let up = s
        .call_destination(&served, "/v1/completions", &[JSON], Some(&other))
        .await;
    assert_eq!(up.status, 200);
    let text = String::from_utf8(e.epp.metrics.render()).unwrap();
    assert_eq!(
        support::metric(&text, "pdgate_epp_fallbacks_total{outcome=\"moved\"}"),
        1
    );
    assert_eq!((e.in_flight(&addrs[0]), e.in_flight(&addrs[1])), (0, 0));

    // Served elsewhere, seen mid-response: the other endpoint holds the booking.
    let (mut s, r, other) = routed_with_other(&e, &addrs, &body).await;
    let picked = r.destination();
    s.send(
        envoy_types::pb::envoy::service::ext_proc::v3::processing_request::Request::ResponseHeaders(
            envoy_types::pb::envoy::service::ext_proc::v3::HttpHeaders {
                headers: Some(envoy::envoy_headers(&[(":status", "200"), JSON])),
                ..Default::default()
            },
        ),
        Some(envoy::metadata(
            "envoy.lb",
            "x-gateway-destination-endpoint-served",
            string(&other),
        )),
    )
    .await;
    s.recv().await;
    assert_eq!((e.in_flight(&picked), e.in_flight(&other)), (0, 1));
    // Envoy resets the stream mid-response: the booking is released.
    drop(s);
    wait_until(Duration::from_secs(1), "booking released on reset", || {
        e.in_flight(&other) == 0
    })
    .await;
    // Reset before any response: released too.
    let mut s = e.stream().await;
    let r = s
        .request("/v1/completions", &[JSON], &body, 1000, None)
        .await;
    assert_eq!(e.in_flight(&r.destination()), 1);
    drop(s);
    wait_until(Duration::from_secs(1), "booking released on reset", || {
        e.in_flight(&r.destination()) == 0
    })
    .await;
    let text = String::from_utf8(e.epp.metrics.render()).unwrap();
    assert_eq!(support::metric(&text, "pdgate_epp_stream_resets_total"), 2);
}

#[tokio::test]
async fn a_split_names_the_prefiller_and_the_screener_keeps_one_revision() {
    let specs = vec![
        member("a-p0", "a", "prefill"),
        member("a-d0", "a", "decode"),
        member("b-p0", "b", "prefill"),
        member("b-d0", "b", "decode"),
    ];
    let workers = sim_workers(specs, sim_config(50.0)).await;
    let revision: BTreeMap<String, String> = workers
        .iter()
        .map(|w| (w.addr().to_string(), w.spec().revision.clone().unwrap()))
        .collect();
    let role: BTreeMap<String, String> = workers
        .iter()
        .map(|w| (w.addr().to_string(), w.role().to_string()))
        .collect();
    let e = envoy::epp(endpoints(&workers), &support::screened_config()).await;
    let mut seen = BTreeMap::new();
    for i in 0..24u32 {
        let body = serde_json::to_vec(&completion(1000 * i, 200, true)).unwrap();
        let mut s = e.stream().await;
        let r = s
            .request("/v1/completions", &[JSON], &body, 1000, None)
            .await;
        assert_eq!(r.immediate, None, "{:?}", r.immediate_json());
        let (decode, prefill) = (r.destination(), r.set["x-prefiller-host-port"].clone());
        assert_eq!(
            (role[&decode].as_str(), role[&prefill].as_str()),
            ("decode", "prefill")
        );
        assert_eq!(
            revision[&decode], revision[&prefill],
            "request {i}: one revision for both phases"
        );
        // Fallbacks never leave the revision.
        for a in r.set["x-gateway-destination-endpoint"].split(',') {
            assert_eq!(revision[a], revision[&decode]);
        }
        assert_eq!((e.in_flight(&prefill), e.in_flight(&decode)), (1, 1));
        let sse = vec![b"data: {\"choices\":[]}\n\ndata: [DONE]\n\n".to_vec()];
        let ct = vec![("content-type".to_string(), "text/event-stream".to_string())];
        let (set, back) = s.respond(200, &ct, &sse, Some(&decode)).await;
        assert_eq!(back, sse[0]);
        assert_eq!(
            set.get("x-llm-d-disagg-revision"),
            Some(&revision[&decode]),
            "the served revision is stamped"
        );
        assert_eq!((e.in_flight(&prefill), e.in_flight(&decode)), (0, 0));
        *seen.entry(revision[&decode].clone()).or_insert(0) += 1;
    }
    assert_eq!(
        seen.len(),
        2,
        "both covered revisions get traffic: {seen:?}"
    );
    let text = String::from_utf8(e.epp.metrics.render()).unwrap();
    assert_eq!(
        support::metric(&text, "pdgate_epp_picks_total{kind=\"split\"}"),
        24
    );
}

#[tokio::test]
async fn health_services_answer_and_readiness_follows_draining() {
    let (_workers, e) = aggregated(1).await;
    let serving = 1; // grpc.health.v1 SERVING
    for service in [
        "liveness",
        "readiness",
        "envoy.service.ext_proc.v3.ExternalProcessor",
    ] {
        let status = envoy::health_becomes(e.health, service, serving).await;
        assert_eq!(status, Ok(serving), "{service}");
    }
    let unknown = envoy::health_status(e.health, "no-such-service").await;
    assert_eq!(unknown, Err(tonic::Code::NotFound));
    e.epp.drain();
    let not_serving = 2;
    let status = envoy::health_becomes(e.health, "readiness", not_serving).await;
    assert_eq!(status, Ok(not_serving), "NOT_SERVING while draining");
    assert_eq!(
        envoy::health_status(e.health, "liveness").await,
        Ok(serving)
    );
}
