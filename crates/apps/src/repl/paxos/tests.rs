//! Paxos on a tiny deterministic network: a list of messages in flight with delivery times
//! (a base latency plus a seeded jitter, so they reorder), seeded loss and duplication, a drop
//! rule for scripted faults, crashes that stop delivery to and from a process, and the clock
//! advanced to the earliest delivery or timer. The checks: every replica's executed log is a
//! prefix of the longest surviving one, and replaying that log on a [`KvMachine`] gives every
//! output a client observed (everything goes through one log, so this sequential check is
//! exact).

use super::codec::*;
use super::*;
use crate::repl::{DiskModel, KvMachine, ReplWorkload};
use onepipe_proto::rng::Rng;
use onepipe_proto::Timestamp;
use onepipe_testalloc::fuzz::{self, ensure, Bound};
use proptest::prelude::*;
use std::collections::BTreeMap;

/// A drop rule: (src, dst, payload) → drop it.
type DropRule = Box<dyn Fn(u32, u32, &[u8]) -> bool>;

struct Net {
    procs: Vec<PaxosProcess>,
    replicas: u32,
    now: u64,
    /// In flight: (deliver at, sequence, src, dst, payload).
    flight: Vec<(u64, u64, u32, u32, Bytes)>,
    seq: u64,
    rng: Rng,
    latency_ns: u64,
    jitter_ns: u64,
    loss: f64,
    dup: f64,
    crashed: Vec<bool>,
    drop: DropRule,
    dones: Vec<ReplDone>,
}

impl Net {
    /// `replicas` replicas then `clients` clients of `window` operations, issuing until
    /// `stop_ns`; `tweak` adjusts every process's settings.
    fn new(
        replicas: u32,
        clients: u32,
        window: u32,
        stop_ns: u64,
        seed: u64,
        tweak: impl Fn(&mut PaxosConfig),
    ) -> Net {
        let procs = replicas + clients;
        let workload = ReplWorkload {
            keys: 20,
            ..ReplWorkload::default()
        };
        let procs = (0..procs)
            .map(|p| {
                let w = if p >= replicas { window } else { 0 };
                let mut repl = ReplConfig::new(ProcId(p), replicas, procs, workload.clone(), w);
                repl.stop = Instant(stop_ns);
                let mut cfg = PaxosConfig::new(repl);
                tweak(&mut cfg);
                let gen = CmdGen::new(cfg.repl.workload.clone(), p, seed ^ u64::from(p) << 32);
                PaxosProcess::new(cfg, gen)
            })
            .collect::<Vec<_>>();
        Net {
            crashed: vec![false; procs.len()],
            procs,
            replicas,
            now: 0,
            flight: Vec::new(),
            seq: 0,
            rng: Rng::new(seed),
            latency_ns: 1_000,
            jitter_ns: 500,
            loss: 0.0,
            dup: 0.0,
            drop: Box::new(|_, _, _| false),
            dones: Vec::new(),
        }
    }

    fn drain(&mut self, p: usize) {
        while let Some(send) = self.procs[p].poll_send() {
            for (dst, bytes) in send.parts {
                let (src, dst) = (p as u32, dst.0);
                if self.crashed[p] || (self.drop)(src, dst, &bytes) || self.rng.chance(self.loss) {
                    continue;
                }
                let copies = 1 + u64::from(self.rng.chance(self.dup));
                for _ in 0..copies {
                    let at = self.now + self.latency_ns + self.rng.below(self.jitter_ns + 1);
                    self.seq += 1;
                    self.flight.push((at, self.seq, src, dst, bytes.clone()));
                }
            }
        }
        while let Some(d) = self.procs[p].poll_done() {
            self.dones.push(d);
        }
    }

    fn next_event(&self) -> Option<u64> {
        let msg = self.flight.iter().map(|m| m.0).min();
        let timers = (self.procs.iter().enumerate())
            .filter(|(p, _)| !self.crashed[*p])
            .filter_map(|(_, a)| a.poll_timeout().map(|t| t.0));
        msg.into_iter().chain(timers).min()
    }

    fn run_until(&mut self, end_ns: u64) {
        for _ in 0..10_000_000 {
            let Some(t) = self.next_event().filter(|&t| t <= end_ns) else {
                self.now = end_ns;
                return;
            };
            self.now = self.now.max(t);
            let now = Instant(self.now);
            let i = (0..self.flight.len()).min_by_key(|&i| (self.flight[i].0, self.flight[i].1));
            if let Some(i) = i.filter(|&i| self.flight[i].0 <= self.now) {
                let (_, _, src, dst, bytes) = self.flight.swap_remove(i);
                if !self.crashed[dst as usize] {
                    let input = AppInput::Deliver {
                        src: ProcId(src),
                        ts: Timestamp::new(self.now),
                        reliable: true,
                        payload: &bytes,
                    };
                    self.procs[dst as usize].handle(now, input);
                    self.drain(dst as usize);
                }
                continue;
            }
            for p in 0..self.procs.len() {
                let due = self.procs[p].poll_timeout().is_some_and(|t| t <= now);
                if due && !self.crashed[p] {
                    self.procs[p].handle(now, AppInput::Timeout);
                    self.drain(p);
                }
            }
        }
        panic!("the run did not reach {end_ns} ns: a timer that does not move?");
    }

