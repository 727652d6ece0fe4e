//! The precise prefix index: KV events applied per second on one core (each a `BlockStored`
//! of one 32-token engine block, i.e. two 16-token canonical blocks, chained on the previous
//! one), and the pick cost over 64 and 512 endpoints with a precise index against the same
//! profile over an approximate index (prefix-cache + queue + kv-cache-utilization scorers,
//! max-score picker; a 32k-token prompt sharing 16k tokens with what every endpoint holds).
//! Run: `cargo bench -p pdgate-scheduler --bench precise`.

use criterion::{criterion_group, criterion_main, BatchSize, BenchmarkId, Criterion, Throughput};
use pdgate_api::kv_events::{BlockStored, EventBatch, KvEvent};
use pdgate_api::PromptInput;
use pdgate_scheduler::prefix::precise::{KvEventsConfig, PreciseSettings};
use pdgate_scheduler::prefix::{BlockHasher, PreciseIndex};
use pdgate_scheduler::{
    Endpoint, EndpointLoad, EndpointState, Scheduler, SchedulingRequest, Snapshot,
};
use std::hint::black_box;
use std::sync::Arc;

fn endpoint(i: usize) -> Arc<EndpointState> {
    let load = Arc::new(EndpointLoad::default());
    load.set_scraped(
        Some((i % 7) as f64),
        Some((i % 3) as f64),
        Some((i % 10) as f64 / 10.0),
    );
    load.set_models(vec!["m".into()]);
    Arc::new(EndpointState {
        endpoint: Endpoint::new(
            format!("ep-{i}"),
            format!("10.0.{}.{}:8000", i / 250, i % 250),
            Default::default(),
        ),
        load,
    })
}

/// One event per batch entry: a `BlockStored` of one 32-token block, engine hash `h`,
/// parent `h - 1` except every 64th block, which starts a prompt.
fn event(h: u64) -> KvEvent {
    let base = h as u32;
    KvEvent::BlockStored(BlockStored {
        block_hashes: vec![h],
        parent_block_hash: (!h.is_multiple_of(64)).then(|| h - 1),
        token_ids: (0..32)
            .map(|t| base.wrapping_mul(2654435761).wrapping_add(t))
            .collect(),
        block_size: 32,
        ..BlockStored::default()
    })
}

fn bench_ingest(c: &mut Criterion) {
    const EVENTS: u64 = 4096;
    let mut group = c.benchmark_group("precise_ingest");
    group.throughput(Throughput::Elements(EVENTS));
    let index = PreciseIndex::new(
        0,
        PreciseSettings {
            hasher: BlockHasher {
                block_tokens: 16,
                max_blocks: 1024,
            },
            capacity_per_endpoint: 262_144,
            speculative_ttl_ms: None,
            events: KvEventsConfig::default(),
        },
    );
    let ep = endpoint(0);
    let mut next = 0u64;
    group.bench_function("block_stored_32_tokens", |b| {
        b.iter_batched(
            || {
                let events = (next..next + EVENTS).map(event).collect();
                next += EVENTS;
                EventBatch {
                    seq: next,
                    ts: 0.0,
                    dp_rank: None,
                    events,
                }
            },
            |batch| black_box(index.apply_for_model(&ep, Some("m"), &batch, 0)),
            BatchSize::LargeInput,
        )
    });
    group.finish();
}

const PROFILE: &str = "
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: prefix-cache-scorer
    weight: 3
  - pluginRef: queue-scorer
    weight: 2
  - pluginRef: kv-cache-utilization-scorer
    weight: 2
  - pluginRef: max-score-picker
";

fn prompt(variant: u32, shared: u32, len: u32) -> Vec<u32> {
    (0..len)
        .map(|t| {
            if t < shared {
                t
            } else {
                t.wrapping_mul(31).wrapping_add(variant)
            }
        })
        .collect()
}

fn bench_pick(c: &mut Criterion) {
    let mut group = c.benchmark_group("pick_32k_prompt_precise_vs_approx");
    let precise_yaml = format!(
        "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:
- type: precise-prefix-cache-producer
- type: prefix-cache-scorer
  parameters:
    prefixMatchInfoProducerName: precise-prefix-cache-producer
- type: queue-scorer
- type: kv-cache-utilization-scorer
- type: max-score-picker
{PROFILE}"
    );
    let approx_yaml = format!(
        "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:
- type: approx-prefix-cache-producer
  parameters:
    maxPrefixBlocksToMatch: 1024
- type: prefix-cache-scorer
- type: queue-scorer
- type: kv-cache-utilization-scorer
- type: max-score-picker
{PROFILE}"
    );
    for n in [64usize, 512] {
        let snapshot = Snapshot {
            endpoints: (0..n).map(endpoint).collect(),
            version: 1,
        };
        let precise = Scheduler::from_yaml(&precise_yaml, "precise").expect("loads");
        let approx = Scheduler::from_yaml(&approx_yaml, "approx").expect("loads");
        let index = precise.kv_event_indexes()[0].index.clone();
        // Warm: every endpoint's engine holds the shared 16k tokens plus 1k of its own.
        for (i, e) in snapshot.endpoints.iter().enumerate() {
            let t = prompt(i as u32, 16_384, 17_408);
            let stored = BlockStored {
                block_hashes: (0..t.len() as u64 / 32).map(|b| b + 1).collect(),
                token_ids: t.clone(),
                block_size: 32,
                ..BlockStored::default()
            };
            let batch = EventBatch {
                seq: 1,
                ts: 0.0,
                dp_rank: None,
                events: vec![KvEvent::BlockStored(stored)],
            };
            index.apply(e, &batch, 0);
            let p = PromptInput::Tokens(t);
            let req = SchedulingRequest::new("warm", "m", &p);
            let r = approx.schedule(&req, &snapshot).expect("warm-up pick");
            approx.response_received(&r.decode, 200);
        }
        let p = PromptInput::Tokens(prompt(1_000_000, 16_384, 32_768));
        for (name, s) in [("precise", &precise), ("approx", &approx)] {
            group.bench_with_input(BenchmarkId::new(name, n), &n, |b, _| {
                b.iter(|| {
                    let req = SchedulingRequest::new("r", "m", &p);
                    drop(black_box(s.schedule(&req, &snapshot).expect("pick")));
                })
            });
        }
    }
    group.finish();
}

criterion_group!(benches, bench_ingest, bench_pick);
criterion_main!(benches);
