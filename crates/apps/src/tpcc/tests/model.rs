//! [`TpccProcess`] on a small model of 1Pipe's services:
//!
//! one global clock stamps every send (all a process sends in one turn alike, as a host does);
//! reliable scatterings are delivered to every destination `rel_lag` after their timestamp, in
//! (timestamp, sender, send order) order; the released commit barrier (`now − rel_lag`) is
//! reported as it moves; best-effort replies arrive `be_lag` after their timestamp and may be
//! lost, the loss reported to the sender; the host may refuse a send. A crashed process gets
//! nothing more and sends nothing more; every live process hears `ProcFailed` `detect_ns` later,
//! and from then on a send to it is refused. Restricted atomicity, two ways: messages to a
//! crashed process are dropped and the rest of their scattering is delivered, or (`recall`) a
//! live sender's scattering with a crashed destination is recalled — delivered nowhere — as
//! 1Pipe's §5.2 Recall does for one the failed receiver never acknowledged.

use super::*;

#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Due {
    /// A part of scattering `scatter`.
    Deliver {
        reliable: bool,
        ts: u64,
        src: u32,
        dst: u32,
        scatter: u64,
        payload: Bytes,
    },
    Lost {
        src: u32,
        dst: u32,
        ts: u64,
    },
    Timer {
        p: u32,
    },
    /// Moves the clock (and so the commit barrier) past a recalled scattering.
    Tick,
    Crash {
        p: u32,
    },
    /// Every live process hears that `p` failed at `ts`.
    Failed {
        p: u32,
        ts: u64,
    },
}

struct Model {
    procs: Vec<TpccProcess>,
    /// Min-heap of (time, sender, seq, what): at one time, by sender, then in send order.
    due: BinaryHeap<Reverse<(u64, u32, u64, Due)>>,
    seq: u64,
    now: u64,
    clock: u64,
    be_lag: u64,
    rel_lag: u64,
    detect_ns: u64,
    loss: f64,
    refuse: f64,
    /// Recall a live sender's scattering with a crashed destination (else deliver the rest).
    recall: bool,
    /// Deliveries to this process come late by up to 20 µs: out of order (a broken 1Pipe).
    misorder: Option<u32>,
    rng: Rng,
    /// Crash time of each crashed process.
    crashed: BTreeMap<u32, u64>,
    /// Processes whose failure was reported: sends to them are refused.
    reported: BTreeSet<u32>,
    /// Reliable scatterings: destinations, and whether recalled once decided.
    scatters: BTreeMap<u64, (u32, Vec<u32>, Option<bool>)>,
    checker: TpccChecker,
    committed: Vec<TpccCommitted>,
}

impl Model {
    fn new(layout: TpccLayout, procs: u32, window: u32, stop: u64, seed: u64) -> Model {
        let w = workload(TpccScale::small(), seed);
        Model::build(layout, procs, window, stop, seed, w, |_| {})
    }

    /// Processes running `w`, their configuration tweaked by `tweak`.
    fn build(
        layout: TpccLayout,
        procs: u32,
        window: u32,
        stop: u64,
        seed: u64,
        w: TpccWorkload,
        tweak: impl Fn(&mut TpccConfig),
    ) -> Model {
        let procs = (0..procs)
            .map(|p| {
                let mut cfg = TpccConfig::new(ProcId(p), procs, w.clone(), window);
                cfg.layout = layout;
                cfg.stop = Instant(stop);
                tweak(&mut cfg);
                let gen = TxnGen::new(w.clone(), cfg.home_warehouse(), seed ^ u64::from(p) << 32);
                TpccProcess::new(cfg, gen)
            })
            .collect();
        Model {
            procs,
            due: BinaryHeap::new(),
            seq: 0,
            now: 0,
            clock: 0,
            be_lag: 3_000,
            rel_lag: 9_000,
            detect_ns: 20_000,
            loss: 0.0,
            refuse: 0.0,
            recall: false,
            misorder: None,
            rng: Rng::new(seed),
            crashed: BTreeMap::new(),
            reported: BTreeSet::new(),
            scatters: BTreeMap::new(),
            checker: TpccChecker::new(w.scale, w.seed, layout),
            committed: Vec::new(),
        }
    }

    fn push(&mut self, at: u64, src: u32, d: Due) {
        self.seq += 1;
        self.due.push(Reverse((at, src, self.seq, d)));
    }

    fn alive(&self, p: u32) -> bool {
        !self.crashed.contains_key(&p)
    }

    fn crash_at(&mut self, p: u32, at: u64) {
        self.push(at, p, Due::Crash { p });
    }

