//! The scrape loop against real sockets (issue 26): endpoints whose `/metrics` goes
//! unanswered leave the scheduling candidates after `UNREADY_AFTER` scrapes and come back
//! when one is answered; `/v1/models` answers are kept as the few fields the router uses, and
//! one over a bound is refused, counted, and leaves the endpoint's list as it was.

use bytes::Bytes;
use http_body_util::Full;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use parking_lot::Mutex;
use pdgate_fleet::scrape::{self, client::ScrapeClient, health::UNREADY_AFTER, ScrapeObserver};
use pdgate_fleet::EndpointRegistry;
use pdgate_scheduler::config::DataLayer;
use pdgate_scheduler::Endpoint;
use serde_json::json;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A fake engine: `/metrics` answers one gauge, `/v1/models` whatever `models` holds; every
/// request path is counted.
struct Engine {
    models: Arc<Mutex<String>>,
    hits: Arc<Mutex<HashMap<String, usize>>>,
}

impl Engine {
    fn hits(&self, path: &str) -> usize {
        self.hits.lock().get(path).copied().unwrap_or(0)
    }
}

async fn engine_on(listener: tokio::net::TcpListener, models: String) -> Engine {
    let e = Engine {
        models: Arc::new(Mutex::new(models)),
        hits: Arc::default(),
    };
    let (models, hits) = (e.models.clone(), e.hits.clone());
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let (models, hits) = (models.clone(), hits.clone());
            let service = service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                let path = req.uri().path().to_string();
                *hits.lock().entry(path.clone()).or_default() += 1;
                let body = match path.as_str() {
                    "/metrics" => "vllm:num_requests_running{engine=\"0\"} 1\n".to_string(),
                    "/v1/models" => models.lock().clone(),
                    _ => String::new(),
                };
                async move {
                    Ok::<_, std::convert::Infallible>(hyper::Response::new(Full::new(Bytes::from(
                        body,
                    ))))
                }
            });
            tokio::spawn(async move {
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    e
}

async fn engine(models: &str) -> (String, Engine) {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap().to_string();
    (addr, engine_on(l, models.to_string()).await)
}

/// A loopback address nothing listens on.
async fn dead_address() -> String {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    l.local_addr().unwrap().to_string()
}

/// Counts failed scrapes per endpoint.
#[derive(Default)]
struct Failures(Mutex<HashMap<String, usize>>);

impl Failures {
    fn of(&self, name: &str) -> usize {
        self.0.lock().get(name).copied().unwrap_or(0)
    }
}

impl ScrapeObserver for Failures {
    fn scrape_failed(&self, endpoint: &str) {
        *self.0.lock().entry(endpoint.to_string()).or_default() += 1;
    }
    fn engine_restarted(&self, _: &str) {}
}

fn start(
    registry: &Arc<EndpointRegistry>,
    models_every: u32,
) -> (Arc<Failures>, tokio::task::JoinHandle<()>) {
    let failures = Arc::new(Failures::default());
    let settings = scrape::ScrapeSettings {
        interval: Duration::from_millis(20),
        timeout: Duration::from_millis(500),
        models_every,
        data: Arc::new(DataLayer::default()),
    };
    let client = ScrapeClient::new(Duration::from_millis(500));
    let task = scrape::start(registry.clone(), client, settings, failures.clone());
    (failures, task)
}

fn schedulable(r: &EndpointRegistry) -> Vec<(String, bool)> {
    (r.snapshot().endpoints.iter())
        .map(|e| (e.endpoint.name.clone(), e.endpoint.schedulable()))
        .collect()
}

fn row(name: &str, ok: bool) -> (String, bool) {
    (name.to_string(), ok)
}

/// Polls `done` every 5 ms for at most `limit`; panics naming `what`.
async fn until(limit: Duration, what: &str, mut done: impl FnMut() -> bool) -> Duration {
    let started = Instant::now();
    while !done() {
        assert!(started.elapsed() < limit, "{what}: not within {limit:?}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    started.elapsed()
}

const ONE_MODEL: &str = r#"{"object":"list","data":[{"id":"m","object":"model"}]}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_endpoints_leave_the_candidates_after_three_unanswered_scrapes_and_come_back() {
    let (a, _ea) = engine(ONE_MODEL).await;
    let (b, _eb) = engine(ONE_MODEL).await;
    let dead = [
        dead_address().await,
        dead_address().await,
        dead_address().await,
    ];
    let registry = Arc::new(EndpointRegistry::default());
    registry.apply(vec![
        Endpoint::new("a", &a, Default::default()),
        Endpoint::new("x", &dead[0], Default::default()),
        Endpoint::new("b", &b, Default::default()),
        Endpoint::new("y", &dead[1], Default::default()),
        Endpoint::new("z", &dead[2], Default::default()),
    ]);
    let (failures, task) = start(&registry, 25);
    // Whenever a dead endpoint is seen out of the candidates, it had UNREADY_AFTER failed
    // scrapes (the snapshot is read first: failures only grow).
    let took = until(Duration::from_secs(5), "dead endpoints out", || {
        let snap = schedulable(&registry);
        for (name, ok) in &snap[..] {
            if !ok {
                assert!(
                    failures.of(name) >= UNREADY_AFTER as usize,
                    "{name} out early"
                );
            }
        }
        snap == [
            row("a", true),
            row("x", false),
            row("b", true),
            row("y", false),
            row("z", false),
        ]
    })
    .await;
    eprintln!("dead endpoints out after {took:?}");
    assert_eq!((failures.of("a"), failures.of("b")), (0, 0));
    assert_eq!(registry.counters().unready_total(), 3);
    assert_eq!(registry.counters().ready_again_total(), 0);

    // x starts answering on its port: back as soon as a scrape of it is answered.
    let l = tokio::net::TcpListener::bind(&dead[0]).await.unwrap();
    let _ex = engine_on(l, ONE_MODEL.to_string()).await;
    let took = until(Duration::from_secs(10), "x back", || {
        schedulable(&registry)[1] == row("x", true)
    })
    .await;
    eprintln!("x back after {took:?}");
    assert_eq!(
        schedulable(&registry),
        [
            row("a", true),
            row("x", true),
            row("b", true),
            row("y", false),
            row("z", false),
        ]
    );
    assert_eq!(registry.counters().ready_again_total(), 1);
    assert_eq!(registry.counters().unready_total(), 3);
    task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_that_never_answers_stays_schedulable() {
    let dead = [dead_address().await, dead_address().await];
    let registry = Arc::new(EndpointRegistry::default());
    registry.apply(vec![
        Endpoint::new("x", &dead[0], Default::default()),
        Endpoint::new("y", &dead[1], Default::default()),
    ]);
    let (failures, task) = start(&registry, 25);
    until(Duration::from_secs(5), "4 failed scrapes each", || {
        failures.of("x") >= 4 && failures.of("y") >= 4
    })
    .await;
    // No endpoint would be left: all stay candidates (fail open), none counted out.
    assert_eq!(schedulable(&registry), [row("x", true), row("y", true)]);
    assert_eq!(registry.counters().unready_total(), 0);
    task.abort();
}

/// vLLM's answer for one model (with its `permission` list).
const VLLM_ANSWER: &str = r#"{"object":"list","data":[{"id":"tiny","object":"model","created":1795941674,"owned_by":"vllm","root":"/models/tiny","parent":null,"max_model_len":2048,"permission":[{"id":"modelperm-4c1f0e0a9b5e4d1c8e2f3a4b5c6d7e8f","object":"model_permission","created":1795941674,"allow_create_engine":false,"allow_sampling":true,"allow_logprobs":true,"allow_search_indices":false,"allow_view":true,"allow_fine_tuning":false,"organization":"*","group":null,"is_blocking":false}]}]}"#;

/// An answer listing `n` models `m0`, `m1`, ….
fn answer(n: usize) -> String {
    let data: Vec<String> = (0..n).map(|i| format!(r#"{{"id":"m{i}"}}"#)).collect();
    format!(r#"{{"object":"list","data":[{}]}}"#, data.join(","))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn model_lists_keep_few_fields_and_an_over_cap_answer_leaves_the_list_as_it_was() {
    let (a, ea) = engine(VLLM_ANSWER).await;
    let registry = Arc::new(EndpointRegistry::default());
    registry.apply(vec![Endpoint::new("a", &a, Default::default())]);
    let (_, task) = start(&registry, 1);
    let load = registry.snapshot().endpoints[0].load.clone();
    until(Duration::from_secs(5), "a's models", || {
        load.models().is_some()
    })
    .await;
    assert_eq!(*load.models().unwrap(), ["tiny"]);
    assert_eq!(
        *load.model_cards().unwrap(),
        [
            json!({"id": "tiny", "object": "model", "created": 1795941674_u64,
            "owned_by": "vllm", "root": "/models/tiny", "parent": null, "max_model_len": 2048})
        ]
    );
    assert_eq!(
        scrape::merge_model_cards(&registry.snapshot()),
        *load.model_cards().unwrap()
    );
    // 257 models (over the count), then 300 KB (over the bytes): refused, counted, the
    // endpoint keeps "tiny".
    *ea.models.lock() = answer(257);
    until(Duration::from_secs(5), "refused", || {
        registry.counters().models_refused_total() >= 1
    })
    .await;
    *ea.models.lock() = format!(r#"{{"data":[{{"id":"{}"}}]}}"#, "x".repeat(300_000));
    let seen = registry.counters().models_refused_total();
    until(Duration::from_secs(5), "refused again", || {
        registry.counters().models_refused_total() >= seen + 2
    })
    .await;
    assert_eq!(*load.models().unwrap(), ["tiny"]);
    // Within the bounds again: used.
    *ea.models.lock() = answer(256);
    until(Duration::from_secs(5), "256 models", || {
        load.models().unwrap().len() == 256
    })
    .await;
    task.abort();

    // An endpoint that never had a list and answers over a bound stays unknown (any model
    // may be scheduled there) and is not asked again every tick, only every models_every.
    let (c, ec) = engine(&answer(300)).await;
    let registry = Arc::new(EndpointRegistry::default());
    registry.apply(vec![Endpoint::new("c", &c, Default::default())]);
    let (_, task) = start(&registry, 1_000);
    let load = registry.snapshot().endpoints[0].load.clone();
    until(Duration::from_secs(5), "20 scrapes of c", || {
        ec.hits("/metrics") >= 20
    })
    .await;
    assert_eq!(ec.hits("/v1/models"), 1);
    assert_eq!(registry.counters().models_refused_total(), 1);
    assert!(load.models().is_none() && load.serves("anything"));
    task.abort();
}

/// A server answering every path with `status`.
async fn answering(status: u16) -> String {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        while let Ok((stream, _)) = l.accept().await {
            let service = service_fn(
                move |_req: hyper::Request<hyper::body::Incoming>| async move {
                    let mut r = hyper::Response::new(Full::new(Bytes::new()));
                    *r.status_mut() = hyper::StatusCode::from_u16(status).unwrap();
                    Ok::<_, std::convert::Infallible>(r)
                },
            );
            tokio::spawn(async move {
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_metrics_endpoint_answering_500_leaves_the_candidates_and_404_stays() {
    // Found by the adversarial try of issue 26: an engine whose /metrics kept answering 500
    // showed pdgate_endpoint_up 0 and still took half the picks.
    let (broken, silent) = (answering(500).await, answering(404).await);
    let (live, _engine) = engine(ONE_MODEL).await;
    let registry = Arc::new(EndpointRegistry::default());
    registry.apply(vec![
        Endpoint::new("broken", &broken, Default::default()),
        Endpoint::new("no-metrics", &silent, Default::default()),
        Endpoint::new("live", &live, Default::default()),
    ]);
    let (_failures, task) = start(&registry, 25);
    until(Duration::from_secs(5), "the 500 endpoint out", || {
        schedulable(&registry)
            == [
                row("broken", false),
                row("no-metrics", true),
                row("live", true),
            ]
    })
    .await;
    assert_eq!(registry.counters().unready_total(), 1);
    task.abort();
}
