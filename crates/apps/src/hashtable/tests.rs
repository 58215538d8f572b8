//! The hash table in two small network models: **ordered** — every ordered message takes the
//! same delay and every stamp is distinct, so each receiver takes them in timestamp order, as
//! best-effort 1Pipe delivers them (unordered replies take any delay), and a lost message is
//! reported to its sender (§2.1) — and
//! **plain** — each message takes its own delay (FIFO per pair of processes, or not), nothing
//! lost, as the baseline's reliable transport delivers.

use super::check::{check_run, RunVerdict};
use super::codec::{decode, encode, Msg, ReplCmd};
use super::*;
use onepipe_proto::Timestamp;
use onepipe_testalloc::fuzz::{self, ensure, Bound};
use proptest::prelude::{any, prop_oneof, proptest, Just};
use std::cmp::Reverse;
use std::collections::BinaryHeap;

#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Ev {
    /// (dst, src, ts, payload)
    Deliver(u32, u32, u64, Vec<u8>),
    /// (sender, dst, ts)
    Lost(u32, u32, u64),
    Timer(u32),
}

/// How the model network carries messages.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Wire {
    /// 1Pipe's order: one delay for all.
    Ordered,
    /// Each message its own delay in `delay..delay + jitter`, FIFO per (sender, receiver) pair
    /// when `fifo`.
    Plain { jitter: u64, fifo: bool },
}

/// Decides whether to drop a message: (sender, receiver, message).
type Dropper = Box<dyn FnMut(u32, u32, &Msg) -> bool>;

struct Net {
    procs: Vec<HtProcess>,
    done: Vec<ReplDone>,
    q: BinaryHeap<Reverse<(u64, u64, Ev)>>,
    n: u64,
    now: u64,
    delay: u64,
    wire: Wire,
    loss: f64,
    /// How long after its send a loss is reported.
    report_ns: u64,
    rng: Rng,
    timers: Vec<Option<u64>>,
    /// Per (src, dst): when the last message arrives (FIFO plain wires).
    last: HashMap<(u32, u32), u64>,
    /// Drops a message (src, dst, payload) when it returns true.
    drop: Option<Dropper>,
    layout: HtLayout,
    workload: HtWorkload,
}

impl Net {
    fn new(
        mode: HtMode,
        layout: HtLayout,
        workload: HtWorkload,
        window: u32,
        wire: Wire,
        seed: u64,
    ) -> Net {
        let n = layout.procs();
        let procs = (0..n)
            .map(|p| {
                let mut cfg = HtConfig::new(ProcId(p), mode, layout, workload.clone(), window);
                cfg.start = Instant(1_000);
                cfg.stop = Instant(400_000);
                HtProcess::new(cfg, seed ^ u64::from(p) << 32)
            })
            .collect();
        let mut net = Net {
            procs,
            done: Vec::new(),
            q: BinaryHeap::new(),
            n: 0,
            now: 0,
            delay: 1_000,
            wire,
            loss: 0.0,
            report_ns: 3_000,
            rng: Rng::new(seed),
            timers: vec![None; n as usize],
            last: HashMap::new(),
            drop: None,
            layout,
            workload,
        };
        for p in 0..n {
            net.input(p, AppInput::Timeout);
        }
        net
    }

    fn push(&mut self, t: u64, ev: Ev) {
        self.n += 1;
        self.q.push(Reverse((t, self.n, ev)));
    }

    fn input(&mut self, p: u32, input: AppInput<'_>) {
        self.procs[p as usize].handle(Instant(self.now), input);
        self.flush(p);
    }

