//! A tiny deterministic network for the baseline protocols, and the order checkers.
//!
//! `Net` holds a group of [`BaseNode`]s indexed by process id and moves packets between them
//! with a seeded random delay per packet (so packets overtake each other: the network reorders),
//! optional seeded loss and duplication, restricted to chosen packet kinds. Every packet crosses
//! the "wire" encoded and decoded, so the codec is exercised on every run. All randomness comes
//! from one [`Rng`] seeded per run; there are no clocks: one global time in nanoseconds, handed
//! to every node as its local time.
//!
//! The driving contract of `onepipe_proto::node` is followed exactly: mutate, drain
//! `poll_output` until `None`, re-arm one timer from `poll_timeout`.
//!
//! What it is not: the simulator. No topology, no CPU or link model, no clock skew.

#![allow(dead_code)]

use bytes::{BufMut, Bytes, BytesMut};
use onepipe_baselines::packet::Opcode;
use onepipe_baselines::{BaseEvent, BaseNode, BasePacket, Dests, PORT};
use onepipe_proto::rng::Rng;
use onepipe_proto::{Input, Instant, Node, Output, ProcId};
use std::collections::BTreeMap;

/// The fixed seeds every randomized test runs (≥ 20).
pub const SEEDS: std::ops::Range<u64> = 1..21;

/// How the network treats packets.
#[derive(Clone, Debug)]
pub struct NetConfig {
    /// Smallest one-way delay.
    pub delay_min_ns: u64,
    /// Extra delay, uniform in `0..=jitter`: larger than the gap between packets, so they
    /// reorder.
    pub delay_jitter_ns: u64,
    /// Probability a packet is lost.
    pub loss: f64,
    /// Probability a packet is delivered twice.
    pub dup: f64,
    /// Opcodes that may be lost or duplicated (`None`: all).
    pub faulty: Option<Vec<Opcode>>,
}

impl NetConfig {
    /// Reordering, no loss.
    pub fn reordering() -> NetConfig {
        NetConfig {
            delay_min_ns: 1_000,
            delay_jitter_ns: 4_000,
            loss: 0.0,
            dup: 0.0,
            faulty: None,
        }
    }

    /// Reordering with loss and duplication of every kind of packet.
    pub fn lossy(loss: f64, dup: f64) -> NetConfig {
        NetConfig {
            loss,
            dup,
            ..NetConfig::reordering()
        }
    }
}

/// What the application sends.
#[derive(Clone, Debug)]
pub struct Workload {
    /// Messages per process.
    pub msgs_per_proc: u32,
    /// Sends happen at uniform random times in `0..send_window_ns`.
    pub send_window_ns: u64,
    /// Random destination subsets instead of broadcast.
    pub subsets: bool,
}

impl Workload {
    pub fn broadcast(msgs_per_proc: u32) -> Workload {
        Workload {
            msgs_per_proc,
            send_window_ns: 200_000,
            subsets: false,
        }
    }

    pub fn subsets(msgs_per_proc: u32) -> Workload {
        Workload {
            subsets: true,
            ..Workload::broadcast(msgs_per_proc)
        }
    }
}

/// One sent message: its sender, its number at that sender (send order) and its destinations.
#[derive(Clone, Debug)]
pub struct SentMsg {
    pub src: ProcId,
    pub k: u32,
    pub dests: Vec<ProcId>,
}

/// One delivery at a receiver.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Delivered {
    pub src: ProcId,
    pub k: u32,
    /// The total-order key `(seq_or_ts, src)`.
    pub key: (u64, ProcId),
    pub at_ns: u64,
}

/// One of PLATO's hooks at a receiver, or a final delivery (for `check_hooks`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hook {
    /// `optdeliver` of (src, msg_id).
    Opt(ProcId, u64),
    /// `revoke`, and whether it was a rollback (at or after Tm, by the role's clock).
    Revoke(ProcId, u64, bool),
    /// `confirm`.
    Confirm(ProcId, u64),
    /// The final delivery (`Deliver`) of (src, k), at this place of the total order.
    Final(ProcId, u64, u64),
}

#[derive(Clone, Debug)]
enum Ev {
    Packet(BasePacket),
    Timer { node: usize, generation: u64 },
    AppSend { proc: usize },
}

