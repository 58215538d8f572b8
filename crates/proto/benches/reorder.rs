//! Reorder engine throughput: 512 senders, thousands of messages buffered, insert + deliver.
//!
//! `cargo bench -p onepipe-proto --bench reorder`. Steady state: each step every sender's next
//! message arrives (senders interleaved, timestamps jittered across senders as clock skew and path
//! delays make them, in order per sender), and the barrier advances by one round, trailing the
//! newest arrivals by `lag` rounds — so `lag × 512` messages stay buffered. Compares the
//! per-sender k-way merge against one binary heap over every message.

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use onepipe_proto::reorder::{OrderKey, ReorderBuffer};
use onepipe_proto::{ProcId, Psn, Timestamp};
use std::cmp::Reverse;
use std::collections::BinaryHeap;

const SENDERS: u32 = 512;
const ROUND_NS: u64 = 1000;
const STEPS: u32 = 200;

/// Arrivals of `rounds` rounds: senders interleaved, timestamps jittered within each round.
fn arrivals(rounds: u32) -> Vec<OrderKey> {
    let mut x: u64 = 0x1234_5678;
    let mut out = Vec::with_capacity((rounds * SENDERS) as usize);
    for round in 0..rounds {
        for s in 0..SENDERS {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            out.push(OrderKey {
                ts: Timestamp::new(round as u64 * ROUND_NS + (x % 997)),
                src: ProcId(s),
                psn: Psn(round),
            });
        }
    }
    out
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("reorder");
    g.sample_size(20);
    for lag in [10u32, 100] {
        let keys = arrivals(lag + STEPS);
        let (warm, steady) = keys.split_at((lag * SENDERS) as usize);
        g.throughput(Throughput::Elements(steady.len() as u64));
        let barrier = |step: usize| Timestamp::new((step as u64 + 1) * ROUND_NS);
        g.bench_function(
            format!("kway_merge_512_senders_{}_buffered", lag * SENDERS),
            |b| {
                b.iter_batched(
                    || {
                        let mut buf = ReorderBuffer::<u64>::new(SENDERS, 1 << 20);
                        for k in warm {
                            buf.insert(*k, 0).unwrap();
                        }
                        buf
                    },
                    |mut buf| {
                        let mut delivered = 0u64;
                        for (step, round) in steady.chunks(SENDERS as usize).enumerate() {
                            for k in round {
                                buf.insert(*k, 1).unwrap();
                            }
                            while let Some((_, v)) = buf.pop_below(barrier(step)) {
                                delivered += v + 1;
                            }
                        }
                        delivered
                    },
                    BatchSize::LargeInput,
                )
            },
        );
        g.bench_function(
            format!("single_heap_512_senders_{}_buffered", lag * SENDERS),
            |b| {
                b.iter_batched(
                    || warm.iter().map(|k| Reverse(*k)).collect::<BinaryHeap<_>>(),
                    |mut heap| {
                        let mut delivered = 0u64;
                        for (step, round) in steady.chunks(SENDERS as usize).enumerate() {
                            for k in round {
                                heap.push(Reverse(*k));
                            }
                            while heap.peek().is_some_and(|t| t.0.ts < barrier(step)) {
                                heap.pop();
                                delivered += 1;
                            }
                        }
                        delivered
                    },
                    BatchSize::LargeInput,
                )
            },
        );
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