    fn flush(&mut self, p: u32) {
        let now = self.now;
        while let Some(s) = self.procs[p as usize].poll_send() {
            // Every stamp is distinct and increasing, as 1Pipe's are per sender.
            self.now += 1;
            let ts = self.now;
            for (dst, bytes) in &s.parts {
                let dropped = match (&mut self.drop, decode(bytes)) {
                    (Some(f), Some(m)) => f(p, dst.0, &m),
                    _ => false,
                };
                let lost = dropped || self.loss > 0.0 && self.rng.chance(self.loss);
                let at = match self.wire {
                    Wire::Ordered if s.ordered => ts + self.delay,
                    // A reply outside 1Pipe's order: any delay up to twice the ordered one.
                    Wire::Ordered => ts + self.delay / 2 + self.rng.below(self.delay + 1),
                    Wire::Plain { jitter, fifo } => {
                        let t = ts + self.delay + self.rng.below(jitter + 1);
                        let last = self.last.entry((p, dst.0)).or_insert(0);
                        let t = if fifo { t.max(*last + 1) } else { t };
                        *last = t;
                        t
                    }
                };
                if lost {
                    assert_eq!(self.wire, Wire::Ordered, "plain wires lose nothing");
                    self.push(ts + self.report_ns, Ev::Lost(p, dst.0, ts));
                } else {
                    self.push(at, Ev::Deliver(dst.0, p, ts, bytes.to_vec()));
                }
            }
            self.procs[p as usize].handle(
                Instant(self.now),
                AppInput::Sent {
                    tag: s.tag,
                    ts: Timestamp::new(ts),
                },
            );
        }
        self.now = self.now.max(now);
        while let Some(d) = self.procs[p as usize].poll_done() {
            self.done.push(d);
        }
        let t = self.procs[p as usize]
            .poll_timeout()
            .map(|t| t.0.max(self.now + 1));
        if t != self.timers[p as usize] {
            self.timers[p as usize] = t;
            if let Some(t) = t {
                self.push(t, Ev::Timer(p));
            }
        }
    }

    /// Runs until nothing is left to do or `until` (ns).
    fn run(&mut self, until: u64) {
        while let Some(Reverse((t, _, ev))) = self.q.pop() {
            if t > until {
                self.push(t, ev);
                break;
            }
            self.now = self.now.max(t);
            match ev {
                Ev::Deliver(dst, src, ts, payload) => self.input(
                    dst,
                    AppInput::Deliver {
                        src: ProcId(src),
                        ts: Timestamp::new(ts),
                        reliable: false,
                        payload: &payload,
                    },
                ),
                Ev::Lost(src, dst, ts) => self.input(
                    src,
                    AppInput::SendFailed {
                        dst: ProcId(dst),
                        ts: Timestamp::new(ts),
                    },
                ),
                Ev::Timer(p) => {
                    if self.timers[p as usize] == Some(t) {
                        self.timers[p as usize] = None;
                        self.input(p, AppInput::Timeout);
                    }
                }
            }
        }
    }

    fn idle(&self) -> bool {
        self.procs.iter().all(HtProcess::idle)
    }

    fn stats(&self) -> HtStats {
        let mut s = HtStats::default();
        for p in &self.procs {
            s += p.stats();
        }
        s
    }

    fn verdict(&self) -> RunVerdict {
        let maybe: Vec<MaybeOp> = self.procs.iter().flat_map(|p| p.open_inserts()).collect();
        let tables: Vec<(u32, u32, &Table)> =
            self.procs.iter().filter_map(HtProcess::table).collect();
        check_run(
            &self.layout,
            &self.workload,
            &self.done,
            &maybe,
            &tables,
            0,
            1_000_000,
        )
    }

    /// Mean latency of completed operations of one kind, ns.
    fn mean_latency(&self, inserts: bool) -> f64 {
        let l: Vec<u64> = self
            .done
            .iter()
            .filter(|d| d.cmd.is_write() == inserts)
            .map(|d| d.return_ns - d.call_ns)
            .collect();
        assert!(!l.is_empty(), "no operation of the kind completed");
        l.iter().sum::<u64>() as f64 / l.len() as f64
    }
}

fn layout(servers: u32, replicas: u32, clients: u32) -> HtLayout {
    HtLayout {
        servers,
        replicas,
        clients,
    }
}

fn workload(keys: u64, insert_share: f64, preload: u64, buckets: u32) -> HtWorkload {
    HtWorkload {
        keys,
        insert_share,
        preload,
        buckets,
    }
}

/// Runs to the end and asserts it drained and every check passed.
fn run_clean(net: &mut Net) -> HtStats {
    net.run(u64::MAX);
    assert!(net.idle(), "the run did not drain");
    let v = net.verdict();
    assert!(v.ok(), "{:?}", v.samples());
    assert!(v.lin.ops > 0);
    net.stats()
}

