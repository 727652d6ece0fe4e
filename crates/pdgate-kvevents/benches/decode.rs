//! Decode throughput on the real capture's message shape: batches of vLLM 0.32 tagged
//! `BlockStored` events (one 32-token block each, every key the capture has) and of
//! positional ones, decoded from the 3 frames. Criterion's throughput is in events, so it
//! prints events per second on one core. Run: `cargo bench -p pdgate-kvevents --bench decode`.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use pdgate_kvevents::wire::{decode, encode, Encoding};
use pdgate_kvevents::{BlockStored, EventBatch, KvEvent};
use std::hint::black_box;

/// `n` events shaped like the capture's first message (block_size 32, GPU, group 0,
/// full_attention, extra_keys [nil], 12-bit token ids).
fn batch(n: usize) -> EventBatch {
    let events = (0..n as u64)
        .map(|i| {
            KvEvent::BlockStored(BlockStored {
                block_hashes: vec![0xac1d_c11f_894f_53a0 ^ i],
                parent_block_hash: Some(0xf9f1_5c9e_44bc_de07 ^ i),
                token_ids: (0..32)
                    .map(|t| ((i as u32 * 31 + t * 97) % 3900) + 100)
                    .collect(),
                block_size: 32,
                medium: Some("GPU".into()),
                group_idx: Some(0),
                kv_cache_spec_kind: Some("full_attention".into()),
                ..Default::default()
            })
        })
        .collect();
    EventBatch {
        seq: 6096,
        ts: 1_796_108_772.126_257_7,
        dp_rank: Some(0),
        events,
    }
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("decode_block_stored");
    for encoding in [Encoding::Tagged, Encoding::Positional] {
        for n in [1usize, 64] {
            let frames = encode(&batch(n), encoding, b"");
            group.throughput(Throughput::Elements(n as u64));
            group.bench_with_input(
                BenchmarkId::new(format!("{encoding:?}"), n),
                &frames,
                |b, f| b.iter(|| decode(black_box(&[&f[0], &f[1], &f[2]])).expect("decodes")),
            );
        }
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
