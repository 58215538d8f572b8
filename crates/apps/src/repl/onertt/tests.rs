//! 1-RTT replication in a small model of best-effort 1Pipe: every ordered message takes the same
//! delay, so each receiver takes them in timestamp order (the sender breaks ties), as 1Pipe
//! delivers them; a lost one is reported to its sender (§2.1's send-failure callback). An
//! unordered message (`AppSend::ordered` false) takes any delay up to that one, so it overtakes
//! ordered messages and other unordered ones, and a lost one is reported to nobody (as live,
//! outside 1Pipe). A crashed process is reported to everyone (§5.2's process-failure callback).

use super::codec::{decode, encode, Msg, Value, WireEntry};
use super::*;
use crate::repl::{ReplWorkload, ReplicaLog};
use onepipe_proto::rng::Rng;
use onepipe_proto::Timestamp;
use onepipe_testalloc::fuzz::{self, ensure, Bound};
use proptest::prelude::*;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Ev {
    /// (dst, src, ts, payload)
    Deliver(u32, u32, u64, Vec<u8>),
    /// (sender, dst, ts)
    Lost(u32, u32, u64),
    Failed(u32, u32),
    Timer(u32),
}

pub(super) struct Net {
    pub procs: Vec<OneRttProcess>,
    pub done: Vec<ReplDone>,
    crashed: BTreeSet<u32>,
    q: BinaryHeap<Reverse<(u64, u64, Ev)>>,
    n: u64,
    now: u64,
    delay: u64,
    loss: f64,
    rng: Rng,
    timers: Vec<Option<u64>>,
    /// Drop every message from `.0` to `.1`.
    pub cut: Option<(u32, u32)>,
    /// Sends of entries, and of commit notices alone.
    pub entries_sent: u64,
    /// See `entries_sent`.
    pub commits_sent: u64,
}

impl Net {
    /// `replicas` replicas and `clients` clients (processes after them), `window` each.
    pub fn new(replicas: u32, clients: u32, window: u32, loss: f64, seed: u64) -> Net {
        let workload = ReplWorkload {
            keys: 8,
            read_ratio: 0.4,
            cas_ratio: 0.3,
            value_size: 16,
        };
        Net::with(replicas, clients, window, loss, seed, workload)
    }

    /// As [`Net::new`], with the clients' `workload`.
    pub fn with(
        replicas: u32,
        clients: u32,
        window: u32,
        loss: f64,
        seed: u64,
        workload: ReplWorkload,
    ) -> Net {
        let procs = replicas + clients;
        let procs: Vec<OneRttProcess> = (0..procs)
            .map(|p| {
                let mut cfg = ReplConfig::new(
                    ProcId(p),
                    replicas,
                    procs,
                    workload.clone(),
                    if p >= replicas { window } else { 0 },
                );
                cfg.start = Instant(1_000);
                cfg.stop = Instant(2_000_000);
                cfg.suspect_ns = 50_000;
                cfg.retain = 1 << 20;
                OneRttProcess::new(
                    cfg,
                    CmdGen::new(workload.clone(), p, seed ^ u64::from(p)),
                    7,
                )
            })
            .collect();
        let n = procs.len();
        let mut net = Net {
            procs,
            done: Vec::new(),
            crashed: BTreeSet::new(),
            q: BinaryHeap::new(),
            n: 0,
            now: 0,
            delay: 5_000,
            loss,
            rng: Rng::new(seed),
            timers: vec![None; n],
            cut: None,
            entries_sent: 0,
            commits_sent: 0,
        };
        for p in 0..n as u32 {
            net.input(p, AppInput::Timeout);
        }
        net
    }

    fn push(&mut self, t: u64, ev: Ev) {
        self.n += 1;
        self.q.push(Reverse((t, self.n, ev)));
    }

    fn input(&mut self, p: u32, input: AppInput<'_>) {
        if self.crashed.contains(&p) {
            return;
        }
        let now = Instant(self.now);
        self.procs[p as usize].handle(now, input);
        self.flush(p);
    }