#[test]
fn insert_is_one_round_trip_on_1pipe_and_two_behind_the_fence_2_2_1() {
    // One client, one insert at a time into an empty table of many buckets: every CAS
    // expects an empty bucket and finds one.
    let w = workload(1 << 30, 1.0, 0, 1 << 16);
    let mut one = Net::new(
        HtMode::OnePipe,
        layout(4, 1, 1),
        w.clone(),
        1,
        Wire::Ordered,
        1,
    );
    let s = run_clean(&mut one);
    assert_eq!(s.cas_failed, 0);
    let plain = Wire::Plain {
        jitter: 0,
        fifo: true,
    };
    let mut fenced = Net::new(HtMode::Rdma, layout(4, 1, 1), w, 1, plain, 1);
    run_clean(&mut fenced);
    let (a, b) = (one.mean_latency(true), fenced.mean_latency(true));
    // A round trip is 1 µs out (ordered) and 0.5–1.5 µs back (the replies, unordered).
    assert!((1_500.0..2_600.0).contains(&a), "1Pipe insert {a} ns");
    assert!((4_000.0..4_200.0).contains(&b), "fenced insert {b} ns");
}

#[test]
fn replicated_insert_is_one_round_trip_on_1pipe_and_four_leader_follower_7_3_3() {
    let w = workload(1 << 30, 1.0, 0, 1 << 16);
    let mut one = Net::new(
        HtMode::OnePipe,
        layout(4, 3, 1),
        w.clone(),
        1,
        Wire::Ordered,
        2,
    );
    run_clean(&mut one);
    let plain = Wire::Plain {
        jitter: 0,
        fifo: true,
    };
    let mut lf = Net::new(HtMode::Rdma, layout(4, 3, 1), w, 1, plain, 2);
    let s = run_clean(&mut lf);
    assert!(s.replicated > 0);
    let (a, b) = (one.mean_latency(true), lf.mean_latency(true));
    assert!((1_500.0..2_600.0).contains(&a), "1Pipe insert {a} ns");
    // Write: client → leader → followers → leader → client, twice (the fence between).
    assert!(
        (8_000.0..8_300.0).contains(&b),
        "leader-follower insert {b} ns"
    );
}

#[test]
fn lookup_reads_the_head_then_walks_the_chain_newest_first() {
    let l = layout(1, 1, 1);
    // One bucket: every key chains there, the last preloaded at the head.
    let w = workload(8, 0.0, 8, 1);
    let t = Table::preloaded(&l, &w, 0, 1 << 20);
    let chain = t.chain(0).expect("a well-formed chain");
    let keys: Vec<Key> = chain.iter().map(|p| p.key).collect();
    assert_eq!(keys, vec![7, 6, 5, 4, 3, 2, 1, 0]);
    assert_eq!(t.lookup(0, 3), Ok(Some(preload_val(3))));
    assert_eq!(t.lookup(0, 9), Ok(None));
    // A lookup of key 0 reads the head and all eight pairs.
    let mut net = Net::new(HtMode::OnePipe, l, w, 1, Wire::Ordered, 3);
    let s = run_clean(&mut net);
    assert_eq!(s.head_reads, s.lookups);
    assert!(s.slot_reads > s.lookups, "{s:?}");
}

#[test]
fn cas_swaps_only_from_the_expected_head() {
    let mut t = Table::new(2, 2, 16);
    let a = Ptr::new(1, 0, 1);
    let b = Ptr::new(1, 1, 1);
    assert_eq!(t.cas(0, Ptr::NIL, a), Some(Ptr::NIL));
    assert_eq!(t.head(0), Some(a));
    assert_eq!(
        t.cas(0, Ptr::NIL, b),
        Some(a),
        "a failed CAS returns the head"
    );
    assert_eq!(t.head(0), Some(a));
    assert_eq!(t.cas(5, Ptr::NIL, b), None, "no such bucket");
    // Linked but unwritten: the chain says so.
    assert!(t.chain(0).unwrap_err().contains("unwritten"));
    let pair = Pair {
        key: 1,
        val: 2,
        next: Ptr::NIL,
        me: a.with_attempt_for_test(2),
    };
    assert!(t.write(pair));
    assert!(t.chain(0).unwrap_err().contains("written for"));
    assert!(!t.write(Pair {
        me: Ptr::new(3, 0, 1),
        ..pair
    }));
    assert!(!t.write(Pair {
        me: Ptr::new(1, 16, 1),
        ..pair
    }));
}