    /// Stops delivering to and from `p`; with `report`, tells the others it failed.
    fn crash(&mut self, p: u32, report: bool) {
        self.crashed[p as usize] = true;
        self.flight.retain(|m| m.2 != p && m.3 != p);
        if report {
            for q in 0..self.procs.len() {
                if !self.crashed[q] {
                    let input = AppInput::ProcFailed {
                        proc: ProcId(p),
                        ts: Timestamp::new(self.now),
                    };
                    self.procs[q].handle(Instant(self.now), input);
                    self.drain(q);
                }
            }
        }
    }

    fn replica(&self, r: u32) -> &PaxosProcess {
        &self.procs[r as usize]
    }

    fn clients_idle(&self) -> bool {
        self.procs[self.replicas as usize..]
            .iter()
            .all(|p| p.idle())
    }

    fn leaders(&self) -> Vec<u32> {
        (0..self.replicas)
            .filter(|&r| !self.crashed[r as usize])
            .filter(|&r| matches!(self.replica(r).role, Role::Leader(_)))
            .collect()
    }

    /// The run's checks (see the module's doc); panics naming the first violation.
    fn check(&self) {
        let alive = |r: &u32| !self.crashed[*r as usize];
        let longest = (0..self.replicas)
            .filter(alive)
            .map(|r| &self.replica(r).executed)
            .max_by_key(|e| e.len())
            .expect("a replica survives");
        // Every replica (crashed ones too) executed a prefix of one log, and the replica logs'
        // checksums agree at their last common position.
        for r in 0..self.replicas {
            let mine = &self.replica(r).executed;
            let common = mine.len().min(longest.len());
            if let Some(k) = (0..common).find(|&k| mine[k] != longest[k]) {
                let (a, b) = (mine[k], longest[k]);
                panic!("replica {r} diverged at its execution {k}: {a:?}, the longest log {b:?}");
            }
            let (a, b) = (
                self.replica(r).replica_log().unwrap(),
                self.replica(0).replica_log(),
            );
            let b = b.unwrap();
            let pos = a.commit.min(b.commit);
            if pos > a.start.max(b.start) {
                let at = |l: &ReplicaLog| l.entries[(pos - 1 - l.start) as usize].2;
                assert_eq!(at(&a), at(&b), "checksums of replicas {r} and 0 at {pos}");
            }
        }
        // Replay the log: no request applied twice, and every output a client saw is the
        // replay's.
        let mut machine = KvMachine::default();
        let mut outputs = BTreeMap::new();
        for &(client, id, cmd) in longest {
            let output = machine.apply(&cmd);
            let first = outputs.insert((client, id), output).is_none();
            assert!(first, "({client}, {id}) applied twice");
        }
        let mut seen = BTreeSet::new();
        for d in &self.dones {
            assert!(
                seen.insert((d.client, d.id)),
                "({}, {}) completed twice",
                d.client,
                d.id
            );
            let Some(&output) = outputs.get(&(d.client, d.id)) else {
                panic!("acknowledged {d:?} is not in the surviving log");
            };
            assert_eq!(output, d.output, "{d:?}: the log's replay gives {output:?}");
        }
    }
}

fn kind(payload: &[u8]) -> u8 {
    payload.first().copied().unwrap_or(0)
}

/// §II-A: with a stable leader, clients complete many operations and every replica executes
/// the same log (followers learn the decided prefix from Accepts and Decides).
fn normal_case(replicas: u32, seed: u64) {
    let mut net = Net::new(replicas, 2, 4, 2_000_000, seed, |_| {});
    net.run_until(3_000_000);
    assert!(net.dones.len() > 300, "{} operations", net.dones.len());
    assert!(net.clients_idle());
    net.check();
    let executed = net.replica(0).executed.len();
    for r in 0..replicas {
        assert_eq!(net.replica(r).executed.len(), executed, "replica {r} lags");
    }
    assert_eq!(net.leaders(), vec![0]);
    assert_eq!(net.replica(0).paxos_stats().phase1_runs, 0);
}

#[test]
fn normal_case_three_replicas_execute_one_log_ii_a() {
    normal_case(3, 1);
}

#[test]
fn normal_case_five_replicas_execute_one_log_ii_a() {
    normal_case(5, 2);
}

/// §II-C: with one instance at a time and a large BSZ, requests that arrive while an instance is
/// active are packed into the next one.
#[test]
fn batching_packs_many_requests_per_instance_with_wnd_1_ii_c() {
    let mut net = Net::new(3, 2, 16, 1_000_000, 3, |c| {
        c.wnd = 1;
        c.bsz = BSZ_MAX;
    });
    net.run_until(2_000_000);
    net.check();
    let s = net.replica(0).paxos_stats();
    assert_eq!(s.active_max, 1, "WND = 1 is strict");
    assert!(
        s.batch_mean() > 4.0,
        "{} requests per instance",
        s.batch_mean()
    );
}

/// §II-B: with WND > 1 and one request per batch (BSZ tiny), several instances are active at
/// once, never more than WND.
#[test]
fn pipelining_keeps_several_instances_active_up_to_wnd_ii_b() {
    let mut net = Net::new(3, 2, 8, 1_000_000, 4, |c| {
        c.wnd = 4;
        c.bsz = 1;
    });
    net.run_until(2_000_000);
    net.check();
    let s = net.replica(0).paxos_stats();
    assert_eq!(s.active_max, 4);
    assert!(
        s.active_mean() > 1.0,
        "{} active on average",
        s.active_mean()
    );
    assert_eq!(
        s.batch_mean(),
        1.0,
        "a request larger than BSZ forms a batch alone"
    );
}