    fn handle(&mut self, p: u32, input: AppInput<'_>) {
        if self.alive(p) {
            self.procs[p as usize].handle(Instant(self.now), input);
            self.drain(p);
        }
    }

    /// Drains process `p`'s sends: stamps each, schedules its parts.
    fn drain(&mut self, p: u32) {
        while let Some(s) = self.procs[p as usize].poll_send() {
            self.clock = self.clock.max(self.now);
            let ts = self.clock;
            let now = Instant(self.now);
            let to_failed = s.parts.iter().any(|(d, _)| self.reported.contains(&d.0));
            if (s.reliable && to_failed) || self.rng.chance(self.refuse) {
                self.procs[p as usize].handle(now, AppInput::Refused { tag: s.tag });
                continue;
            }
            let sent = AppInput::Sent {
                tag: s.tag,
                ts: Timestamp::new(ts),
            };
            self.procs[p as usize].handle(now, sent);
            self.seq += 1;
            let scatter = self.seq;
            if s.reliable {
                let dsts = s.parts.iter().map(|(d, _)| d.0).collect();
                self.scatters.insert(scatter, (p, dsts, None));
            }
            for (dst, payload) in s.parts {
                if !s.reliable && self.rng.chance(self.loss) {
                    let lost = Due::Lost {
                        src: p,
                        dst: dst.0,
                        ts,
                    };
                    self.push(ts + 2 * self.be_lag, p, lost);
                    continue;
                }
                let mut at = ts
                    + if s.reliable {
                        self.rel_lag
                    } else {
                        self.be_lag
                    };
                if self.misorder == Some(dst.0) {
                    at += self.rng.below(20_000);
                }
                let d = Due::Deliver {
                    reliable: s.reliable,
                    ts,
                    src: p,
                    dst: dst.0,
                    scatter,
                    payload,
                };
                self.push(at, p, d);
            }
        }
        while let Some(c) = self.procs[p as usize].poll_committed() {
            self.committed.push(c.clone());
            self.checker.on_commit(c);
        }
        if let Some(t) = self.procs[p as usize].poll_timeout() {
            self.push(t.as_nanos().max(self.now), p, Due::Timer { p });
        }
    }

    /// Whether reliable scattering `scatter` is recalled: decided when its parts fall due.
    fn recalled(&mut self, scatter: u64, at: u64) -> bool {
        let crashed = &self.crashed;
        let recall = self.recall;
        let Some((src, dsts, decided)) = self.scatters.get_mut(&scatter) else {
            return false;
        };
        let is_dead = |p: &u32| crashed.get(p).is_some_and(|&t| t <= at);
        if let Some(r) = *decided {
            return r;
        }
        let r = recall && !is_dead(src) && dsts.iter().any(is_dead);
        *decided = Some(r);
        if r {
            // The barrier must move past it for its sender to notice.
            self.push(at + 1, 0, Due::Tick);
        }
        r
    }

    fn run(&mut self) {
        for p in 0..self.procs.len() as u32 {
            self.handle(p, AppInput::Timeout);
        }
        let mut released = 0;
        while let Some(Reverse((at, _, _, d))) = self.due.pop() {
            self.now = at;
            // The commit barrier: every reliable message stamped below now − rel_lag is in.
            let b = at.saturating_sub(self.rel_lag);
            if b > released && self.misorder.is_none() {
                released = b;
                for p in 0..self.procs.len() as u32 {
                    let ts = Timestamp::new(b);
                    self.handle(p, AppInput::CommitReleased { ts });
                }
            }
            self.step(at, d);
        }
    }

    fn step(&mut self, at: u64, d: Due) {
        match d {
            Due::Deliver {
                reliable,
                ts,
                src,
                dst,
                scatter,
                payload,
            } => {
                if reliable && self.recalled(scatter, at) {
                    return;
                }
                let input = AppInput::Deliver {
                    src: ProcId(src),
                    ts: Timestamp::new(ts),
                    reliable,
                    payload: &payload,
                };
                self.handle(dst, input);
            }
            Due::Timer { p } => self.handle(p, AppInput::Timeout),
            Due::Lost { src, dst, ts } => {
                let input = AppInput::SendFailed {
                    dst: ProcId(dst),
                    ts: Timestamp::new(ts),
                };
                self.handle(src, input);
            }
            Due::Tick => {}
            Due::Crash { p } => {
                self.crashed.insert(p, at);
                self.push(at + self.detect_ns, p, Due::Failed { p, ts: at });
            }
            Due::Failed { p, ts } => {
                self.reported.insert(p);
                for q in 0..self.procs.len() as u32 {
                    let input = AppInput::ProcFailed {
                        proc: ProcId(p),
                        ts: Timestamp::new(ts),
                    };
                    self.handle(q, input);
                }
            }
        }
    }