impl Ptr {
    fn with_attempt_for_test(self, a: u8) -> Ptr {
        Ptr::new(self.region(), self.slot(), a)
    }
}

/// Many clients insert into few buckets at once: CASes conflict and retry, and every insert
/// ends up reachable, in both modes, with and without replicas.
#[test]
fn concurrent_inserts_retry_on_conflict_and_stay_linearizable() {
    for (mode, wire) in [
        (HtMode::OnePipe, Wire::Ordered),
        (
            HtMode::Rdma,
            Wire::Plain {
                jitter: 800,
                fifo: true,
            },
        ),
    ] {
        for replicas in [1, 3] {
            for seed in 0..4 {
                let w = workload(24, 0.5, 12, 2);
                let mut net = Net::new(mode, layout(2, replicas, 6), w, 4, wire, seed);
                let s = run_clean(&mut net);
                assert!(s.cas_failed > 0, "{mode:?} {replicas}: {s:?}");
                assert!(s.inserts > 100 && s.lookups > 100, "{s:?}");
                assert_eq!(s.malformed + s.abandoned + s.unrepaired, 0, "{s:?}");
            }
        }
    }
}

#[test]
fn any_replica_serves_lookups_on_1pipe_only_the_leader_on_the_baseline_7_3_3() {
    let w = workload(1_000, 0.0, 1_000, 64);
    let served = |mode, wire| -> Vec<u64> {
        let mut net = Net::new(mode, layout(2, 3, 4), w.clone(), 4, wire, 5);
        run_clean(&mut net);
        net.procs
            .iter()
            .filter(|p| p.table().is_some())
            .map(|p| p.stats().served)
            .collect()
    };
    let one = served(HtMode::OnePipe, Wire::Ordered);
    assert!(one.iter().all(|&s| s > 0), "{one:?}");
    let plain = Wire::Plain {
        jitter: 500,
        fifo: true,
    };
    let lf = served(HtMode::Rdma, plain);
    assert!(
        lf[..2].iter().all(|&s| s > 0) && lf[2..].iter().all(|&s| s == 0),
        "{lf:?}"
    );
}

/// §2.2.1 with best-effort 1Pipe: a lost write is sent again and readers that find a linked
/// pair not yet written read it again; lost reads, CASes (one replica) and replies are sent
/// again. Nothing is given up and every check passes.
#[test]
fn losses_are_repaired_on_1pipe_with_one_replica_2_2_1() {
    for seed in 0..6 {
        let w = workload(32, 0.5, 16, 4);
        let mut net = Net::new(HtMode::OnePipe, layout(2, 1, 4), w, 4, Wire::Ordered, seed);
        net.loss = 0.05;
        let s = run_clean(&mut net);
        assert!(s.resent > 0, "{s:?}");
        assert_eq!(s.abandoned + s.unrepaired, 0, "{s:?}");
    }
}

#[test]
fn a_write_lost_behind_its_cas_makes_readers_wait_for_it_2_2_1() {
    let w = workload(1, 0.5, 0, 1);
    let mut net = Net::new(HtMode::OnePipe, layout(1, 1, 2), w, 1, Wire::Ordered, 9);
    // The report comes late: meanwhile the pair is linked and readers find it unwritten.
    net.report_ns = 30_000;
    // Some writes are lost; of those, the ones whose CAS swapped leave a linked pair unwritten.
    let mut dropped = 0;
    net.drop = Some(Box::new(move |_, _, m| {
        let drop = dropped < 10 && matches!(m, Msg::Write { op, .. } if op % 7 == 3);
        dropped += u32::from(drop);
        drop
    }));
    let s = run_clean(&mut net);
    assert!(s.resent >= 1 && s.not_written >= 1, "{s:?}");
}