/// The Accepts a leader sent, as (instance, requests), and nothing else.
fn accepts(p: &mut PaxosProcess) -> Vec<(u64, usize)> {
    let mut out = Vec::new();
    while let Some(send) = p.poll_send() {
        if let Some(Msg::Accept {
            instance, batch, ..
        }) = decode(&send.parts[0].1)
        {
            out.push((instance, batch.len()));
        }
    }
    out
}

fn deliver(p: &mut PaxosProcess, now: u64, src: u32, msg: &Msg) {
    let payload = encode(msg);
    let input = AppInput::Deliver {
        src: ProcId(src),
        ts: Timestamp::new(now),
        reliable: true,
        payload: &payload,
    };
    p.handle(Instant(now), input);
}

/// Fig. 6 step by step at a leader (WND 2, BSZ 200 bytes, gets of 33 bytes, Δ_B 50 µs).
#[test]
fn fig6_batches_by_size_and_delta_b_within_wnd() {
    let repl = ReplConfig::new(ProcId(0), 3, 4, ReplWorkload::default(), 0);
    let mut cfg = PaxosConfig::new(repl);
    (cfg.wnd, cfg.bsz, cfg.delta_b_ns) = (2, 200, 50_000);
    let mut leader = PaxosProcess::new(cfg, CmdGen::new(ReplWorkload::default(), 0, 0));
    let mut id = 0;
    let mut request = |leader: &mut PaxosProcess, now: u64, pad: u32| {
        let cmd = if pad == 0 {
            Cmd::Get(1)
        } else {
            Cmd::Put(1, 7)
        };
        let r = Request {
            client: 3,
            id,
            acked: 0,
            cmd,
            pad,
        };
        id += 1;
        assert!(pad > 0 || r.wire_len() == 33);
        deliver(leader, now, 3, &Msg::Request(r));
    };
    // Line 18: three requests (99 bytes) wait for Δ_B after the oldest arrived.
    (0..3).for_each(|_| request(&mut leader, 1_000, 0));
    assert_eq!(accepts(&mut leader), vec![]);
    assert_eq!(leader.batch_deadline(), Some(Instant(51_000)));
    leader.handle(Instant(51_000), AppInput::Timeout);
    assert_eq!(accepts(&mut leader), vec![(0, 3)]);
    // Lines 13–17: six fit in BSZ, the seventh does not: the six go at once.
    (0..10).for_each(|_| request(&mut leader, 52_000, 0));
    assert_eq!(accepts(&mut leader), vec![(1, 6)]);
    // Line 22: the window is full, so a full batch waits for a decision.
    (0..4).for_each(|_| request(&mut leader, 53_000, 0));
    assert_eq!(accepts(&mut leader), vec![]);
    assert_eq!(leader.batch_deadline(), None);
    let accepted = |instance| Msg::Accepted {
        ballot: 0,
        instance,
    };
    deliver(&mut leader, 54_000, 1, &accepted(0));
    assert_eq!(accepts(&mut leader), vec![(2, 6)]);
    // Two are left, not full: they wait; a request larger than BSZ does not join them, it
    // closes their batch, then forms one alone.
    deliver(&mut leader, 55_000, 1, &accepted(1));
    assert_eq!(accepts(&mut leader), vec![]);
    request(&mut leader, 56_000, 500);
    assert_eq!(accepts(&mut leader), vec![(3, 2)]);
    deliver(&mut leader, 57_000, 2, &accepted(2));
    assert_eq!(accepts(&mut leader), vec![(4, 1)]);
    assert_eq!(leader.commit, 3);
    assert_eq!(leader.paxos_stats().requests_decided, 15);
}

/// §II-A: a follower counts the leader's silence from its own start, so a clock that starts at
/// 1 s (the simulator's epoch) does not set off Phase 1 at its first input; a leader that then
/// stays silent for the election timeout does.
#[test]
fn follower_counts_silence_from_its_start_not_from_the_clocks_zero_ii_a() {
    let repl = ReplConfig::new(ProcId(1), 3, 4, ReplWorkload::default(), 0);
    let cfg = PaxosConfig::new(repl);
    let timeout = cfg.election_timeout_ns;
    let mut follower = PaxosProcess::new(cfg, CmdGen::new(ReplWorkload::default(), 1, 0));
    let prepares = |p: &mut PaxosProcess| {
        let mut n = 0;
        while let Some(send) = p.poll_send() {
            n += (send.parts.iter())
                .filter(|(_, b)| matches!(decode(b), Some(Msg::Prepare { .. })))
                .count();
        }
        n
    };
    let start = 1_000_000_000;
    follower.handle(Instant(start), AppInput::Timeout);
    assert_eq!(prepares(&mut follower), 0, "Phase 1 at its first input");
    follower.handle(Instant(start + timeout), AppInput::Timeout);
    assert_eq!(
        prepares(&mut follower),
        2,
        "Phase 1 after the election timeout"
    );
}