/// The network and everything it observed.
pub struct Net {
    pub nodes: Vec<BaseNode>,
    pub procs: u32,
    cfg: NetConfig,
    rng: Rng,
    queue: BTreeMap<(u64, u64), Ev>,
    inserted: u64,
    now: u64,
    generation: Vec<u64>,
    armed: Vec<Option<u64>>,
    workload: Workload,
    /// Every message sent, by (src, k).
    pub sent: BTreeMap<(ProcId, u32), SentMsg>,
    next_k: Vec<u32>,
    /// Deliveries per receiving process, in order.
    pub delivered: Vec<Vec<Delivered>>,
    /// `Lost` events per receiving process (message counts).
    pub lost: Vec<u64>,
    /// `SendFailed` reports: (src, first send, count).
    pub send_failed: Vec<(ProcId, u64, u64)>,
    /// PLATO's hooks and the final deliveries per receiving process, in order (optimistic
    /// runs only; empty otherwise).
    pub hooks: Vec<Vec<Hook>>,
    pub packets: u64,
    pub dropped: u64,
    /// Most token holders seen at once (token protocol).
    pub max_token_holders: usize,
    /// Hash of every delivery, in the order they happened.
    pub trace: u64,
}

impl Net {
    /// A network over `nodes` (indexed by process id; the first `procs` are endpoints).
    pub fn new(
        nodes: Vec<BaseNode>,
        procs: u32,
        cfg: NetConfig,
        workload: Workload,
        seed: u64,
    ) -> Net {
        let n = nodes.len();
        let mut net = Net {
            nodes,
            procs,
            cfg,
            rng: Rng::new(seed),
            queue: BTreeMap::new(),
            inserted: 0,
            now: 0,
            generation: vec![0; n],
            armed: vec![None; n],
            workload,
            sent: BTreeMap::new(),
            next_k: vec![0; procs as usize],
            delivered: vec![Vec::new(); procs as usize],
            lost: vec![0; procs as usize],
            send_failed: Vec::new(),
            hooks: vec![Vec::new(); procs as usize],
            packets: 0,
            dropped: 0,
            max_token_holders: 0,
            trace: 0xcbf2_9ce4_8422_2325,
        };
        for p in 0..procs as usize {
            for _ in 0..net.workload.msgs_per_proc {
                let t = net.rng.below(net.workload.send_window_ns);
                net.push(t, Ev::AppSend { proc: p });
            }
        }
        for i in 0..n {
            net.rearm(i);
        }
        net
    }

    pub fn now(&self) -> u64 {
        self.now
    }

    fn push(&mut self, t: u64, ev: Ev) {
        self.inserted += 1;
        self.queue.insert((t, self.inserted), ev);
    }

    /// Runs until `until_ns` (or until nothing is left to happen).
    pub fn run_until(&mut self, until_ns: u64) {
        while let Some(entry) = self.queue.first_entry() {
            if entry.key().0 > until_ns {
                break;
            }
            let ((t, _), ev) = entry.remove_entry();
            self.now = t;
            self.step(ev);
        }
        self.now = self.now.max(until_ns);
    }

    fn step(&mut self, ev: Ev) {
        let now = Instant(self.now);
        let node = match ev {
            Ev::Packet(packet) => {
                let i = packet.dst.index();
                self.nodes[i].handle(now, Input::Packet { port: PORT, packet });
                i
            }
            Ev::Timer { node, generation } => {
                if generation != self.generation[node] {
                    return;
                }
                self.armed[node] = None;
                self.nodes[node].handle(now, Input::Timeout);
                node
            }
            Ev::AppSend { proc } => {
                self.app_send(proc);
                proc
            }
        };
        self.drain(node);
        self.rearm(node);
        self.count_token_holders();
    }

    fn app_send(&mut self, proc: usize) {
        let src = ProcId(proc as u32);
        let k = self.next_k[proc];
        let dests = if self.workload.subsets {
            let mut v: Vec<ProcId> = (0..self.procs)
                .filter(|_| self.rng.chance(0.5))
                .map(ProcId)
                .collect();
            if v.is_empty() {
                v.push(ProcId(self.rng.below(u64::from(self.procs)) as u32));
            }
            v
        } else {
            (0..self.procs).map(ProcId).collect()
        };
        let d = if self.workload.subsets {
            Dests::list(dests.iter().copied())
        } else {
            Dests::all()
        };
        let mut payload = BytesMut::with_capacity(64);
        payload.put_u32(src.0);
        payload.put_u32(k);
        payload.put_bytes(0xAB, 56);
        match self.nodes[proc].send(Instant(self.now), payload.freeze(), d) {
            Ok(()) => {
                self.next_k[proc] += 1;
                self.sent.insert((src, k), SentMsg { src, k, dests });
            }
            Err(e) => panic!("send refused: {e}"),
        }
    }

    fn drain(&mut self, node: usize) {
        while let Some(out) = self.nodes[node].poll_output() {
            match out {
                Output::Send { port, packet } => {
                    assert_eq!(port, PORT);
                    self.transmit(packet);
                }
                Output::Event(e) => self.record(e),
            }
        }
    }