    /// The checker's verdict with the final state of every live replica and the unfinished
    /// transactions of every process (a crashed one's were stamped before its crash).
    fn verdict(&self) -> check::TpccVerdict {
        let unfinished: Vec<TpccCommitted> =
            self.procs.iter().flat_map(|p| p.unfinished()).collect();
        let live: Vec<(u32, &Shard)> = self
            .procs
            .iter()
            .enumerate()
            .filter(|(p, _)| self.alive(*p as u32))
            .filter_map(|(_, p)| p.shard())
            .collect();
        self.checker.verdict_with(&unfinished, &live, 0)
    }

    fn stats(&self) -> TpccStats {
        let mut s = TpccStats::default();
        for p in &self.procs {
            s += p.stats();
        }
        s
    }

    /// The counters that must stay 0 in a run of a correct 1Pipe.
    fn assert_clean(&self, seed: u64) {
        let s = self.stats();
        let bad = (
            s.result_mismatches,
            s.reordered,
            s.malformed,
            s.late_receipts,
        );
        assert_eq!(bad, (0, 0, 0, 0), "seed {seed}: {s:?}");
    }

    fn live_idle(&self) -> bool {
        self.procs
            .iter()
            .enumerate()
            .all(|(p, q)| !self.alive(p as u32) || q.idle())
    }
}

fn twelve(stop: u64, seed: u64) -> Model {
    Model::new(TpccLayout::new(4, 3), 12, 2, stop, seed)
}

#[test]
fn transactions_commit_and_replay_in_timestamp_order_7_3_2() {
    let mut m = twelve(1_500_000, 1);
    m.run();
    let v = m.verdict();
    assert_eq!(v.violations, 0, "seed 1: {:?}", v.samples);
    assert!(v.checks.transactions > 2_000, "{v:?}");
    assert_eq!(v.checks.shards_compared, 4);
    assert_conditions_cover(&v.checks, &TpccScale::small());
    let s = m.stats();
    assert!(
        s.committed_new_order > 800 && s.committed_payment > 800,
        "{s:?}"
    );
    assert_eq!(s.committed(), v.checks.transactions);
    // The dependency-graph checker saw every transaction, and dependencies of every kind.
    let g = &v.graph;
    assert_eq!(
        (g.ok, g.info, g.anomalies),
        (v.checks.transactions, 0, 0),
        "{g:?}"
    );
    assert!(g.reads > 1_000 && g.edges.iter().all(|&e| e > 100), "{g:?}");
    m.assert_clean(1);
    assert!(m.live_idle());
    // Every replica of every shard applied the same parts.
    let digests: BTreeMap<u32, BTreeSet<u64>> =
        m.procs.iter().fold(BTreeMap::new(), |mut acc, p| {
            if let Some((s, shard)) = p.shard() {
                acc.entry(s).or_default().insert(shard.digest());
            }
            acc
        });
    assert!(digests.values().all(|d| d.len() == 1), "{digests:?}");
}

#[test]
fn rolled_back_new_orders_commit_with_no_effect_2_4_2_3() {
    let w = TpccWorkload {
        rollback_share: 0.3,
        payment_weight: 0,
        ..workload(TpccScale::small(), 2)
    };
    let mut m = Model::build(TpccLayout::new(4, 3), 12, 2, 600_000, 2, w, |_| {});
    m.run();
    let v = m.verdict();
    assert_eq!(v.violations, 0, "seed 2: {:?}", v.samples);
    m.assert_clean(2);
    let s = m.stats();
    assert!(s.rolled_back > 100, "{s:?}");
    let rolled: Vec<&TpccCommitted> = m
        .committed
        .iter()
        .filter(|c| {
            c.results
                .iter()
                .all(|(_, r)| matches!(r, PartResult::NewOrder(p) if p.rolled_back))
        })
        .collect();
    assert_eq!(rolled.len() as u64, s.rolled_back);
}

#[test]
fn lost_replies_are_sent_again_2_1() {
    let mut m = twelve(800_000, 3);
    m.loss = 0.05;
    m.run();
    let v = m.verdict();
    assert_eq!(v.violations, 0, "seed 3: {:?}", v.samples);
    m.assert_clean(3);
    let s = m.stats();
    assert!(s.replies_resent > 50, "{s:?}");
    assert!(m.live_idle(), "seed 3: every transaction finished");
}