/// A new leader may learn an instance it still has in flight — the answer to the `Fetch` it
/// sent as a candidate, arriving after it took over. Decided is decided: the instance leaves
/// its window, whose instances are never below the decided prefix (the leader's invariant,
/// checked after every input; it failed live under load before this).
#[test]
fn a_new_leader_that_learns_an_instance_in_flight_drops_it_from_its_window_ii_a() {
    let repl = ReplConfig::new(ProcId(1), 3, 4, ReplWorkload::default(), 0);
    let cfg = PaxosConfig::new(repl);
    let timeout = cfg.election_timeout_ns;
    let mut p = PaxosProcess::new(cfg, CmdGen::new(ReplWorkload::default(), 1, 0));
    let start = 1_000_000_000;
    p.handle(Instant(start), AppInput::Timeout);
    p.handle(Instant(start + timeout), AppInput::Timeout);
    let mut ballot = None;
    while let Some(send) = p.poll_send() {
        for (_, b) in &send.parts {
            if let Some(Msg::Prepare { ballot: b, .. }) = decode(b) {
                ballot = Some(b);
            }
        }
    }
    let ballot = ballot.expect("Phase 1 after the election timeout");
    let request = Request {
        client: 3,
        id: 1,
        acked: 1,
        cmd: Cmd::Put(7, 9),
        pad: 0,
    };
    let batch: Batch = Arc::from(vec![request]);
    // Replica 2 promises, with two instances it accepted under an older leader: replica 1
    // leads and proposes them again.
    let now = start + timeout + 1_000;
    let promise = Msg::Promise {
        ballot,
        commit: 0,
        slots: vec![(0, 1, batch.clone()), (1, 1, batch.clone())],
    };
    deliver(&mut p, now, 2, &promise);
    let proposed: Vec<u64> = accepts(&mut p).iter().map(|&(i, _)| i).collect();
    assert!(
        proposed.contains(&0) && proposed.contains(&1),
        "{proposed:?}"
    );
    // The old leader's answer to a fetch: instance 0 is decided.
    let learn = Msg::Learn {
        instance: 0,
        batch: batch.clone(),
    };
    deliver(&mut p, now + 1_000, 0, &learn);
    // Replica 2's late acknowledgement of instance 0 changes nothing; instance 1 decides.
    for instance in [0, 1] {
        deliver(&mut p, now + 2_000, 2, &Msg::Accepted { ballot, instance });
    }
    // The same request twice (instances 0 and 1): applied once, the second a duplicate.
    assert_eq!(p.executed.len(), 1, "{:?}", p.executed);
    assert!(p.stats.duplicates >= 1);
}

/// A batch of `n` puts by client 3, told apart by `tag`.
fn puts(n: u64, tag: u64) -> Batch {
    (0..n)
        .map(|k| Request {
            client: 3,
            id: tag * 100 + k,
            acked: 0,
            cmd: Cmd::Put(k, tag),
            pad: 0,
        })
        .collect()
}

/// A replica of three that has booted at `start`.
fn replica_of_three(me: u32, start: u64, tweak: impl Fn(&mut PaxosConfig)) -> PaxosProcess {
    let repl = ReplConfig::new(ProcId(me), 3, 4, ReplWorkload::default(), 0);
    let mut cfg = PaxosConfig::new(repl);
    tweak(&mut cfg);
    let mut p = PaxosProcess::new(cfg, CmdGen::new(ReplWorkload::default(), me, 0));
    p.handle(Instant(start), AppInput::Timeout);
    p
}

/// \[SS\] §II-A Phase 1: a new leader proposes, at each instance, the value of the highest
/// ballot its promises report — from every slot of every promise, its own (the first it
/// counts, with older values) included — and a no-op nowhere a value was reported.
#[test]
fn a_new_leader_proposes_each_instances_highest_ballot_value_ii_a() {
    let start = 1_000_000_000;
    let mut p = replica_of_three(1, start, |_| {});
    let timeout = p.cfg.election_timeout_ns;
    // Replica 1 accepts two values from leader 0 (ballot 0), then runs Phase 1 (ballot 4).
    for (instance, batch) in [(0, puts(1, 1)), (1, puts(1, 2))] {
        let accept = Msg::Accept {
            ballot: 0,
            instance,
            commit: 0,
            batch,
        };
        deliver(&mut p, start + 1_000, 0, &accept);
    }
    p.handle(Instant(start + 1_000 + 2 * timeout), AppInput::Timeout);
    assert!(matches!(
        p.role,
        Role::Candidate(Candidate { ballot: 4, .. })
    ));
    accepts(&mut p);
    // Replica 2 accepted other values at both instances, and one at instance 2, in ballot 3.
    let promise = Msg::Promise {
        ballot: 4,
        commit: 0,
        slots: vec![(0, 3, puts(2, 3)), (1, 3, puts(3, 4)), (2, 3, puts(4, 5))],
    };
    deliver(&mut p, start + 2_000 + 2 * timeout, 2, &promise);
    assert!(matches!(p.role, Role::Leader(_)));
    assert_eq!(accepts(&mut p), vec![(0, 2), (1, 3), (2, 4)]);
}

/// \[SS\] §II-A Phase 1b: a promise reports an instance the acceptor learned decided (by a
/// `Learn`, whose slot's ballot means nothing) as decided, above every ballot, so that a new
/// leader proposes its value rather than an older one another acceptor reports.
#[test]
fn a_promise_reports_a_learned_instance_as_decided_ii_a() {
    let start = 1_000_000_000;
    let mut p = replica_of_three(2, start, |_| {});
    let learn = Msg::Learn {
        instance: 1,
        batch: puts(2, 1),
    };
    deliver(&mut p, start + 1_000, 0, &learn);
    deliver(
        &mut p,
        start + 2_000,
        1,
        &Msg::Prepare { ballot: 4, from: 0 },
    );
    let mut promises = Vec::new();
    while let Some(send) = p.poll_send() {
        for (_, bytes) in &send.parts {
            if let Some(Msg::Promise { slots, .. }) = decode(bytes) {
                promises.push(slots);
            }
        }
    }
    assert_eq!(promises, vec![vec![(1, DECIDED, puts(2, 1))]]);
}

