//! Reorder engine throughput: 512 senders, thousands of messages buffered, insert + deliver.
//!
//! `cargo bench -p onepipe-proto --bench reorder`. Compares the per-sender k-way merge against a
//! single binary heap over every message (the design the module doc argues against).

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use onepipe_proto::reorder::{OrderKey, ReorderBuffer};
use onepipe_proto::{ProcId, Psn, Timestamp};
use std::cmp::Reverse;
use std::collections::BinaryHeap;

const SENDERS: u32 = 512;
/// Messages per sender between barrier advances: 512 * 16 = 8,192 buffered at the barrier.
const PER_SENDER: u32 = 16;
const ROUNDS: u32 = 8;

/// Arrival order: senders interleaved, each sender's timestamps increasing; timestamps jittered
/// across senders as clock skew and path delays make them.
fn arrivals() -> Vec<OrderKey> {
    let mut x: u64 = 0x1234_5678;
    let mut out = Vec::new();
    for round in 0..ROUNDS * PER_SENDER {
        for s in 0..SENDERS {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            out.push(OrderKey {
                ts: Timestamp::new(round as u64 * 1000 + (x % 997)),
                src: ProcId(s),
                psn: Psn(round),
            });
        }
    }
    out
}

fn bench(c: &mut Criterion) {
    let keys = arrivals();
    let mut g = c.benchmark_group("reorder");
    g.sample_size(20);
    g.throughput(Throughput::Elements(keys.len() as u64));
    let batch = (SENDERS * PER_SENDER) as usize;
    g.bench_function("kway_merge_512_senders", |b| {
        b.iter_batched(
            || ReorderBuffer::<u64>::new(SENDERS, 1 << 20),
            |mut buf| {
                let mut delivered = 0u64;
                for (i, chunk) in keys.chunks(batch).enumerate() {
                    for k in chunk {
                        buf.insert(*k, 0).unwrap();
                    }
                    // The barrier trails arrivals by one round: ~batch messages stay buffered.
                    let bar = Timestamp::new(
                        (i as u64 * PER_SENDER as u64).saturating_sub(PER_SENDER as u64) * 1000,
                    );
                    while let Some((_, v)) = buf.pop_below(bar) {
                        delivered += v + 1;
                    }
                }
                while let Some((_, v)) = buf.pop_below(Timestamp::new(u64::MAX >> 20)) {
                    delivered += v + 1;
                }
                delivered
            },
            BatchSize::LargeInput,
        )
    });
    g.bench_function("single_heap_512_senders", |b| {
        b.iter_batched(
            BinaryHeap::<Reverse<OrderKey>>::new,
            |mut heap| {
                let mut delivered = 0u64;
                for (i, chunk) in keys.chunks(batch).enumerate() {
                    for k in chunk {
                        heap.push(Reverse(*k));
                    }
                    let bar = Timestamp::new(
                        (i as u64 * PER_SENDER as u64).saturating_sub(PER_SENDER as u64) * 1000,
                    );
                    while heap.peek().is_some_and(|t| t.0.ts < bar) {
                        heap.pop();
                        delivered += 1;
                    }
                }
                delivered + heap.len() as u64
            },
            BatchSize::LargeInput,
        )
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