    fn transmit(&mut self, packet: BasePacket) {
        assert!(
            packet.dst.index() < self.nodes.len(),
            "packet to nowhere: {packet:?}"
        );
        assert_ne!(packet.src, packet.dst, "a role sent a packet to itself");
        // Across the wire: encode and decode.
        let mut buf = Vec::with_capacity(packet.encoded_len());
        packet.encode(&mut buf);
        let (packet, used) = BasePacket::decode_bytes(&Bytes::from(buf)).expect("decodes");
        assert_eq!(used, packet.encoded_len());
        self.packets += 1;
        let faulty = self
            .cfg
            .faulty
            .as_ref()
            .is_none_or(|ops| ops.contains(&packet.opcode()));
        if faulty && self.rng.chance(self.cfg.loss) {
            self.dropped += 1;
            return;
        }
        let copies = if faulty && self.rng.chance(self.cfg.dup) {
            2
        } else {
            1
        };
        for _ in 0..copies {
            let delay = self.cfg.delay_min_ns + self.rng.below(self.cfg.delay_jitter_ns + 1);
            self.push(self.now + delay, Ev::Packet(packet.clone()));
        }
    }

    fn record(&mut self, e: BaseEvent) {
        match e {
            BaseEvent::Deliver {
                dst,
                src,
                seq_or_ts,
                payload,
            } => {
                let psrc = u32::from_be_bytes(payload[0..4].try_into().unwrap());
                let k = u32::from_be_bytes(payload[4..8].try_into().unwrap());
                assert_eq!(psrc, src.0, "delivery names the wrong sender");
                for x in [u64::from(dst.0), u64::from(src.0), u64::from(k), seq_or_ts] {
                    self.trace = (self.trace ^ x).wrapping_mul(0x0100_0000_01b3);
                }
                self.delivered[dst.index()].push(Delivered {
                    src,
                    k,
                    key: (seq_or_ts, src),
                    at_ns: self.now,
                });
                self.hooks[dst.index()].push(Hook::Final(src, u64::from(k), seq_or_ts));
            }
            BaseEvent::OptDeliver {
                dst, src, msg_id, ..
            } => self.hooks[dst.index()].push(Hook::Opt(src, msg_id)),
            BaseEvent::Revoke {
                dst,
                src,
                msg_id,
                rollback,
            } => self.hooks[dst.index()].push(Hook::Revoke(src, msg_id, rollback)),
            BaseEvent::Confirm { dst, src, msg_id } => {
                self.hooks[dst.index()].push(Hook::Confirm(src, msg_id))
            }
            BaseEvent::Lost { dst, count, .. } => self.lost[dst.index()] += count,
            BaseEvent::SendFailed {
                src,
                first_send,
                count,
            } => self.send_failed.push((src, first_send, count)),
        }
    }

    fn rearm(&mut self, node: usize) {
        let want = self.nodes[node].poll_timeout().map(|t| t.0.max(self.now));
        if want == self.armed[node] {
            return;
        }
        self.generation[node] += 1;
        self.armed[node] = want;
        if let Some(t) = want {
            let generation = self.generation[node];
            self.push(t, Ev::Timer { node, generation });
        }
    }

    fn count_token_holders(&mut self) {
        let holders = self
            .nodes
            .iter()
            .filter(|n| matches!(n, BaseNode::Token(t) if t.holds_token()))
            .count();
        self.max_token_holders = self.max_token_holders.max(holders);
    }

    /// Total deliveries.
    pub fn deliveries(&self) -> usize {
        self.delivered.iter().map(Vec::len).sum()
    }

    /// Checks the total order: at every receiver deliveries strictly increase in key (so no
    /// duplicates), respect per-sender FIFO, and go only to destinations; a message has the
    /// same key at every receiver and a key names one message. Together these make every pair
    /// of receivers agree on the relative order of what both deliver.
    pub fn check_order(&self) {
        let mut key_of: BTreeMap<(ProcId, u32), (u64, ProcId)> = BTreeMap::new();
        let mut msg_of: BTreeMap<(u64, ProcId), (ProcId, u32)> = BTreeMap::new();
        for (r, ds) in self.delivered.iter().enumerate() {
            let r = ProcId(r as u32);
            let mut last_key = None;
            let mut last_k: BTreeMap<ProcId, u32> = BTreeMap::new();
            for d in ds {
                let m = self
                    .sent
                    .get(&(d.src, d.k))
                    .expect("delivered a message never sent");
                assert!(
                    m.dests.contains(&r),
                    "{r} delivered {:?} not addressed to it",
                    (d.src, d.k)
                );
                assert!(last_key < Some(d.key), "{r}: order regressed at {d:?}");
                last_key = Some(d.key);
                if let Some(&k) = last_k.get(&d.src) {
                    assert!(
                        d.k > k,
                        "{r}: FIFO from {} broken: {} after {}",
                        d.src,
                        d.k,
                        k
                    );
                }
                last_k.insert(d.src, d.k);
                let key = *key_of.entry((d.src, d.k)).or_insert(d.key);
                assert_eq!(
                    key,
                    d.key,
                    "{:?} has different keys at different receivers",
                    (d.src, d.k)
                );
                let msg = *msg_of.entry(d.key).or_insert((d.src, d.k));
                assert_eq!(msg, (d.src, d.k), "key {:?} names two messages", d.key);
            }
        }
    }