/// \[SS\] §II-A, a leader again: the leader decides instance 1 while instance 0 is still open,
/// steps down on a higher ballot, then wins Phase 1 itself. Its own promise reports instance 1
/// decided: it proposes instance 0 only — instance 1 in its window would stay there once the
/// decided prefix passed it (seed 708 of the crash-or-partition run: "commit 95 next 95 active
/// [94]") — and its next new instance comes after both.
#[test]
fn a_leader_again_does_not_propose_an_instance_it_knows_decided_ii_a() {
    let start = 1_000_000_000;
    // One request per batch (BSZ 1): two requests, two instances.
    let mut p = replica_of_three(0, start, |c| c.bsz = 1);
    let timeout = p.cfg.election_timeout_ns;
    let request = |tag| Msg::Request(puts(1, tag)[0]);
    for tag in [0, 1] {
        deliver(&mut p, start + 1_000, 3, &request(tag));
    }
    assert_eq!(accepts(&mut p), vec![(0, 1), (1, 1)]);
    let accepted = |ballot, instance| Msg::Accepted { ballot, instance };
    deliver(&mut p, start + 2_000, 2, &accepted(0, 1));
    assert_eq!(
        (p.commit, p.log[&1].decided),
        (0, true),
        "1 decided, 0 open"
    );
    // Replica 1 ran Phase 1 with ballot 4: the leader steps down, and after the election
    // timeout (and its rank's stagger) runs Phase 1 with ballot 6.
    deliver(&mut p, start + 3_000, 1, &Msg::Reject { ballot: 4 });
    assert!(matches!(p.role, Role::Follower { .. }));
    p.handle(Instant(start + 3_000 + 2 * timeout), AppInput::Timeout);
    assert!(matches!(
        p.role,
        Role::Candidate(Candidate { ballot: 6, .. })
    ));
    accepts(&mut p);
    let promise = Msg::Promise {
        ballot: 6,
        commit: 0,
        slots: vec![(0, 0, puts(1, 0))],
    };
    let now = start + 4_000 + 2 * timeout;
    deliver(&mut p, now, 2, &promise);
    assert_eq!(
        accepts(&mut p),
        vec![(0, 1)],
        "instance 1 is decided already"
    );
    deliver(&mut p, now + 1_000, 2, &accepted(6, 0));
    assert_eq!((p.commit, p.executed.len()), (2, 2));
    deliver(&mut p, now + 2_000, 3, &request(2));
    assert_eq!(accepts(&mut p), vec![(2, 1)]);
}

/// §II-A leader change: the leader stops (no failure report); the followers miss its
/// heartbeats, replica 1 wins Phase 1, and the clients go on with it.
#[test]
fn leader_crash_detected_by_heartbeat_timeout_new_leader_serves_ii_a() {
    let mut net = Net::new(3, 2, 4, 3_000_000, 5, |_| {});
    net.run_until(1_000_000);
    let before = net.dones.len();
    assert!(before > 100);
    net.crash(0, false);
    net.run_until(4_000_000);
    assert_eq!(
        net.leaders(),
        vec![1],
        "the next replica after the leader runs first"
    );
    assert!(
        net.dones.len() > before + 100,
        "{} after the crash",
        net.dones.len() - before
    );
    assert!(net.clients_idle());
    net.check();
    assert_eq!(net.replica(1).executed.len(), net.replica(2).executed.len());
    assert_eq!(net.replica(1).paxos_stats().phase1_won, 1);
    assert_eq!(
        net.replica(2).paxos_stats().phase1_runs,
        0,
        "staggered: no duel"
    );
}

/// A failure report skips the heartbeat timeout; with replica 1 also failed, replica 2 leads.
#[test]
fn leader_failure_report_elects_next_live_replica_of_five_ii_a() {
    let mut net = Net::new(5, 2, 4, 3_000_000, 6, |_| {});
    net.run_until(500_000);
    net.crash(1, true);
    net.run_until(1_000_000);
    let before = net.dones.len();
    net.crash(0, true);
    net.run_until(1_100_000);
    assert_eq!(net.leaders(), vec![2]);
    net.run_until(4_000_000);
    assert!(net.dones.len() > before + 100);
    assert!(net.clients_idle());
    net.check();
}

/// Loss, duplication and reordering: clients resend, leaders retransmit, followers fetch;
/// every operation completes, none is applied twice (the check replays the log).
#[test]
fn loss_and_duplication_complete_every_operation_exactly_once() {
    for seed in [7, 8, 9] {
        let mut net = Net::new(3, 2, 4, 2_000_000, seed, |_| {});
        (net.loss, net.dup, net.jitter_ns) = (0.05, 0.05, 3_000);
        net.run_until(6_000_000);
        assert!(net.clients_idle(), "seed {seed}: operations left");
        assert!(net.dones.len() > 100);
        net.check();
        let resent: u64 = net.procs.iter().map(|p| p.stats().resent).sum();
        let dups: u64 = net.procs.iter().map(|p| p.stats().duplicates).sum();
        assert!(
            resent > 0 && dups > 0,
            "seed {seed}: resent {resent}, duplicates {dups}"
        );
        // Followers that missed an Accept fetched the decided value and caught up.
        let fetched: u64 = (1..3).map(|r| net.replica(r).paxos_stats().learned).sum();
        assert!(fetched > 0, "seed {seed}: nothing fetched");
        let executed = net.replica(0).executed.len();
        assert!((1..3).all(|r| net.replica(r).executed.len() == executed));
    }
}

