//! The part of `DAG_p` (§2.1) the agreed multicast still needs, and what §4.1 reads from it:
//! pending messages, candidates, Tail.
//!
//! Messages come in from the causal layer in causal order. Per machine `q` the DAG keeps
//! `q`'s messages from the first one that *follows a pending message* on (§4.1: a pending
//! message is an agreed one not yet in the total order); older ones can never enter a Tail
//! again and are forgotten. Because a machine's messages follow each other, this log has two
//! properties the rules below lean on:
//!
//! * `q` is in `Tail_p` exactly when its log is not empty (every pending message follows a
//!   candidate), and
//! * the front of `q`'s log is `m_{q,k}`, "the first message from `q` causally following any
//!   candidate message" of the EVTS definition (§4.1, item 3).
//!
//! A machine that crashed (§5.2, Fig. 4) is *defunct*: [`Dag::crash`] comes once all its
//! messages of the agreed cut are here, and from then on it counts in `Tail_p` whatever its
//! log holds.
//!
//! What it is not: a record of the whole DAG. Delivered messages, and causal-only ones that
//! follow no pending message, are gone.

use super::causal::CausalMsg;
use onepipe_proto::ids::ProcId;
use std::collections::VecDeque;

/// A message by its identifier `<sender, counter>` (§2).
pub type MsgId = (ProcId, u64);

/// See the module docs.
#[derive(Debug)]
pub struct Dag {
    /// Per machine, its messages from the first that follows a pending message on.
    logs: Vec<VecDeque<CausalMsg>>,
    /// Per machine, the latest of its messages received.
    received: Vec<u64>,
    /// Per machine, the latest of its messages up to which every agreed one is delivered.
    done: Vec<u64>,
    /// `Defunc_p` (§5.2): per machine, whether a Crash(q) event came for it.
    defunc: Vec<bool>,
    /// Most messages one machine's log holds.
    log_len_max: usize,
    /// Source sets (or candidate sets) delivered so far: the paper's `Nact` (Fig. 3).
    nact: u64,
}

impl Dag {
    /// An empty DAG of `procs` machines, holding at most `log_len_max` messages per machine.
    pub fn new(procs: u32, log_len_max: usize) -> Dag {
        assert!(procs >= 1 && log_len_max >= 1);
        let n = procs as usize;
        Dag {
            logs: vec![VecDeque::new(); n],
            received: vec![0; n],
            done: vec![0; n],
            defunc: vec![false; n],
            log_len_max,
            nact: 0,
        }
    }

    /// Machines, `n`.
    pub fn procs(&self) -> usize {
        self.logs.len()
    }

    /// Delivered sets so far (the paper's `Nact`).
    pub fn nact(&self) -> u64 {
        self.nact
    }

    /// True if a message of `origin` can be added. A full log waits for the total order to
    /// move: the causal layer keeps the message (and the back-pressure reaches its sender).
    pub fn has_room(&self, origin: ProcId) -> bool {
        self.room(origin) > 0
    }

    /// How many more messages of `origin` can be added now.
    pub fn room(&self, origin: ProcId) -> usize {
        self.log_len_max - self.logs[origin.index()].len()
    }

    /// Messages held, all machines together.
    pub fn len(&self) -> usize {
        self.logs.iter().map(VecDeque::len).sum()
    }

    /// True if no message is held.
    pub fn is_empty(&self) -> bool {
        self.logs.iter().all(VecDeque::is_empty)
    }

    /// The latest message of `q` added.
    pub fn received(&self, q: ProcId) -> u64 {
        self.received[q.index()]
    }

    /// True if `q` is in `Defunc_p` (§5.2).
    pub fn is_defunc(&self, q: usize) -> bool {
        self.defunc[q]
    }

    /// §5.2, Fig. 4, Crash(q): "Add q to Defunc_p". The caller added every message of `q` in
    /// the agreed cut first (the event follows them, like a last message of `q` that follows
    /// nothing newer), and never adds another.
    pub fn crash(&mut self, q: ProcId) {
        assert!(!self.defunc[q.index()], "Crash(q) twice");
        self.defunc[q.index()] = true;
    }