/// A CAS lost to one of three replicas is not repaired: the client gives the insert up, the
/// replicas differ, and the table check says where.
#[test]
fn a_cas_lost_to_one_replica_is_reported_not_repaired() {
    let w = workload(16, 1.0, 0, 4);
    let mut net = Net::new(HtMode::OnePipe, layout(1, 3, 1), w, 1, Wire::Ordered, 4);
    let mut dropped = false;
    net.drop = Some(Box::new(move |_, dst, m| {
        let first = !dropped && dst == 1 && matches!(m, Msg::Cas { .. });
        dropped |= first;
        first
    }));
    net.run(u64::MAX);
    let s = net.stats();
    // The first divergence leads to more: later CASes on that bucket disagree too.
    assert!(s.unrepaired >= 1 && s.abandoned >= 1, "{s:?}");
    let v = net.verdict();
    assert!(
        v.tables.samples.iter().any(|x| x.contains("differs")),
        "{v:?}"
    );
}

/// Without 1Pipe's order, replicas may apply two clients' CASes on one bucket in different
/// orders: scattering writes to replicas is unsafe on a plain network, and the checks say so.
#[test]
fn onepipe_replication_on_a_plain_network_diverges_and_is_caught() {
    let mut caught = 0;
    for seed in 0..8 {
        let w = workload(8, 1.0, 0, 1);
        let wire = Wire::Plain {
            jitter: 3_000,
            fifo: false,
        };
        let mut net = Net::new(HtMode::OnePipe, layout(1, 3, 6), w, 2, wire, seed);
        net.run(u64::MAX);
        let s = net.stats();
        let v = net.verdict();
        caught += u32::from(s.unrepaired > 0 || !v.ok());
    }
    assert!(caught > 0, "no seed diverged");
}

/// The checks themselves: a head set back past the two newest pairs loses acknowledged
/// inserts, and both the final lookups and the reachability check see it. (Past one pair would
/// not do for the lookups: a client's next operation is called at the instant its previous one
/// returns, so the two are concurrent and may linearize either way.)
#[test]
fn checker_catches_inserts_unlinked_after_they_returned() {
    let w = workload(4, 1.0, 0, 1);
    let mut net = Net::new(HtMode::OnePipe, layout(1, 1, 1), w, 1, Wire::Ordered, 6);
    net.run(u64::MAX);
    assert!(net.verdict().ok());
    let RoleSt::Server(s) = &mut net.procs[0].role else {
        panic!("process 0 serves");
    };
    let chain = s.table.chain(0).expect("a chain");
    assert!(s.table.set_head(0, chain[2].me));
    let v = net.verdict();
    assert!(v.lin.violations > 0, "{v:?}");
    assert!(
        v.tables.samples.iter().any(|x| x.contains("in no chain")),
        "{v:?}"
    );
}

#[test]
fn same_seed_same_history() {
    let run = || {
        let w = workload(64, 0.5, 32, 8);
        let mut net = Net::new(HtMode::OnePipe, layout(2, 3, 4), w, 4, Wire::Ordered, 11);
        net.loss = 0.01;
        net.run(u64::MAX);
        net.done
    };
    assert_eq!(run(), run());
}

#[test]
fn codec_round_trips() {
    let pair = Pair {
        key: 7,
        val: 9,
        next: Ptr::new(2, 3, 4),
        me: Ptr::new(1, 5, 6),
    };
    let p = Ptr::new(9, 1 << 39, 255);
    assert_eq!((p.region(), p.slot(), p.attempt()), (9, 1 << 39, 255));
    for m in [
        Msg::ReadHead { op: 1, bucket: 2 },
        Msg::ReadSlot { op: 1, ptr: p },
        Msg::Write { op: 3, pair },
        Msg::Cas {
            op: 4,
            bucket: 5,
            expect: Ptr::NIL,
            new: p,
        },
        Msg::HeadIs {
            op: 1,
            bucket: 2,
            head: p,
        },
        Msg::SlotIs {
            op: 1,
            ptr: p,
            pair: Some(pair),
        },
        Msg::SlotIs {
            op: 1,
            ptr: p,
            pair: None,
        },
        Msg::WriteDone { op: 1, ptr: p },
        Msg::CasDone {
            op: 1,
            bucket: 2,
            new: p,
            old: Ptr::NIL,
        },
        Msg::Repl {
            lseq: 8,
            cmd: ReplCmd::Write(pair),
        },
        Msg::Repl {
            lseq: 8,
            cmd: ReplCmd::SetHead { bucket: 3, head: p },
        },
        Msg::ReplAck { lseq: 9 },
    ] {
        let b = encode(&m);
        assert_eq!(decode(&b), Some(m));
        // Cut short or with a byte more, it is refused.
        assert_eq!(decode(&b[..b.len() - 1]), None);
        let mut long = b.to_vec();
        long.push(0);
        assert_eq!(decode(&long), None);
    }
}