/// Runs `run` on each seed; a failure names its seed (replay it alone with `run(seed)`).
fn each_seed(seeds: std::ops::Range<u64>, run: fn(u64) -> Net) {
    for seed in seeds {
        if let Err(e) = std::panic::catch_unwind(|| run(seed)) {
            eprintln!("seed {seed} failed");
            std::panic::resume_unwind(e);
        }
    }
}

/// Seeded faults on top of loss and duplication: the leader or another replica crashes, or is
/// cut off and comes back (a leader cut off goes on believing it leads until it hears the
/// higher ballot, then steps down). Safety holds throughout; once healed, every operation
/// completes.
fn random_crash_or_partition(seed: u64) -> Net {
    use std::cell::Cell;
    use std::rc::Rc;
    let mut rng = Rng::new(seed);
    let replicas = [3, 5][rng.below(2) as usize];
    let mut net = Net::new(replicas, 2, 3, 3_000_000, seed, |_| {});
    (net.loss, net.dup, net.jitter_ns) = (0.02, 0.02, 2_000);
    let cut: Rc<Cell<Option<u32>>> = Rc::new(Cell::new(None));
    let c = cut.clone();
    net.drop = Box::new(move |src, dst, _| c.get().is_some_and(|p| p == src || p == dst));
    let victim = if rng.chance(0.6) {
        0
    } else {
        rng.below(u64::from(replicas)) as u32
    };
    net.run_until(200_000 + rng.below(800_000));
    if rng.chance(0.5) {
        net.crash(victim, rng.chance(0.5));
    } else {
        cut.set(Some(victim));
        net.run_until(net.now + 100_000 + rng.below(500_000));
        cut.set(None);
    }
    net.run_until(8_000_000);
    assert!(net.clients_idle(), "seed {seed}: operations left");
    assert_eq!(
        net.leaders().len(),
        1,
        "seed {seed}: one leader once healed"
    );
    net.check();
    net
}

/// Faults in a row on a lossy network (loss 2–20 % per seed): each period cuts a random set of
/// links between replicas (the clients still reach every replica), and up to f replicas crash.
/// Leaders change often and mid-window, so instances end up accepted with different values in
/// different ballots: the case Phase 1's rule is for (\[SS\] §II-A: a new leader proposes the
/// value of the highest ballot its promises report). Safety holds throughout; once healed,
/// every operation completes.
fn random_link_cuts(seed: u64) -> Net {
    use std::cell::Cell;
    use std::rc::Rc;
    let mut rng = Rng::new(seed);
    let replicas = [3, 5][rng.below(2) as usize];
    let mut net = Net::new(replicas, 2, 3, 3_000_000, seed, |_| {});
    let loss = [0.02, 0.05, 0.1, 0.2][rng.below(4) as usize];
    (net.loss, net.dup, net.jitter_ns) = (loss, 0.02, 2_000);
    // The links cut, a bit `src * 8 + dst` each (replicas only: `replicas <= 8`).
    let cut: Rc<Cell<u64>> = Rc::new(Cell::new(0));
    let c = cut.clone();
    net.drop = Box::new(move |src, dst, _| {
        src < replicas && dst < replicas && c.get() >> (src * 8 + dst) & 1 != 0
    });
    net.run_until(100_000 + rng.below(400_000));
    let mut crashes_left = (replicas - 1) / 2;
    let p_cut = [0.2, 0.4, 0.6][rng.below(3) as usize];
    for _ in 0..2 + rng.below(6) {
        let mut links = 0u64;
        for a in 0..replicas {
            for b in a + 1..replicas {
                if rng.chance(p_cut) {
                    links |= 1 << (a * 8 + b) | 1 << (b * 8 + a);
                }
            }
        }
        cut.set(links);
        if crashes_left > 0 && rng.chance(0.1) {
            crashes_left -= 1;
            let live: Vec<u32> = (0..replicas)
                .filter(|&r| !net.crashed[r as usize])
                .collect();
            net.crash(live[rng.below(live.len() as u64) as usize], rng.chance(0.5));
        }
        net.run_until(net.now + 20_000 + rng.below(300_000));
    }
    // Healed: no cut, and the loss of the other tests (at 20 %, heartbeats lost in a row set
    // off elections at any time, and one leader at the end is a matter of luck).
    cut.set(0);
    net.loss = 0.02;
    net.run_until(net.now.max(3_000_000) + 8_000_000);
    assert!(net.clients_idle(), "seed {seed}: operations left");
    assert_eq!(
        net.leaders().len(),
        1,
        "seed {seed}: one leader once healed"
    );
    net.check();
    net
}

// Both seed ranges are sized by the planted Phase 1 bugs they must catch, each by two seeds at
// least (the first failing seeds below, measured when the ranges were set: a change to the
// protocol or to this harness moves them), not by run time; they take about 8 and 7 s of one
// core in the test profile, side by side.
// * The new leader keeps the first value reported (its own, often older), not the highest
//   ballot's: link cuts 83, 225, 574; crash-or-partition none in 20..12,000 (one fault
//   rarely leaves two values accepted at one instance).
// * It keeps the lowest ballot's value: link cuts 49, 83, 225; crash-or-partition none.
// * It takes only the first slot of each promise: link cuts 3, 9, 13; crash-or-partition 998
//   (operations left), 1004, 1896.
// * An acceptor promises a ballot below its promise: link cuts 0; crash-or-partition 46.
// * It leads before catching up with the most advanced promiser, or on one promise too few:
//   link cuts 0; crash-or-partition 27.
// * It proposes again an instance it knows decided (seed 708's cause): link cuts 5;
//   crash-or-partition 708, 998.
// The scripted tests above catch the first three at once, and a promise that reports a
// learned instance with its slot's ballot rather than as decided, which no seed to 3,000 of
// either run caught.

