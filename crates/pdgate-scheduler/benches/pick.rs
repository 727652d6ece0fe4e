//! Scheduling cost of one request through the built-in P/D config (prefill and decode
//! profiles: role filters, prefix-cache + queue + kv-cache-utilization scorers, max-score
//! picker, prefix-based P/D decider) over 8, 64 and 512 endpoints, with a 32k-token prompt
//! and a warm prefix index: the pick alone, and the pick plus both phases' response hooks
//! (where the prefix producer records). Run: `cargo bench -p pdgate-scheduler --bench pick`.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use pdgate_api::PromptInput;
use pdgate_scheduler::{
    Endpoint, EndpointLoad, EndpointState, Scheduler, SchedulingRequest, Snapshot,
    DEFAULT_CONFIG_YAML,
};
use std::collections::BTreeMap;
use std::hint::black_box;
use std::sync::Arc;

/// `n` endpoints, a quarter prefill and the rest decode, with varied scraped load.
fn fleet(n: usize) -> Snapshot {
    let endpoints = (0..n)
        .map(|i| {
            let role = if i % 4 == 0 { "prefill" } else { "decode" };
            let labels = BTreeMap::from([("llm-d.ai/role".to_string(), role.to_string())]);
            let load = Arc::new(EndpointLoad::default());
            load.set_scraped(
                Some((i % 7) as f64),
                Some((i % 3) as f64),
                Some((i % 10) as f64 / 10.0),
            );
            Arc::new(EndpointState {
                endpoint: Endpoint::new(
                    format!("ep-{i}"),
                    format!("10.0.{}.{}:8000", i / 250, i % 250),
                    labels,
                ),
                load,
            })
        })
        .collect();
    Snapshot {
        endpoints,
        version: 1,
    }
}

/// A 32,768-token prompt whose first `shared` tokens are common to every variant.
fn prompt(variant: u32, shared: u32) -> PromptInput {
    PromptInput::Tokens(
        (0..32_768u32)
            .map(|t| {
                if t < shared {
                    t
                } else {
                    t.wrapping_mul(31).wrapping_add(variant)
                }
            })
            .collect(),
    )
}

fn bench_pick(c: &mut Criterion) {
    let mut group = c.benchmark_group("schedule_pd_32k_prompt");
    for n in [8usize, 64, 512] {
        let scheduler =
            Scheduler::from_yaml(DEFAULT_CONFIG_YAML, "built-in").expect("built-in config loads");
        let snapshot = fleet(n);
        // Warm the prefix index: many prompts sharing a 16k-token prefix, spread over the fleet.
        for v in 0..(4 * n as u32) {
            let p = prompt(v, 16_384);
            let req = SchedulingRequest::new("warm", "m", &p);
            let r = scheduler.schedule(&req, &snapshot).expect("warm-up pick");
            // The engines answer: the producer records the blocks where they now live.
            scheduler.response_received(&r.decode, 200);
            if let Some(prefill) = &r.prefill {
                scheduler.response_received(prefill, 200);
            }
        }
        let p = prompt(1_000_000, 16_384);
        group.bench_with_input(BenchmarkId::new("pick", n), &n, |b, _| {
            b.iter(|| {
                let req = SchedulingRequest::new("r", "m", &p);
                // Dropping the result releases the in-flight bookings, as a finished request does.
                drop(black_box(
                    scheduler.schedule(&req, &snapshot).expect("pick"),
                ));
            })
        });
        // The whole per-request scheduler cost: the pick, then the response hooks of both
        // phases (the producer records the prompt's blocks on each endpoint that answered).
        group.bench_with_input(BenchmarkId::new("pick_and_record", n), &n, |b, _| {
            b.iter(|| {
                let req = SchedulingRequest::new("r", "m", &p);
                let r = scheduler.schedule(&req, &snapshot).expect("pick");
                black_box(scheduler.response_received(&r.decode, 200));
                if let Some(prefill) = &r.prefill {
                    black_box(scheduler.response_received(prefill, 200));
                }
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench_pick);
criterion_main!(benches);