    /// How many of each message's destinations delivered it.
    fn delivery_counts(&self) -> BTreeMap<(ProcId, u32), usize> {
        let mut c = BTreeMap::new();
        for ds in &self.delivered {
            for d in ds {
                *c.entry((d.src, d.k)).or_insert(0) += 1;
            }
        }
        c
    }

    /// Every message was delivered at every one of its destinations.
    pub fn check_complete(&self) {
        let c = self.delivery_counts();
        for (id, m) in &self.sent {
            let got = c.get(id).copied().unwrap_or(0);
            assert_eq!(
                got,
                m.dests.len(),
                "message {id:?} delivered {got} of {} times",
                m.dests.len()
            );
        }
    }

    /// Every message was delivered at all of its destinations or at none. Returns how many were
    /// delivered nowhere.
    pub fn check_all_or_none(&self) -> usize {
        let c = self.delivery_counts();
        let mut none = 0;
        for (id, m) in &self.sent {
            match c.get(id).copied().unwrap_or(0) {
                0 => none += 1,
                got => assert_eq!(
                    got,
                    m.dests.len(),
                    "message {id:?} delivered {got} of {} times",
                    m.dests.len()
                ),
            }
        }
        none
    }

    /// PLATO's hooks against what optimistic delivery promises (written from PLATO §4.1, not
    /// from the pipeline): a revoke names a message delivered and not yet revoked or confirmed;
    /// a confirm names the first unconfirmed delivery of the view and is followed at once by
    /// that message's final delivery; nothing is delivered twice without a revoke between;
    /// with `drained`, nothing is left delivered and unconfirmed; and no message is delivered
    /// optimistically once a message after it in the total order was confirmed at that
    /// receiver. Returns (revokes, rollbacks).
    pub fn check_hooks(&self, drained: bool) -> (u64, u64) {
        let (mut revokes, mut rollbacks) = (0, 0);
        let place_of: BTreeMap<(ProcId, u64), u64> = self
            .hooks
            .iter()
            .flatten()
            .filter_map(|h| match *h {
                Hook::Final(s, m, place) => Some(((s, m), place)),
                _ => None,
            })
            .collect();
        for (r, hooks) in self.hooks.iter().enumerate() {
            let mut view: Vec<(ProcId, u64)> = Vec::new();
            let mut confirming: Option<(ProcId, u64)> = None;
            let mut last_place: Option<u64> = None;
            for h in hooks {
                if let Some(c) = confirming.take() {
                    let Hook::Final(s, m, place) = *h else {
                        panic!("{r}: confirm of {c:?} not delivered next");
                    };
                    assert_eq!((s, m), c, "{r}: confirm of {c:?} not delivered next");
                    last_place = Some(place);
                    continue;
                }
                match *h {
                    Hook::Opt(s, m) => {
                        assert!(!view.contains(&(s, m)), "{r}: {s} {m} delivered twice");
                        if let (Some(last), Some(&place)) = (last_place, place_of.get(&(s, m))) {
                            assert!(
                                place > last,
                                "{r}: {s} {m} (place {place}) delivered after place {last} was confirmed"
                            );
                        }
                        view.push((s, m));
                    }
                    Hook::Revoke(s, m, rb) => {
                        let i = view.iter().position(|x| *x == (s, m));
                        view.remove(i.unwrap_or_else(|| panic!("{r}: revoke of {s} {m} not held")));
                        revokes += 1;
                        rollbacks += u64::from(rb);
                    }
                    Hook::Confirm(s, m) => {
                        assert_eq!(
                            view.first(),
                            Some(&(s, m)),
                            "{r}: confirm out of view order"
                        );
                        view.remove(0);
                        confirming = Some((s, m));
                    }
                    Hook::Final(s, m, _) => {
                        panic!("{r}: final delivery of {s} {m} without a confirm")
                    }
                }
            }
            assert!(confirming.is_none(), "{r}: last confirm not delivered");
            if drained {
                assert!(view.is_empty(), "{r}: left unconfirmed: {view:?}");
            }
        }
        (revokes, rollbacks)
    }

    /// Messages reported as `SendFailed`, as (src, k).
    pub fn failed_sends(&self) -> Vec<(ProcId, u32)> {
        let mut v = Vec::new();
        for &(src, first, count) in &self.send_failed {
            for k in first..first + count {
                v.push((src, k as u32));
            }
        }
        v
    }
}