#[test]
fn random_crashes_and_partitions_keep_one_log() {
    each_seed(20..2000, random_crash_or_partition);
}

#[test]
fn random_link_cuts_with_loss_keep_one_log_ii_a() {
    each_seed(0..2000, random_link_cuts);
}

/// Seed 708 of the crash-or-partition run, which failed the leader invariant ("commit 95 next
/// 95 active [94]") while the range was 20..40 and a leader did not yet drop what it learned
/// decided from its window: replica 1, cut off, ran Phase 1 on its own; back, its higher
/// ballot made leader 0 step down with instance 94 decided and 93 still open. Replica 0 won
/// Phase 1 again (ballot 12) and proposed 94 a second time, so deciding 93 carried the decided
/// prefix past 94, still in its window. A bookkeeping error, not a safety one: the value it
/// proposed again was the decided one (its own promise reported it `DECIDED`). A leader now
/// proposes no instance it knows decided (`try_lead`).
#[test]
fn random_seed_708_a_leader_again_proposed_an_instance_it_had_decided_ii_a() {
    let net = random_crash_or_partition(708);
    let s = net.replica(0).paxos_stats();
    assert!(
        s.step_downs >= 1 && s.phase1_won >= 1,
        "seed 708 no longer has replica 0 step down and lead again: {s:?}"
    );
}

/// §II-C: with a disk, Phase 2b waits for the write; everything still completes, in one log.
#[test]
fn disk_write_precedes_phase_2b_ii_c() {
    let mut net = Net::new(3, 2, 4, 1_000_000, 10, |c| {
        c.repl.disk = DiskModel {
            write_ns: 10_000,
            jitter_ns: 2_000,
        };
    });
    net.run_until(2_000_000);
    assert!(net.clients_idle());
    net.check();
    // Each round trip now takes at least one write: far fewer operations than without a disk.
    assert!(
        net.dones.len() > 50 && net.dones.len() < 2_000,
        "{}",
        net.dones.len()
    );
}

/// The planted bug's test: a quorum must be a strict majority. The leader's Accepts (and the
/// Learns that would repair them) never reach the followers; with a majority it cannot decide,
/// so nothing is acknowledged. It fails; the new leader serves. If one acceptor were a quorum
/// (`majority() = 1`), the old leader would acknowledge writes nobody else holds, and the new
/// leader's log — read through by later operations — would miss them.
#[test]
fn quorum_is_a_strict_majority_acknowledged_writes_survive_leader_crash_ii_a() {
    let mut net = Net::new(3, 1, 1, 2_000_000, 11, |c| {
        c.repl.workload = ReplWorkload {
            keys: 1,
            read_ratio: 0.5,
            cas_ratio: 0.0,
            value_size: 8,
        };
    });
    net.drop = Box::new(|src, dst, p| src == 0 && dst < 3 && matches!(kind(p), ACCEPT | LEARN));
    net.run_until(500_000);
    net.crash(0, true);
    net.run_until(3_000_000);
    net.check();
    assert!(net.dones.len() > 50, "the new leader serves");
}

/// The same seed gives the same run.
#[test]
fn same_seed_same_run() {
    let run = || {
        let mut net = Net::new(3, 2, 4, 500_000, 12, |_| {});
        net.loss = 0.02;
        net.run_until(1_000_000);
        net.dones
    };
    assert_eq!(run(), run());
}

/// Every proper message cut short is malformed.
#[test]
fn truncated_messages_do_not_decode() {
    let batch: Batch = Arc::from(vec![Request {
        client: 3,
        id: 1,
        acked: 0,
        cmd: Cmd::Cas {
            key: 1,
            expect: Some(2),
            new: 3,
        },
        pad: 5,
    }]);
    for msg in sample_msgs(batch) {
        let bytes = encode(&msg);
        assert_eq!(decode(&bytes), Some(msg.clone()));
        for len in 0..bytes.len() {
            assert_eq!(decode(&bytes[..len]), None, "{msg:?} cut at {len}");
        }
    }
}

fn sample_msgs(batch: Batch) -> Vec<Msg> {
    vec![
        Msg::Request(batch[0]),
        Msg::Reply {
            id: 1,
            output: Some(9),
            pad: 3,
        },
        Msg::Redirect {
            id: 1,
            leader: Some(2),
        },
        Msg::Accept {
            ballot: 4,
            instance: 5,
            commit: 3,
            batch: batch.clone(),
        },
        Msg::Accepted {
            ballot: 4,
            instance: 5,
        },
        Msg::Decide {
            ballot: 4,
            commit: 6,
        },
        Msg::Prepare { ballot: 7, from: 2 },
        Msg::Promise {
            ballot: 7,
            commit: 2,
            slots: vec![(2, 4, batch.clone()), (3, DECIDED, Arc::from(vec![]))],
        },
        Msg::Reject { ballot: 8 },
        Msg::Fetch { from: 3 },
        Msg::Learn { instance: 3, batch },
    ]
}