#[test]
fn refused_sends_are_sent_again() {
    let mut m = twelve(800_000, 4);
    m.refuse = 0.1;
    m.run();
    let v = m.verdict();
    assert_eq!(v.violations, 0, "seed 4: {:?}", v.samples);
    m.assert_clean(4);
    let s = m.stats();
    assert!(s.refused > 200 && v.checks.transactions > 500, "{s:?}");
    assert!(
        m.live_idle(),
        "seed 4: every transaction and reply went out"
    );
}

#[test]
fn a_replica_crash_leaves_the_live_replicas_agreeing_5_2() {
    let mut m = twelve(1_000_000, 5);
    // Process 5: replica 1 of shard 1, and an initiator.
    m.crash_at(5, 400_000);
    m.run();
    let v = m.verdict();
    assert_eq!(v.violations, 0, "seed 5: {:?}", v.samples);
    m.assert_clean(5);
    assert_eq!(
        v.checks.shards_compared, 4,
        "shard 1 still has two live replicas"
    );
    let s = m.stats();
    assert_eq!(s.failed, 0);
    assert!(v.checks.transactions > 1_000, "{v:?}");
    // Transactions kept committing after the crash.
    let late = m.committed.iter().filter(|c| c.call_ns > 500_000).count();
    assert!(late > 300, "{late} committed after the crash");
    assert!(m.live_idle());
    let live = &m.procs[1];
    assert_eq!(
        live.failed().get(&ProcId(5)),
        Some(&Timestamp::new(400_000)),
        "the replicas of shard 1 agree on the failure timestamp"
    );
}

#[test]
fn recalled_scatterings_are_sent_again_5_2() {
    let mut m = twelve(1_000_000, 6);
    m.recall = true;
    m.crash_at(9, 300_000);
    m.run();
    let v = m.verdict();
    assert_eq!(v.violations, 0, "seed 6: {:?}", v.samples);
    m.assert_clean(6);
    let s = m.stats();
    assert!(s.recalled > 0, "{s:?}");
    assert_eq!(s.failed, 0);
    assert!(m.live_idle());
    let again = m.committed.iter().filter(|c| c.attempts > 1).count();
    assert!(
        again > 0,
        "recalled transactions committed at their second attempt"
    );
}

#[test]
fn a_shard_with_no_live_replica_fails_its_transactions_5_2() {
    let mut m = twelve(800_000, 7);
    for p in [1, 5, 9] {
        m.crash_at(p, 300_000);
    }
    m.run();
    let v = m.verdict();
    assert_eq!(v.violations, 0, "seed 7: {:?}", v.samples);
    m.assert_clean(7);
    assert_eq!(v.checks.shards_compared, 3);
    let s = m.stats();
    assert!(s.failed > 0, "{s:?}");
    assert!(
        v.checks.unfinished > 0,
        "delivered but never committed: {v:?}"
    );
    let out = &v.checks.left_out;
    assert_eq!(
        out.get(left_out::SHARD_WITHOUT_REPLICA),
        Some(&1),
        "{out:?}"
    );
    assert!(out.contains_key(left_out::CUSTOMER_PARTIAL), "{out:?}");
    assert!(m.live_idle());
}

#[test]
fn a_broken_total_order_is_caught() {
    // Deliveries to process 6 (replica 1 of shard 2) come out of timestamp order: its replica
    // diverges from the other two, and the checker says so.
    let mut m = twelve(400_000, 8);
    m.misorder = Some(6);
    m.run();
    let v = m.verdict();
    let s = m.stats();
    assert!(s.reordered > 0, "{s:?}");
    assert!(v.violations > 0, "seed 8: nothing caught");
    let k = kinds(&v);
    assert!(
        k.contains("replicas-diverge") || k.contains("result"),
        "{k:?}"
    );
}

#[test]
fn the_same_seed_gives_the_same_run() {
    let run = |seed| {
        let mut m = twelve(300_000, seed);
        m.loss = 0.02;
        m.run();
        let digests: Vec<u64> = m
            .procs
            .iter()
            .filter_map(|p| p.shard().map(|s| s.1.digest()))
            .collect();
        (m.committed, digests)
    };
    let a = run(9);
    assert!(a.0.len() > 200);
    assert_eq!(a, run(9));
    assert_ne!(a.0, run(10).0);
}

