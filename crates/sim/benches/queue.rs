//! Event-queue throughput under the classic "hold model".
//!
//! The queue is pre-filled with `N` pending events at random times in `[0, 10 ms)`; each step then
//! pops the earliest event and pushes one at its time plus a random delay in `[1, 10 ms]`, so the
//! queue stays at `N` pending events, as in a simulator in steady state. One step is one event
//! processed; the reported throughput is events per second.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use onepipe_sim::queue::{EventQueue, QuaternaryHeap, RadixHeap, SimTime, StdBinaryHeap};
use std::hint::black_box;
use std::time::Duration;

/// Events pending in the queue throughout a run.
const PENDING: [usize; 2] = [1_000, 1_000_000];
/// Hold steps per measured iteration.
const STEPS_PER_ITER: u64 = 10_000;
/// Upper bound (exclusive) of the initial event times, and of the delays.
const SPAN_NS: u64 = 10_000_000;

/// A 16-byte event payload.
type Payload = [u32; 4];

/// xorshift64: a tiny seeded generator, so the benchmark needs no `rand`.
struct XorShift(u64);

impl XorShift {
    #[inline]
    fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// Uniform in `0..n`.
    #[inline]
    fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }
}

/// A queue holding `pending` events at random times in `[0, SPAN_NS)`.
fn prefilled<Q: EventQueue<Payload> + Default>(pending: usize, rng: &mut XorShift) -> Q {
    let mut queue = Q::default();
    for index in 0..pending {
        let index = index as u32;
        queue.push(rng.below(SPAN_NS), [index, index, index, index]);
    }
    assert_eq!(queue.len(), pending);
    queue
}

/// `steps` hold steps: pop the earliest event, push it back `[1, SPAN_NS]` ns later.
#[inline]
fn hold<Q: EventQueue<Payload>>(queue: &mut Q, rng: &mut XorShift, steps: u64) -> SimTime {
    let mut time = 0;
    for _ in 0..steps {
        let (popped, payload) = queue.pop().expect("the hold model never empties the queue");
        time = popped;
        queue.push(popped + 1 + rng.below(SPAN_NS), black_box(payload));
    }
    time
}

fn bench_one<Q: EventQueue<Payload> + Default>(c: &mut Criterion, name: &str) {
    let mut group = c.benchmark_group("queue_hold");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .throughput(Throughput::Elements(STEPS_PER_ITER));
    for pending in PENDING {
        // Built on first use, so a filtered-out benchmark costs nothing, and kept across criterion's
        // calls so the queue stays in steady state.
        let mut state: Option<(Q, XorShift)> = None;
        group.bench_function(BenchmarkId::new(name, pending), |b| {
            let (queue, rng) = state.get_or_insert_with(|| {
                let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
                let mut queue: Q = prefilled(pending, &mut rng);
                // Reach steady state before measuring: the initial uniform spread is not it.
                hold(&mut queue, &mut rng, pending as u64);
                (queue, rng)
            });
            b.iter(|| hold(queue, rng, STEPS_PER_ITER))
        });
        if let Some((queue, _)) = &state {
            assert_eq!(queue.len(), pending);
        }
    }
    group.finish();
}

fn queue_hold(c: &mut Criterion) {
    bench_one::<RadixHeap<Payload>>(c, "radix");
    bench_one::<QuaternaryHeap<Payload>>(c, "quaternary");
    bench_one::<StdBinaryHeap<Payload>>(c, "binary");
}

criterion_group!(benches, queue_hold);
criterion_main!(benches);