fn cmd_strategy() -> impl Strategy<Value = Cmd> {
    prop_oneof![
        any::<u64>().prop_map(Cmd::Get),
        (any::<u64>(), any::<u64>()).prop_map(|(k, v)| Cmd::Put(k, v)),
        (
            any::<u64>(),
            proptest::option::of(any::<u64>()),
            any::<u64>()
        )
            .prop_map(|(key, expect, new)| Cmd::Cas { key, expect, new }),
    ]
}

fn request_strategy() -> impl Strategy<Value = Request> {
    (
        any::<u32>(),
        any::<u64>(),
        any::<u64>(),
        cmd_strategy(),
        0..64u32,
    )
        .prop_map(|(client, id, acked, cmd, pad)| Request {
            client,
            id,
            acked,
            cmd,
            pad,
        })
}

fn fuzz_request(rng: &mut fuzz::Rng) -> Request {
    let (key, v) = (rng.interesting(), rng.interesting());
    let cmd = match rng.below(3) {
        0 => Cmd::Get(key),
        1 => Cmd::Put(key, v),
        _ => Cmd::Cas {
            key,
            expect: rng.bool().then(|| rng.interesting()),
            new: v,
        },
    };
    Request {
        client: rng.u32(),
        id: rng.interesting(),
        acked: rng.interesting(),
        cmd,
        // Half without padding: batches as dense as the wire allows.
        pad: match rng.bool() {
            true => 0,
            false => rng.len(MAX_VALUE_SIZE as usize / 8) as u32,
        },
    }
}

fn fuzz_batch(rng: &mut fuzz::Rng) -> Batch {
    let n = rng.len(24);
    (0..n).map(|_| fuzz_request(rng)).collect()
}

fn fuzz_ballot(rng: &mut fuzz::Rng) -> u64 {
    rng.interesting().min(BALLOT_MAX)
}

/// Any message the encoder can write (paddings up to 1 KiB).
fn fuzz_msg(rng: &mut fuzz::Rng) -> Msg {
    let (a, b) = (rng.interesting(), rng.interesting());
    match rng.below(11) {
        0 => Msg::Request(fuzz_request(rng)),
        1 => Msg::Reply {
            id: a,
            output: rng.bool().then_some(b),
            pad: rng.len(1024) as u32,
        },
        2 => Msg::Redirect {
            id: a,
            leader: rng.bool().then(|| rng.u32()),
        },
        3 => Msg::Accept {
            ballot: fuzz_ballot(rng),
            instance: a,
            commit: b,
            batch: fuzz_batch(rng),
        },
        4 => Msg::Accepted {
            ballot: fuzz_ballot(rng),
            instance: a,
        },
        5 => Msg::Decide {
            ballot: fuzz_ballot(rng),
            commit: a,
        },
        6 => Msg::Prepare {
            ballot: fuzz_ballot(rng),
            from: a,
        },
        7 => {
            let n = rng.len(16);
            let slots = (0..n)
                .map(|_| (rng.interesting(), rng.interesting(), fuzz_batch(rng)))
                .collect();
            Msg::Promise {
                ballot: fuzz_ballot(rng),
                commit: a,
                slots,
            }
        }
        8 => Msg::Reject {
            ballot: fuzz_ballot(rng),
        },
        9 => Msg::Fetch { from: a },
        _ => Msg::Learn {
            instance: a,
            batch: fuzz_batch(rng),
        },
    }
}

/// A message allocates its batches (a promise's slots have one each) and a promise's slots,
/// collected one by one, for counts checked against the bytes left (33 bytes a request, 18 a
/// slot): a batch's requests in a `Vec` of at most twice its items, then copied into the
/// shared `Arc<[Request]>` beside it (3 × its items), or while it grows, its old block beside
/// its new one (as many) — 3 × `size_of::<Request>()` per 33 input bytes, which covers the
/// slots' 3 × 32 per 18 too; plus one batch's first 4 requests' room and the slots' first 4.
#[test]
fn decode_never_panics_nor_overallocates_on_random_and_mutated_input() {
    let request = size_of::<Request>();
    let bound = Bound::new(3 * request, 33, 4 * request + 4 * 32 + 64);
    fuzz::decoder(
        "repl::paxos::decode",
        bound,
        |rng| {
            let m = fuzz_msg(rng);
            let b = encode(&m).to_vec();
            (m, b)
        },
        decode,
        // Padding is opaque (its length is kept, not its bytes), and an absent expected value
        // may carry any bytes: a decoded message re-encodes to its length and decodes to
        // itself.
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
    /// Codec round trip over batches of random requests.
    #[test]
    fn codec_round_trips(reqs in proptest::collection::vec(request_strategy(), 1..8)) {
        for msg in sample_msgs(Arc::from(reqs)) {
            prop_assert_eq!(decode(&encode(&msg)), Some(msg));
        }
    }

    /// Random bytes never panic a leader, a follower or a client; what does not decode is
    /// counted as malformed.
    #[test]
    fn random_payloads_are_counted_never_panic(
        payloads in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..80), 1..20),
        src in 0..5u32,
    ) {
        let mut net = Net::new(3, 2, 2, 100_000, 13, |_| {});
        net.run_until(20_000);
        for p in [0, 1, 3] {
            for payload in &payloads {
                let before = net.procs[p].stats().malformed;
                let input = AppInput::Deliver {
                    src: ProcId(src),
                    ts: Timestamp::new(net.now),
                    reliable: true,
                    payload,
                };
                net.procs[p].handle(Instant(net.now), input);
                net.drain(p);
                if decode(payload).is_none() {
                    prop_assert_eq!(net.procs[p].stats().malformed, before + 1);
                }
            }
        }
        net.run_until(200_000);
    }
}