    fn flush(&mut self, p: u32) {
        let now = self.now;
        while let Some(s) = self.procs[p as usize].poll_send() {
            match s.parts.first().and_then(|(_, b)| decode(b)) {
                Some(Msg::Entry { .. }) => self.entries_sent += 1,
                Some(Msg::Commit { .. }) => self.commits_sent += 1,
                _ => {}
            }
            // Every stamp of a sender is distinct and increasing, as 1Pipe's are.
            self.now += 1;
            let ts = self.now;
            for (dst, bytes) in &s.parts {
                let lost =
                    self.loss > 0.0 && self.rng.chance(self.loss) || self.cut == Some((p, dst.0));
                let delay = if s.ordered {
                    self.delay
                } else {
                    1 + self.rng.below(self.delay)
                };
                if !lost {
                    self.push(ts + delay, Ev::Deliver(dst.0, p, ts, bytes.to_vec()));
                } else if s.ordered {
                    self.push(ts + 2 * self.delay, Ev::Lost(p, dst.0, ts));
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

    /// Crashes `p` now; everyone else hears of it after `delay`.
    pub fn crash(&mut self, p: u32) {
        self.crashed.insert(p);
        for q in 0..self.procs.len() as u32 {
            if q != p {
                self.push(self.now + self.delay, Ev::Failed(q, p));
            }
        }
    }

    /// Runs until `until` (ns).
    pub fn run(&mut self, until: u64) {
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
                Ev::Failed(q, p) => self.input(
                    q,
                    AppInput::ProcFailed {
                        proc: ProcId(p),
                        ts: Timestamp::new(t),
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
        self.now = self.now.max(until);
    }

    pub fn logs(&self) -> Vec<ReplicaLog> {
        self.procs
            .iter()
            .enumerate()
            .filter(|(p, _)| !self.crashed.contains(&(*p as u32)))
            .filter_map(|(_, p)| p.replica_log())
            .collect()
    }

    pub fn idle(&self) -> bool {
        self.procs
            .iter()
            .enumerate()
            .all(|(p, x)| self.crashed.contains(&(p as u32)) || x.idle())
    }

    pub fn stats(&self) -> ReplStats {
        let mut s = ReplStats::default();
        for p in &self.procs {
            s += p.stats();
        }
        s
    }
}

/// Every live replica's log is a prefix of the longest one; every completed write is committed
/// at every live replica whose commit point reaches the longest log's end; replaying the
/// longest log gives every completed write its output.
pub(super) fn check(net: &Net) {
    let logs = net.logs();
    // Committed prefixes are identical; the longest is the reference.
    let longest = logs
        .iter()
        .max_by_key(|l| l.commit)
        .expect("a live replica");
    for l in &logs {
        assert_eq!(l.start, 0);
        let c = l.commit as usize;
        assert_eq!(
            &longest.entries[..c],
            &l.entries[..c],
            "replica {} is not a prefix of replica {}",
            l.replica,
            longest.replica
        );
    }
    // Replay the committed log of the replica that committed most.
    let best = logs.iter().max_by_key(|l| l.commit).expect("a replica");
    let writes: HashMap<(u32, u64), &ReplDone> = net
        .done
        .iter()
        .filter(|d| d.cmd.is_write())
        .map(|d| ((d.client, d.id), d))
        .collect();
    let committed: HashSet<(u32, u64)> = best.committed_writes.iter().copied().collect();
    for k in writes.keys() {
        assert!(committed.contains(k), "acknowledged write {k:?} lost");
    }
    let p = net
        .procs
        .iter()
        .find(|p| p.cfg.me.0 == best.replica)
        .and_then(|p| p.replica.as_ref())
        .expect("the replica");
    let mut m = KvMachine::default();
    let mut written: HashMap<Key, HashSet<Val>> = HashMap::new();
    for e in p.log.iter().take(p.commit as usize) {
        let out = m.apply(&e.e.cmd);
        if let Some(v) = e.e.cmd.written() {
            written.entry(e.e.cmd.key()).or_default().insert(v);
        }
        if let Some(d) = writes.get(&(e.e.client, e.e.id)) {
            assert_eq!(d.output, out, "output of {d:?}");
        }
    }
    for d in net.done.iter().filter(|d| !d.cmd.is_write()) {
        if let Some(v) = d.output {
            assert!(
                written.get(&d.cmd.key()).is_some_and(|s| s.contains(&v)),
                "read {d:?} saw a value no committed write wrote"
            );
        }
    }
}

#[test]
fn one_round_trip_without_loss() {
    let mut net = Net::new(3, 4, 4, 0.0, 1);
    net.run(3_000_000);
    assert!(net.idle());
    let s = net.stats();
    assert!(net.done.len() > 500, "{}", net.done.len());
    assert_eq!(s.recoveries, 0, "{s:?}");
    assert_eq!(s.rejected, 0);
    // A write returns in one round trip (two one-way delays) plus the stamping steps.
    for d in net.done.iter().filter(|d| d.cmd.is_write()) {
        let lat = d.return_ns - d.call_ns;
        assert!(lat < 2 * net.delay + 100, "write latency {lat} ns: {d:?}");
    }
    check(&net);
}

#[test]
fn loss_is_repaired_by_recovery() {
    for seed in 0..6 {
        let mut net = Net::new(3, 3, 3, 0.01, seed);
        net.run(6_000_000);
        assert!(net.idle(), "seed {seed}: still busy");
        let s = net.stats();
        assert!(s.recoveries > 0, "seed {seed}: {s:?}");
        check(&net);
        // A lost message leaves no replica out of the view.
        let commits: Vec<u64> = net.logs().iter().map(|l| l.commit).collect();
        assert!(
            commits.iter().all(|&c| c == commits[0]),
            "seed {seed}: {commits:?}"
        );
        eprintln!("seed {seed}: {} ops, {s:?}", net.done.len());
    }
}

/// A slow network: one delivery takes a quarter of `suspect_ns` and more, so a recovery's
/// two phases (four deliveries) do not fit one `suspect_ns`. Each phase has its own deadline,
/// so recoveries still finish (`onepipe vopr --apps` seeds 37 and 100: before, the replicas
/// started rounds for ever).
#[test]
fn recovery_finishes_when_a_delivery_takes_a_quarter_of_suspect() {
    for seed in 0..4 {
        let mut net = Net::new(3, 3, 3, 0.01, seed);
        net.delay = 13_000; // 4 × 13 µs > suspect_ns = 50 µs > 2 × 13 µs
        net.run(12_000_000);
        assert!(net.idle(), "seed {seed}: still busy");
        let s = net.stats();
        assert!(s.recoveries > 0, "seed {seed}: {s:?}");
        check(&net);
    }
}

/// Slower still: a round trip takes longer than `suspect_ns` (and, at the slowest, one
/// delivery does), so each phase's deadline passes with its answers on their way. A
/// coordinator asks again in both phases under the same ballot, standbys and coordinators of
/// lower ballots stand down once they take a ballot, and a recovery's waits double per round,
/// so rounds still finish (`onepipe vopr --apps` seed 20705, a round trip of ~220 µs against
/// 200: before, no recovery finished once one was needed, and the replicas pre-empted each
/// other's ballots for ever).
#[test]
fn recovery_finishes_when_a_round_trip_takes_longer_than_suspect() {
    for (replicas, delay) in [
        (3, 30_000),
        (5, 30_000),
        (5, 40_000),
        (3, 120_000),
        (5, 120_000),
    ] {
        for seed in 0..2 {
            let mut net = Net::new(replicas, 3, 3, 0.01, seed);
            net.delay = delay; // suspect_ns = 50 µs < 2 × delay
            net.run(12_000_000);
            assert!(
                net.idle(),
                "{replicas} replicas, delay {delay}, seed {seed}: still busy"
            );
            let s = net.stats();
            assert!(s.recoveries > 0, "seed {seed}: {s:?}");
            check(&net);
        }
    }
}

/// A replica that missed the Decide of its next epoch, hearing a Prepare of a later one, asks
/// the sender for the value at once — a Prepare of its next epoch, which a replica that
/// installed that epoch answers with its Decide — and takes no ballot. Waiting for its watchdog
/// instead, it fell behind by two epochs and could never rejoin: the view kept too few
/// replicas for a majority once one crashed (`onepipe vopr --apps` seeds 350, 481, 1054 and
/// 1178, once a replica's watchdog counted from the last ballot it took).
#[test]
fn a_replica_an_epoch_behind_asks_for_the_decide_it_missed() {
    let workload = ReplWorkload::default();
    let cfg = ReplConfig::new(ProcId(2), 3, 3, workload.clone(), 0);
    let mut p = OneRttProcess::new(cfg, CmdGen::new(workload, 2, 1), 7);
    let later = encode(&Msg::Prepare {
        epoch: 2,
        ballot: 256,
    });
    p.handle(
        Instant(1_000),
        AppInput::Deliver {
            src: ProcId(0),
            ts: Timestamp::new(900),
            reliable: false,
            payload: &later,
        },
    );
    let sent = p.poll_send().expect("an answer");
    assert_eq!(sent.parts.len(), 1);
    assert_eq!(sent.parts[0].0, ProcId(0));
    assert_eq!(
        decode(&sent.parts[0].1),
        Some(Msg::Prepare {
            epoch: 1,
            ballot: 0
        })
    );
    assert!(p.poll_send().is_none());
    let r = p.replica.as_ref().expect("a replica");
    assert_eq!((r.epoch, r.promised, r.frozen_since), (0, 0, None));
}

/// Hands `m` from `src` to `p` at `t`; what `p` sends in answer, decoded, with its
/// destinations.
fn deliver(p: &mut OneRttProcess, t: u64, src: u32, m: &Msg) -> Vec<(Vec<u32>, Msg)> {
    let payload = encode(m);
    p.handle(
        Instant(t),
        AppInput::Deliver {
            src: ProcId(src),
            ts: Timestamp::new(t),
            reliable: false,
            payload: &payload,
        },
    );
    sent(p)
}

/// What `p` sends, decoded, with its destinations.
fn sent(p: &mut OneRttProcess) -> Vec<(Vec<u32>, Msg)> {
    let mut out = Vec::new();
    while let Some(s) = p.poll_send() {
        let dsts = s.parts.iter().map(|(d, _)| d.0).collect();
        out.push((dsts, decode(&s.parts[0].1).expect("a message")));
    }
    out
}

/// A recovery leaves out of the view only replicas 1Pipe declared failed (§2.1's
/// process-failure callback): a live replica whose Promises are lost is asked again, in a new
/// round once the coordinator's tries are spent, never left out for its silence — it could
/// never rejoin (no state transfer), and a view shrunk by loss tolerates one crash fewer.
/// Before, the coordinator proposed the view of the majority that answered: in `onepipe vopr
/// --apps` seed 101234 a replica that had missed a Decide spent the coordinator's tries
/// catching up, its Promise was then lost, and once one of the two replicas left crashed, the
/// survivor could not gather a majority of three: every client's write stayed open.
#[test]
fn a_live_replica_is_left_out_of_a_view_only_once_declared_failed() {
    let workload = ReplWorkload::default();
    let cfg = ReplConfig::new(ProcId(0), 3, 3, workload.clone(), 0);
    let mut p = OneRttProcess::new(cfg, CmdGen::new(workload, 0, 1), 7);
    let prepare = |out: &[(Vec<u32>, Msg)]| {
        out.iter().find_map(|(dsts, m)| match m {
            Msg::Prepare { epoch: 1, ballot } if *dsts == [0, 1, 2] => Some(*ballot),
            _ => None,
        })
    };
    let mut t = 1_000;
    let out = deliver(&mut p, t, 1, &Msg::Recover { epoch: 0 });
    let mut ballot = prepare(&out).expect("the coordinator starts a round");
    let mut rounds = 1;
    let promise = |ballot| Msg::Promise {
        epoch: 1,
        ballot,
        accepted: None,
        commit: 0,
        tail: Vec::new(),
    };
    // Replica 2's Promises are all lost: replicas 0 and 1 promise every round.
    for _ in 0..24 {
        for src in [0, 1] {
            assert!(deliver(&mut p, t, src, &promise(ballot)).is_empty());
        }
        t = p.poll_timeout().expect("a deadline").0;
        p.handle(Instant(t), AppInput::Timeout);
        let out = sent(&mut p);
        assert!(
            !out.iter().any(|(_, m)| matches!(m, Msg::Accept { .. })),
            "a view proposed without live replica 2: {out:?}"
        );
        if let Some(b) = prepare(&out) {
            assert!(b > ballot);
            (ballot, rounds) = (b, rounds + 1);
        }
    }
    assert!(rounds > 2, "{rounds} rounds");
    // Once declared failed, it is left out.
    p.handle(
        Instant(t),
        AppInput::ProcFailed {
            proc: ProcId(2),
            ts: Timestamp::new(t),
        },
    );
    let mut out = sent(&mut p);
    for src in [0, 1] {
        out.extend(deliver(&mut p, t, src, &promise(ballot)));
    }
    let members = out.iter().find_map(|(_, m)| match m {
        Msg::Accept { value, .. } => Some(value.members),
        _ => None,
    });
    assert_eq!(members, Some(0b011), "{out:?}");
}

/// A client whose write misses an Ack asks the silent replica for it again, in the same epoch,
/// before asking for a recovery (§2.2.2: "in the case of packet loss, the client simply
/// retransmits"): the replica holds the write and answers as for a duplicate, with the position
/// and checksum of the original; a replica that lacks it rejects the request. Before, a missing
/// Ack always asked for a recovery, after which every Entry and Ack had to get through again in
/// the new epoch: in `onepipe vopr --apps` seed 105817 (five replicas, 1% bursty loss per link)
/// a client's last write missed some replica's Ack or Entry in epoch after epoch (54 by the end
/// of the drain) and never finished.
#[test]
fn a_missing_ack_is_asked_for_again_before_a_recovery() {
    let workload = ReplWorkload {
        keys: 8,
        read_ratio: 0.0,
        cas_ratio: 0.0,
        value_size: 16,
    };
    let mut procs: Vec<OneRttProcess> = (0..6)
        .map(|p| {
            let cfg = ReplConfig::new(ProcId(p), 5, 6, workload.clone(), u32::from(p == 5));
            OneRttProcess::new(cfg, CmdGen::new(workload.clone(), p, 1), 7)
        })
        .collect();
    let mut t = 1_000;
    procs[5].handle(Instant(t), AppInput::Timeout);
    let out = sent(&mut procs[5]);
    let [(dsts, entry)] = &out[..] else {
        panic!("one write: {out:?}")
    };
    assert_eq!(*dsts, [0, 1, 2, 3, 4]);
    assert!(matches!(entry, Msg::Entry { seq: 0, .. }), "{entry:?}");
    let mut acks = Vec::new();
    for (r, replica) in procs.iter_mut().enumerate().take(5) {
        let out = deliver(replica, t, 5, entry);
        let [(to, ack @ Msg::Ack { .. })] = &out[..] else {
            panic!("replica {r} acks: {out:?}")
        };
        assert_eq!(*to, [5]);
        acks.push(ack.clone());
    }
    // Replica 4's Ack is lost.
    for (r, ack) in acks.iter().enumerate().take(4) {
        assert!(deliver(&mut procs[5], t, r as u32, ack).is_empty());
    }
    t = procs[5].poll_timeout().expect("the write's timer").0;
    procs[5].handle(Instant(t), AppInput::Timeout);
    let out = sent(&mut procs[5]);
    assert!(
        !out.iter().any(|(_, m)| matches!(m, Msg::Recover { .. })),
        "a recovery asked for a lost Ack: {out:?}"
    );
    let [(dsts, ask)] = &out[..] else {
        panic!("the Ack asked for again: {out:?}")
    };
    assert_eq!(*dsts, [4], "only the silent replica is asked again");
    assert_eq!(*ask, Msg::AckAgain { epoch: 0, seq: 0 });
    // A replica that lacks the entry (here: for another client) rejects the request.
    let out = deliver(&mut procs[3], t, 6, ask);
    assert!(
        matches!(&out[..], [(to, Msg::Reject { epoch: 0, seq: 0, expected: 0 })] if *to == [6]),
        "{out:?}"
    );
    // Replica 4 holds it: answered as the original was.
    let out = deliver(&mut procs[4], t, 5, ask);
    let [(to, again)] = &out[..] else {
        panic!("replica 4 answers: {out:?}")
    };
    assert_eq!((&to[..], again), (&[5][..], &acks[4]));
    let out = deliver(&mut procs[5], t, 4, again);
    assert!(
        out.iter().any(|(_, m)| matches!(
            m,
            Msg::Entry {
                seq: 1,
                commit: 1,
                ..
            }
        )),
        "the write is replicated, its commit point on the next entry: {out:?}"
    );
    let done = procs[5].poll_done().expect("the write returns");
    assert!(done.cmd.is_write());
    assert!(procs.iter().all(|p| p.stats().recoveries == 0));
}

/// What `p` sends, decoded, with its destinations and whether it is in 1Pipe's order.
fn sent_ordered(p: &mut OneRttProcess) -> Vec<(bool, Vec<u32>, Msg)> {
    let mut out = Vec::new();
    while let Some(s) = p.poll_send() {
        let dsts = s.parts.iter().map(|(d, _)| d.0).collect();
        out.push((s.ordered, dsts, decode(&s.parts[0].1).expect("a message")));
    }
    out
}

/// Hands `m` from `src` to `p` at `t`, as [`deliver`]; what `p` sends, with its order flag.
fn deliver_ordered(p: &mut OneRttProcess, t: u64, src: u32, m: &Msg) -> Vec<(bool, Vec<u32>, Msg)> {
    let payload = encode(m);
    p.handle(
        Instant(t),
        AppInput::Deliver {
            src: ProcId(src),
            ts: Timestamp::new(t),
            reliable: false,
            payload: &payload,
        },
    );
    sent_ordered(p)
}

/// Replicas `0..replicas` and one client after them (a window of `window`), drawing from
/// `workload` with `seed`.
fn cluster(replicas: u32, window: u32, workload: &ReplWorkload, seed: u64) -> Vec<OneRttProcess> {
    let n = replicas + 1;
    (0..n)
        .map(|p| {
            let w = if p == replicas { window } else { 0 };
            let cfg = ReplConfig::new(ProcId(p), replicas, n, workload.clone(), w);
            OneRttProcess::new(cfg, CmdGen::new(workload.clone(), p, seed), 7)
        })
        .collect()
}

/// A replica at `me` of three, alone: entries and reads are handed to it by the test.
fn lone_replica(me: u32) -> OneRttProcess {
    let workload = ReplWorkload::default();
    let cfg = ReplConfig::new(ProcId(me), 3, 6, workload.clone(), 0);
    OneRttProcess::new(cfg, CmdGen::new(workload, me, 1), 7)
}

fn entry(seq: u64, cmd: Cmd, commit: u64) -> Msg {
    Msg::Entry {
        epoch: 0,
        seq,
        id: seq,
        cmd,
        pad: 0,
        commit,
    }
}

/// §2.2.2: "the response message does not need to be ordered by 1Pipe". A replica's Ack — to
/// an entry or to an AckAgain — its Reject and its read reply go unordered; the client's
/// entries, reads and AckAgains go in 1Pipe's order (the log's order, a read's point, and the
/// Reject of an entry stamped before the AckAgain), and its commit notice alone goes unordered.
#[test]
fn replies_and_notices_go_unordered_entries_reads_and_ack_agains_in_order_2_2_2() {
    let workload = ReplWorkload {
        keys: 1,
        read_ratio: 0.5,
        cas_ratio: 0.0,
        value_size: 0,
    };
    // A seed whose client draws a write, then a read.
    let seed = (0..1000)
        .find(|&s| {
            let mut g = CmdGen::new(workload.clone(), 3, s);
            g.next_cmd().is_write() && !g.next_cmd().is_write()
        })
        .expect("a seed");
    let mut procs = cluster(3, 2, &workload, seed);
    let t = 1_000;
    procs[3].handle(Instant(t), AppInput::Timeout);
    let out = sent_ordered(&mut procs[3]);
    let [(true, to_all, write), (true, to_one, read)] = &out[..] else {
        panic!("an ordered entry and an ordered read: {out:?}")
    };
    assert_eq!(*to_all, [0, 1, 2]);
    assert!(matches!(write, Msg::Entry { commit: 0, .. }), "{write:?}");
    assert!(matches!(read, Msg::Read { .. }), "{read:?}");
    // The read reaches its replica first: evaluated before the write, answered at once.
    let out = deliver_ordered(&mut procs[to_one[0] as usize], t, 3, read);
    assert!(
        matches!(&out[..], [(false, to, Msg::ReadReply { ok: true, value: None, .. })] if *to == [3]),
        "{out:?}"
    );
    let mut acks = Vec::new();
    for (r, replica) in procs.iter_mut().enumerate().take(3) {
        let out = deliver_ordered(replica, t + 1, 3, write);
        let [(false, to, ack @ Msg::Ack { .. })] = &out[..] else {
            panic!("replica {r}: an unordered Ack: {out:?}")
        };
        assert_eq!(*to, [3]);
        acks.push(ack.clone());
    }
    // Asked again, the replica answers unordered too; an entry it lacks, it rejects unordered.
    let out = deliver_ordered(&mut procs[0], t + 2, 3, &Msg::AckAgain { epoch: 0, seq: 0 });
    assert_eq!(out, [(false, vec![3], acks[0].clone())]);
    let out = deliver_ordered(&mut procs[0], t + 2, 3, &Msg::AckAgain { epoch: 0, seq: 1 });
    assert!(
        matches!(&out[..], [(false, _, Msg::Reject { seq: 1, .. })]),
        "{out:?}"
    );
    // The client's own AckAgain is ordered: it has the write's timer fire with one Ack in.
    assert!(deliver_ordered(&mut procs[3], t + 3, 0, &acks[0]).is_empty());
    let at = procs[3].poll_timeout().expect("the write's timer").0;
    procs[3].handle(Instant(at), AppInput::Timeout);
    let out = sent_ordered(&mut procs[3]);
    assert!(
        out.iter()
            .any(|(o, to, m)| *o && *to == [1, 2] && matches!(m, Msg::AckAgain { seq: 0, .. })),
        "{out:?}"
    );
}

/// §2.2.2 leaves the commit notice to the design; here the client's commit point rides on its
/// entries. A replica takes the point an entry carries as it takes a notice — in its epoch, not
/// while frozen for a recovery, never past its log's end — whatever becomes of the entry itself
/// (appended, a duplicate, or rejected for a gap).
#[test]
fn a_commit_point_carried_by_an_entry_advances_the_replicas_commit_point() {
    let mut r = lone_replica(0);
    let commit = |p: &OneRttProcess| p.replica.as_ref().expect("a replica").commit;
    let put = |v| Cmd::Put(1, v);
    assert_eq!(deliver(&mut r, 1_000, 3, &entry(0, put(10), 0)).len(), 1);
    assert_eq!(commit(&r), 0);
    deliver(&mut r, 1_001, 3, &entry(1, put(11), 1));
    assert_eq!(commit(&r), 1, "carried by the next entry");
    // Never past the log's end as the entry arrives (2 entries), even if it claims more.
    deliver(&mut r, 1_002, 3, &entry(2, put(12), 9));
    assert_eq!(commit(&r), 2);
    // Carried by a duplicate, and by an entry rejected for a gap, it still counts.
    let out = deliver(&mut r, 1_003, 3, &entry(1, put(11), 3));
    assert!(
        matches!(&out[..], [(_, Msg::Ack { seq: 1, .. })]),
        "{out:?}"
    );
    assert_eq!(commit(&r), 3);
    deliver(&mut r, 1_004, 4, &entry(0, Cmd::Put(2, 20), 0));
    let out = deliver(&mut r, 1_005, 3, &entry(7, put(17), 4));
    assert!(
        matches!(&out[..], [(_, Msg::Reject { seq: 7, .. })]),
        "{out:?}"
    );
    assert_eq!(commit(&r), 4);
    // Frozen for a recovery (its Promise gave its commit point), it takes no more.
    deliver(&mut r, 1_006, 4, &entry(1, Cmd::Put(2, 21), 4));
    let out = deliver(
        &mut r,
        1_007,
        1,
        &Msg::Prepare {
            epoch: 1,
            ballot: 257,
        },
    );
    assert!(
        matches!(&out[..], [(_, Msg::Promise { commit: 4, .. })]),
        "{out:?}"
    );
    deliver(&mut r, 1_008, 3, &entry(3, put(13), 5));
    assert_eq!(commit(&r), 4, "frozen");
}

/// A read waits until every entry before it is committed (§2.2.2: an uncommitted entry could
/// still be removed by a recovery), and the commit point that frees it may come on the next
/// entry of any client: no separate notice is needed.
#[test]
fn a_parked_read_is_answered_on_a_piggybacked_commit_point_without_a_notice() {
    let mut r = lone_replica(1);
    deliver(&mut r, 1_000, 3, &entry(0, Cmd::Put(5, 42), 0));
    // Client 4 reads key 5 after the put: parked, the put is not committed.
    let out = deliver_ordered(&mut r, 1_001, 4, &Msg::Read { rid: 9, key: 5 });
    assert!(out.is_empty(), "answered before the put committed: {out:?}");
    // Client 3's next entry says the put is committed: the read is answered, unordered.
    let out = deliver_ordered(&mut r, 1_002, 3, &entry(1, Cmd::Put(6, 1), 1));
    let reply = out
        .iter()
        .find(|(_, to, m)| *to == [4] && matches!(m, Msg::ReadReply { .. }));
    assert_eq!(
        reply,
        Some(&(
            false,
            vec![4],
            Msg::ReadReply {
                rid: 9,
                ok: true,
                value: Some(42)
            }
        )),
        "{out:?}"
    );
    assert!(
        out.iter()
            .any(|(_, to, m)| *to == [3] && matches!(m, Msg::Ack { seq: 1, .. })),
        "{out:?}"
    );
}

/// The client's rule: a commit point rides on the entries sent in the input that advanced it
/// (the next write fills the window at once); when none is sent — the next command is a read,
/// or the run is over — it goes alone, at the end of that input, unordered, to every replica,
/// once.
#[test]
fn a_commit_point_goes_alone_only_when_no_entry_of_the_input_carries_it() {
    let acks = |seq, pos| -> Vec<(u32, Msg)> {
        (0..3)
            .map(|r| {
                let m = Msg::Ack {
                    epoch: 0,
                    members: 0b111,
                    seq,
                    pos,
                    checksum: 77,
                    output: None,
                };
                (r, m)
            })
            .collect()
    };
    let complete = |c: &mut OneRttProcess, t, seq, pos| {
        let mut out = Vec::new();
        for (r, m) in acks(seq, pos) {
            out = deliver_ordered(c, t, r, &m);
        }
        out
    };
    let writes = ReplWorkload {
        keys: 4,
        read_ratio: 0.0,
        cas_ratio: 0.0,
        value_size: 0,
    };
    // The next write carries it.
    let mut procs = cluster(3, 1, &writes, 1);
    let c = &mut procs[3];
    c.handle(Instant(1_000), AppInput::Timeout);
    assert!(matches!(
        &sent(c)[..],
        [(
            _,
            Msg::Entry {
                seq: 0,
                commit: 0,
                ..
            }
        )]
    ));
    let out = complete(c, 2_000, 0, 4);
    assert!(
        matches!(&out[..], [(true, to, Msg::Entry { seq: 1, commit: 5, .. })] if *to == [0, 1, 2]),
        "{out:?}"
    );
    // The run is over: no entry follows, the notice goes alone, once.
    c.cfg.stop = Instant(2_500);
    let out = complete(c, 3_000, 1, 5);
    assert_eq!(
        out,
        [(false, vec![0, 1, 2], Msg::Commit { epoch: 0, upto: 6 })]
    );
    c.handle(Instant(3_001), AppInput::Timeout);
    assert!(sent(c).is_empty(), "told once");
    // The next command is a read: the notice goes alone beside it.
    let mixed = ReplWorkload {
        read_ratio: 0.5,
        ..writes
    };
    let seed = (0..1000)
        .find(|&s| {
            let mut g = CmdGen::new(mixed.clone(), 3, s);
            g.next_cmd().is_write() && !g.next_cmd().is_write()
        })
        .expect("a seed");
    let mut procs = cluster(3, 1, &mixed, seed);
    let c = &mut procs[3];
    c.handle(Instant(1_000), AppInput::Timeout);
    assert_eq!(sent(c).len(), 1);
    let out = complete(c, 2_000, 0, 0);
    assert!(
        matches!(&out[..], [(true, _, Msg::Read { .. }), (false, to, Msg::Commit { upto: 1, .. })] if *to == [0, 1, 2]),
        "{out:?}"
    );
}

/// Without loss, in a write-only run, commit points ride on entries, and reach the replicas in
/// time: a commit notice goes alone only once a client's window no longer refills (after
/// `stop`), at most one per write then.
#[test]
fn commit_points_ride_on_entries_in_a_write_only_run() {
    let writes = ReplWorkload {
        keys: 8,
        read_ratio: 0.0,
        cas_ratio: 0.3,
        value_size: 16,
    };
    let mut net = Net::with(3, 3, 3, 0.0, 2, writes);
    net.run(3_000_000);
    assert!(net.idle());
    check(&net);
    // Replicas heard of every commit point in time: no entry stayed uncommitted long enough
    // for their watchdogs to suspect a loss.
    assert_eq!(net.stats().recoveries, 0, "{:?}", net.stats());
    assert!(net.entries_sent > 300, "{}", net.entries_sent);
    assert!(
        net.commits_sent <= 3 * 3,
        "{} notices alone for {} entries",
        net.commits_sent,
        net.entries_sent
    );
    // And every replica heard of every commit point by the end.
    for l in net.logs() {
        assert_eq!(l.commit, l.start + l.entries.len() as u64, "{l:?}");
    }
}

#[test]
fn replica_crash_shrinks_the_view() {
    let mut net = Net::new(3, 3, 3, 0.0, 9);
    net.run(500_000);
    let before = net.done.len();
    net.crash(2);
    net.run(4_000_000);
    assert!(net.idle());
    assert!(
        net.done.len() > before + 100,
        "{} -> {}",
        before,
        net.done.len()
    );
    let logs = net.logs();
    assert_eq!(logs.len(), 2);
    check(&net);
}

#[test]
fn coordinator_crash_is_survived() {
    let mut net = Net::new(5, 3, 3, 0.0, 4);
    net.run(400_000);
    net.crash(0);
    net.run(4_000_000);
    assert!(net.idle());
    check(&net);
    assert!(net.stats().recoveries >= 4);
}

#[test]
fn client_crash_mid_entry() {
    let mut net = Net::new(3, 3, 3, 0.0, 5);
    // Client 3's entries reach replica 0 only, then it dies.
    net.run(300_000);
    net.cut = Some((3, 1));
    net.run(310_000);
    net.crash(3);
    net.run(4_000_000);
    assert!(net.idle());
    check(&net);
}

#[test]
fn lossy_with_crash_many_seeds() {
    for seed in 10..16 {
        let mut net = Net::new(3, 3, 2, 0.005, seed);
        net.run(400_000);
        net.crash(1 + (seed % 2) as u32);
        net.run(6_000_000);
        assert!(net.idle(), "seed {seed}");
        check(&net);
    }
}

#[test]
fn codec_round_trips() {
    let e = WireEntry {
        ts: 5,
        client: 3,
        seq: 9,
        id: 11,
        cmd: Cmd::Cas {
            key: 1,
            expect: None,
            new: 2,
        },
        pad: 0,
    };
    let v = Value {
        epoch: 2,
        members: 0b101,
        keep: 7,
        entries: vec![e, e],
    };
    for m in [
        Msg::Entry {
            epoch: 1,
            seq: 2,
            id: 3,
            cmd: Cmd::Put(4, 5),
            pad: 10,
            commit: 6,
        },
        Msg::Commit { epoch: 1, upto: 3 },
        Msg::Read { rid: 1, key: 2 },
        Msg::Recover { epoch: 4 },
        Msg::AckAgain { epoch: 4, seq: 9 },
        Msg::Ack {
            epoch: 1,
            members: 7,
            seq: 2,
            pos: 3,
            checksum: 4,
            output: Some(5),
        },
        Msg::Reject {
            epoch: 1,
            seq: 2,
            expected: 1,
        },
        Msg::ReadReply {
            rid: 1,
            ok: true,
            value: None,
        },
        Msg::View {
            epoch: 1,
            members: 3,
            next_seq: 4,
        },
        Msg::Prepare {
            epoch: 1,
            ballot: 2,
        },
        Msg::Promise {
            epoch: 1,
            ballot: 2,
            accepted: Some((3, v.clone())),
            commit: 4,
            tail: vec![e],
        },
        Msg::Accept {
            ballot: 1,
            value: v.clone(),
        },
        Msg::Accepted {
            epoch: 1,
            ballot: 1,
        },
        Msg::Decide { value: v },
    ] {
        assert_eq!(decode(&encode(&m)), Some(m.clone()), "{m:?}");
        let b = encode(&m);
        assert_eq!(decode(&b[..b.len() - 1]), None, "{m:?} truncated");
    }
}

/// An entry carries its client's commit point between the command and the padding: it round
/// trips at any value, and an entry cut anywhere — in the commit point too — or with a byte too
/// many is malformed, never misread.
#[test]
fn an_entry_carries_the_commit_point_and_a_cut_one_is_malformed() {
    for (commit, pad, cmd) in [
        (0, 0, Cmd::Put(1, 2)),
        (u64::MAX, 3, Cmd::Put(u64::MAX, 7)),
        (
            1 << 40,
            16,
            Cmd::Cas {
                key: 4,
                expect: Some(5),
                new: 6,
            },
        ),
    ] {
        let m = Msg::Entry {
            epoch: 3,
            seq: 4,
            id: 5,
            cmd,
            pad,
            commit,
        };
        let b = encode(&m);
        assert_eq!(decode(&b), Some(m.clone()));
        // Kind, epoch, seq, id, the command, the commit point, the padding's length, its bytes.
        let cmd_len = b.len() - (1 + 3 * 8 + 8 + 4 + pad as usize);
        let at = 1 + 3 * 8 + cmd_len;
        assert_eq!(b[at..at + 8], commit.to_be_bytes(), "{m:?}");
        for cut in 0..b.len() {
            assert_eq!(decode(&b[..cut]), None, "{m:?} cut at {cut}");
        }
        let mut longer = b.to_vec();
        longer.push(0);
        assert_eq!(decode(&longer), None, "{m:?} with a byte too many");
    }
}

/// Which kinds take a place in 1Pipe's order (the module docs' table): what the receiver takes
/// at its timestamp, and the recovery round; every reply and notice goes unordered.
#[test]
fn only_entries_reads_ack_agains_and_recovery_rounds_are_ordered() {
    let v = Value {
        epoch: 1,
        members: 1,
        keep: 0,
        entries: Vec::new(),
    };
    let ordered = [
        entry(0, Cmd::Put(1, 1), 0),
        Msg::Read { rid: 1, key: 1 },
        Msg::AckAgain { epoch: 0, seq: 0 },
        Msg::Prepare {
            epoch: 1,
            ballot: 1,
        },
        Msg::Promise {
            epoch: 1,
            ballot: 1,
            accepted: None,
            commit: 0,
            tail: Vec::new(),
        },
        Msg::Accept {
            ballot: 1,
            value: v.clone(),
        },
        Msg::Accepted {
            epoch: 1,
            ballot: 1,
        },
        Msg::Decide { value: v },
    ];
    let unordered = [
        Msg::Ack {
            epoch: 0,
            members: 1,
            seq: 0,
            pos: 0,
            checksum: 0,
            output: None,
        },
        Msg::Reject {
            epoch: 0,
            seq: 1,
            expected: 0,
        },
        Msg::ReadReply {
            rid: 1,
            ok: true,
            value: None,
        },
        Msg::View {
            epoch: 1,
            members: 1,
            next_seq: 0,
        },
        Msg::Commit { epoch: 0, upto: 1 },
        Msg::Recover { epoch: 0 },
    ];
    assert!(ordered.iter().all(Msg::ordered));
    assert!(!unordered.iter().any(Msg::ordered));
}

fn fuzz_cmd(rng: &mut fuzz::Rng) -> Cmd {
    let (key, v) = (rng.interesting(), rng.interesting());
    match rng.below(3) {
        0 => Cmd::Get(key),
        1 => Cmd::Put(key, v),
        _ => Cmd::Cas {
            key,
            expect: rng.bool().then(|| rng.interesting()),
            new: v,
        },
    }
}

fn fuzz_entries(rng: &mut fuzz::Rng) -> Vec<WireEntry> {
    let n = rng.len(40);
    (0..n)
        .map(|_| WireEntry {
            ts: rng.interesting(),
            client: rng.u32(),
            seq: rng.interesting(),
            id: rng.interesting(),
            cmd: fuzz_cmd(rng),
            pad: rng.interesting() as u32,
        })
        .collect()
}

fn fuzz_value(rng: &mut fuzz::Rng) -> Value {
    Value {
        epoch: rng.interesting(),
        members: rng.interesting(),
        keep: rng.interesting(),
        entries: fuzz_entries(rng),
    }
}

/// Any message the encoder can write (an entry's padding up to 2 KiB).
fn fuzz_msg(rng: &mut fuzz::Rng) -> Msg {
    let mut x = || rng.interesting();
    let (a, b, c) = (x(), x(), x());
    match rng.below(14) {
        0 => Msg::Entry {
            epoch: a,
            seq: b,
            id: c,
            cmd: fuzz_cmd(rng),
            pad: rng.len(2048) as u32,
            commit: rng.interesting(),
        },
        1 => Msg::Commit { epoch: a, upto: b },
        2 => Msg::Read { rid: a, key: b },
        3 => Msg::Recover { epoch: a },
        4 => Msg::Ack {
            epoch: a,
            members: b,
            seq: c,
            pos: rng.interesting(),
            checksum: rng.u64(),
            output: rng.bool().then(|| rng.interesting()),
        },
        5 => Msg::Reject {
            epoch: a,
            seq: b,
            expected: c,
        },
        6 => Msg::ReadReply {
            rid: a,
            ok: rng.bool(),
            value: rng.bool().then(|| rng.interesting()),
        },
        7 => Msg::View {
            epoch: a,
            members: b,
            next_seq: c,
        },
        8 => Msg::Prepare {
            epoch: a,
            ballot: b,
        },
        9 => Msg::Promise {
            epoch: a,
            ballot: b,
            accepted: rng.bool().then(|| (rng.interesting(), fuzz_value(rng))),
            commit: c,
            tail: fuzz_entries(rng),
        },
        10 => Msg::Accept {
            ballot: a,
            value: fuzz_value(rng),
        },
        12 => Msg::AckAgain { epoch: a, seq: b },
        11 => Msg::Accepted {
            epoch: a,
            ballot: b,
        },
        _ => Msg::Decide {
            value: fuzz_value(rng),
        },
    }
}

/// A message allocates its entry lists (a promise has two), collected one by one into `Vec`s,
/// for counts checked against the bytes left at 41 bytes an entry: at most twice the entries
/// while growing, and the old block while it moves (3 × `size_of::<WireEntry>()` per 41 input
/// bytes), and at least 4 entries' room per list.
#[test]
fn decode_never_panics_nor_overallocates_on_random_and_mutated_input() {
    let entry = size_of::<WireEntry>();
    let bound = Bound::new(3 * entry, 41, 2 * 4 * entry);
    fuzz::decoder(
        "repl::onertt::decode",
        bound,
        |rng| {
            let m = fuzz_msg(rng);
            let b = encode(&m).to_vec();
            (m, b)
        },
        decode,
        // Padding is opaque (its length is kept, not its bytes): a decoded message re-encodes
        // to its length and decodes to itself.
        |bytes, got, valid| match (got, valid) {
            (got, Some(want)) => ensure(got.as_ref() == Some(want), || "no round trip".into()),
            (Some(m), None) => {
                let again = encode(m);
                ensure(
                    again.len() == bytes.len() && decode(&again).as_ref() == Some(m),
                    || "does not re-encode to itself".into(),
                )
            }
            (None, None) => Ok(()),
        },
    );
}

proptest! {
    #[test]
    fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200), src in 0u32..6) {
        let mut net = Net::new(3, 2, 2, 0.0, 1);
        net.run(100_000);
        for p in 0..5 {
            net.input(p, AppInput::Deliver {
                src: ProcId(src),
                ts: Timestamp::new(200_000),
                reliable: false,
                payload: &bytes,
            });
        }
        net.run(2_000_000);
    }
}