    /// Adds the next message from the causal layer (after everything it follows).
    pub fn add(&mut self, m: CausalMsg) {
        let q = m.origin.index();
        assert!(!self.defunc[q], "a message of a defunct machine");
        assert_eq!(
            m.seq,
            self.received[q] + 1,
            "the causal layer is FIFO per machine"
        );
        assert!(self.has_room(m.origin), "the caller checked has_room");
        self.received[q] = m.seq;
        self.logs[q].push_back(m);
        self.settle();
    }

    /// The message `m_{q,k}` at the front of `q`'s log (module docs), if `q` is in `Tail_p`.
    pub fn first_following(&self, q: usize) -> Option<&CausalMsg> {
        self.logs[q].front()
    }

    /// §4.1: "a pending message that follows only delivered messages is called a candidate".
    /// Each machine has at most one: its first pending message, at the front of its log.
    pub fn candidates(&self) -> Vec<&CausalMsg> {
        self.logs
            .iter()
            .enumerate()
            .filter_map(|(o, log)| {
                let c = log.front().filter(|c| c.agreed)?;
                let only_delivered = (0..self.procs()).all(|r| r == o || c.vt[r] <= self.done[r]);
                only_delivered.then_some(c)
            })
            .collect()
    }

    /// §4.1 item 1: `Tail_p(m)`, the machines that sent a message causally following `m`
    /// (its own sender among them). The latest message of `q` follows `m` if any does.
    pub fn tail_of(&self, m: &CausalMsg) -> Vec<ProcId> {
        (0..self.procs())
            .filter(|&q| {
                self.logs[q]
                    .back()
                    .is_some_and(|last| last.follows(m.origin, m.seq))
            })
            .map(|q| ProcId(q as u32))
            .collect()
    }

    /// §4.1 item 1: `Tail_p`, the union over the candidates — the machines with a message
    /// following a pending one — and, §5.2, `∪ Defunc_p`.
    pub fn tail(&self) -> Vec<ProcId> {
        (0..self.procs())
            .filter(|&q| !self.logs[q].is_empty() || self.defunc[q])
            .map(|q| ProcId(q as u32))
            .collect()
    }

    /// Delivers `set` (candidates) as one step of the total order; returns their payloads in
    /// the order given and the step's number (`Nact` after it).
    pub fn deliver(&mut self, set: &[MsgId]) -> (Vec<CausalMsg>, u64) {
        let mut out = Vec::with_capacity(set.len());
        for &(origin, seq) in set {
            let log = &mut self.logs[origin.index()];
            let m = log
                .pop_front()
                .expect("a candidate is at the front of its log");
            assert!(m.agreed && m.seq == seq, "delivering a non-candidate");
            out.push(m);
        }
        self.nact += 1;
        self.settle();
        (out, self.nact)
    }

    /// Recomputes `done` and forgets, at the front of every log, the messages that follow no
    /// pending message.
    fn settle(&mut self) {
        for (q, log) in self.logs.iter().enumerate() {
            self.done[q] = log
                .iter()
                .find(|m| m.agreed)
                .map_or(self.received[q], |m| m.seq - 1);
        }
        for log in &mut self.logs {
            while log
                .front()
                .is_some_and(|m| m.vt.iter().zip(&self.done).all(|(v, d)| v <= d))
            {
                log.pop_front();
            }
        }
    }

    /// Internal invariants (debug builds).
    pub fn invariants(&self) {
        for (q, log) in self.logs.iter().enumerate() {
            debug_assert!(log.len() <= self.log_len_max);
            debug_assert!(self.done[q] <= self.received[q]);
            debug_assert!(log.back().is_none_or(|m| m.seq == self.received[q]));
            debug_assert!(log
                .iter()
                .zip(log.iter().skip(1))
                .all(|(a, b)| a.seq + 1 == b.seq));
        }
    }
}