#[test]
fn garbage_is_dropped_and_counted() {
    let w = workload(TpccScale::small(), 1);
    let mut cfg = TpccConfig::new(ProcId(0), 12, w.clone(), 0);
    cfg.layout = TpccLayout::new(4, 3);
    let mut p = TpccProcess::new(cfg, TxnGen::new(w.clone(), 1, 1));
    let mut g = TxnGen::new(w, 1, 2);
    let layout = TpccLayout::new(4, 3);
    let mine = (0..)
        .map(|_| g.next_txn())
        .find(|t| layout.shards_of(t).contains(&0))
        .unwrap();
    let elsewhere = (0..)
        .map(|_| g.next_txn())
        .find(|t| !layout.shards_of(t).contains(&0))
        .unwrap();
    let mut invalid = mine.clone();
    match &mut invalid {
        TxnInput::NewOrder(o) => o.w_id = 99,
        TxnInput::Payment(pay) => pay.w_id = 99,
    }
    let ok = codec::encode_request(1, &mine);
    let reply = codec::encode_reply(1, 5, 3, &PartResult::Payment(PaymentPart::default()));
    let invalid = codec::encode_request(2, &invalid);
    let elsewhere = codec::encode_request(3, &elsewhere);
    let cases: [(&[u8], bool, u32); 7] = [
        (&[3, 0, 1, 2], true, 4),
        (&[], true, 4),
        (&ok, false, 4),
        (&invalid, true, 4),
        (&elsewhere, true, 4),
        // A reply naming shard 3 from process 4, a replica of shard 0.
        (&reply, false, 4),
        (&[4, 1], false, 4),
    ];
    for (payload, reliable, src) in cases {
        let input = AppInput::Deliver {
            src: ProcId(src),
            ts: Timestamp::new(5),
            reliable,
            payload,
        };
        p.handle(Instant(1), input);
    }
    assert_eq!(p.stats().malformed, 7);
    assert!(p.poll_send().is_none());
    // The well-formed request is applied and answered.
    let input = AppInput::Deliver {
        src: ProcId(4),
        ts: Timestamp::new(6),
        reliable: true,
        payload: &ok,
    };
    p.handle(Instant(2), input);
    let s = p.poll_send().unwrap();
    assert!(!s.reliable && s.parts.len() == 1 && s.parts[0].0 == ProcId(4));
    let r = codec::decode_reply(&s.parts[0].1).unwrap();
    assert_eq!((r.txn, r.req_ts, r.shard), (1, 6, 0));
}

#[test]
fn replies_are_kept_for_a_bounded_time() {
    let w = workload(TpccScale::small(), 11);
    let mut m = Model::build(TpccLayout::new(4, 3), 12, 2, 400_000, 11, w, |c| {
        c.reply_keep_ns = 50_000;
    });
    m.run();
    // The run drained long after the last reply: at most the last 50 µs' replies are kept.
    let kept: usize = m.procs.iter().map(|p| p.replies_kept()).sum();
    let applied = m.stats().parts_applied as usize;
    assert!(kept * 4 < applied, "{kept} kept of {applied}");
}

#[test]
fn a_process_told_it_failed_gives_up_and_keeps_what_it_sent_below_its_failure_5_2() {
    let w = workload(TpccScale::small(), 1);
    let mut cfg = TpccConfig::new(ProcId(0), 12, w.clone(), 2);
    cfg.layout = TpccLayout::new(4, 3);
    let mut p = TpccProcess::new(cfg, TxnGen::new(w, 1, 3));
    p.handle(Instant(0), AppInput::Timeout);
    let tags: Vec<u64> = std::iter::from_fn(|| p.poll_send())
        .map(|s| s.tag)
        .collect();
    assert_eq!(tags.len(), 2);
    for (tag, ts) in tags.iter().zip([10, 20]) {
        let ts = Timestamp::new(ts);
        p.handle(Instant(1), AppInput::Sent { tag: *tag, ts });
    }
    let failed = AppInput::ProcFailed {
        proc: ProcId(0),
        ts: Timestamp::new(15),
    };
    p.handle(Instant(2), failed);
    assert!(p.idle() && p.shard().is_none() && p.poll_send().is_none());
    let u = p.unfinished();
    assert_eq!(
        u.len(),
        1,
        "only the one stamped below its failure takes effect"
    );
    assert_eq!(
        (u[0].txn, u[0].key, u[0].return_ns),
        (tags[0], 10, u64::MAX)
    );
    p.handle(Instant(1_000_000), AppInput::Timeout);
    assert!(p.poll_send().is_none(), "it issues no more");
    assert_eq!(p.stats().failed, 2);
}