fn fuzz_pair(rng: &mut fuzz::Rng) -> Pair {
    Pair {
        key: rng.interesting(),
        val: rng.interesting(),
        next: Ptr(rng.interesting()),
        me: Ptr(rng.interesting()),
    }
}

/// Any message the encoder can write.
fn fuzz_msg(rng: &mut fuzz::Rng) -> Msg {
    let (op, bucket, ptr) = (rng.interesting(), rng.u32(), Ptr(rng.interesting()));
    let other = Ptr(rng.interesting());
    match rng.below(10) {
        0 => Msg::ReadHead { op, bucket },
        1 => Msg::ReadSlot { op, ptr },
        2 => Msg::Write {
            op,
            pair: fuzz_pair(rng),
        },
        3 => Msg::Cas {
            op,
            bucket,
            expect: ptr,
            new: other,
        },
        4 => Msg::HeadIs {
            op,
            bucket,
            head: ptr,
        },
        5 => Msg::SlotIs {
            op,
            ptr,
            pair: rng.bool().then(|| fuzz_pair(rng)),
        },
        6 => Msg::WriteDone { op, ptr },
        7 => Msg::CasDone {
            op,
            bucket,
            new: ptr,
            old: other,
        },
        8 => Msg::Repl {
            lseq: op,
            cmd: match rng.bool() {
                true => ReplCmd::Write(fuzz_pair(rng)),
                false => ReplCmd::SetHead { bucket, head: ptr },
            },
        },
        _ => Msg::ReplAck { lseq: op },
    }
}

/// Messages are plain values of fixed-size fields: a decode allocates nothing at all.
#[test]
fn decode_never_panics_nor_allocates_on_random_and_mutated_input() {
    fuzz::decoder(
        "hashtable::decode",
        Bound::NOTHING,
        |rng| {
            let m = fuzz_msg(rng);
            (m, encode(&m).to_vec())
        },
        decode,
        |bytes, got, valid| match (got, valid) {
            (got, Some(want)) => ensure(got.as_ref() == Some(want), || "no round trip".into()),
            (Some(m), None) => ensure(encode(m) == bytes, || {
                "does not re-encode to its bytes".into()
            }),
            (None, None) => Ok(()),
        },
    );
}

proptest! {
    /// Anything delivered to any role, from anyone, is dropped and counted or served — never
    /// a panic.
    #[test]
    fn garbage_never_panics(
        msgs in proptest::collection::vec(
            (0u32..8, proptest::collection::vec(any::<u8>(), 0..48)), 0..40),
        mode in prop_oneof![Just(HtMode::OnePipe), Just(HtMode::Rdma)],
    ) {
        let w = workload(16, 0.5, 8, 4);
        let l = layout(2, 3, 2);
        let mut procs: Vec<HtProcess> = (0..l.procs() + 1)
            .map(|p| HtProcess::new(HtConfig::new(ProcId(p), mode, l, w.clone(), 2), 1))
            .collect();
        for (i, (src, bytes)) in msgs.iter().enumerate() {
            // Valid kinds with random fields, and random bytes.
            let mut b = bytes.clone();
            if let Some(k) = b.first_mut() {
                *k %= 12;
            }
            for p in procs.iter_mut() {
                let input = AppInput::Deliver {
                    src: ProcId(*src),
                    ts: Timestamp::new(i as u64),
                    reliable: false,
                    payload: &b,
                };
                p.handle(Instant(i as u64), input);
                while p.poll_send().is_some() {}
                p.handle(Instant(i as u64), AppInput::SendFailed {
                    dst: ProcId(*src),
                    ts: Timestamp::new(i as u64),
                });
                while p.poll_send().is_some() {}
            }
        }
    }
}
