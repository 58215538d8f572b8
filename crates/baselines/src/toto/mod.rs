//! ToTo (Dolev, Kramer and Malki, "Early Delivery Totally Ordered Multicast in Asynchronous
//! Environments", FTCS 1993) and the all-ack protocol it is measured against, both over a
//! Transis-style causal multicast layer: the [`TotoEndpoint`], one per machine.
//!
//! * [`causal`] — the causal layer the paper assumes (§2.1): piggybacked ACKs, causal delivery,
//!   NACK recovery, stability, and heartbeats from idle machines (not in the paper).
//! * [`dag`] — the part of `DAG_p` still pending: candidates and Tail (§4.1).
//! * [`toto`](mod@toto) — ToTo(n, φ) (§4): VT and NVT, Win and Future, sources and (DEL).
//! * [`allack`] — all-ack (§1): wait for a message from every machine, deliver the candidates.
//! * [`member`] — the membership (§5.1): suspicion by timeout, agreement on the crashed
//!   machines and their last messages, then Crash(q) into the DAG (§5.2).
//!
//! Both rules deliver a *set* of messages at a time, in lexicographical order of the paper's
//! identifier `<sender, counter>`. The order key of [`BaseEvent::Deliver`] is `(Nact, sender)`:
//! `seq_or_ts` is the number of the set (the paper's `Nact`, Fig. 3: the same at every machine,
//! since every machine delivers the same sets in the same order) and ties break by sender.
//!
//! Every message goes to every machine (the paper's broadcast model): `send` refuses any
//! destination set but [`Dests::all`] with [`BaseSendError::NoDestinations`].
//!
//! **Bounds.** Per machine the DAG holds at most [`TotoConfig::log_len_max`] messages; beyond
//! that the causal layer keeps the next messages undelivered (so unacknowledged, so their
//! senders' windows fill and `send` refuses). This cannot deadlock: when every log is full,
//! every machine has sent a message following a candidate (`NTail_p = n`), which is (DEL)'s
//! case (b) and all-ack's rule, so a set is delivered.
//!
//! **Crashes (§5).** A machine that stops is suspected, agreed crashed and cut (see
//! [`member`]); once its messages up to the cut are in the DAG, Crash(q) makes it defunct
//! (§5.2) and the others go on. What it is not: joins, a configuration change that shrinks
//! `n`, or the live transport.

pub mod allack;
pub mod causal;
pub mod dag;
pub mod member;
#[allow(clippy::module_inception)]
pub mod toto;

#[cfg(test)]
mod tests;

use crate::common::{validate_send, BaseEvent, BaseSendError, BaseStats, Endpoint, PORT};
use crate::dests::Dests;
use crate::packet::{BasePacket, Body, PAYLOAD_LEN_MAX};
use bytes::Bytes;
use causal::{CausalConfig, CausalLayer};
use dag::Dag;
use member::{MemberConfig, Membership};
use onepipe_proto::ids::ProcId;
use onepipe_proto::node::{Input, Node, Output};
use onepipe_proto::time::Instant;
use std::collections::VecDeque;
pub use toto::PhiError;

/// Which rule decides the total order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rule {
    /// ToTo(n, φ) (§4.2), `n/2 ≤ φ < n`.
    Toto {
        /// The threshold φ.
        phi: u32,
    },
    /// All-ack (§1).
    AllAck,
}

/// Static configuration of a [`TotoEndpoint`].
#[derive(Clone, Debug)]
pub struct TotoConfig {
    /// The causal layer (machine id, group, windows, timers).
    pub causal: CausalConfig,
    /// The ordering rule.
    pub rule: Rule,
    /// Most messages of one machine the DAG holds (module docs). Default 1,024.
    pub log_len_max: usize,
    /// Most outputs waiting to be drained; `send` beyond it is [`BaseSendError::Full`].
    /// Default 65,536.
    pub send_queue_len_max: usize,
    /// Largest payload. Default [`PAYLOAD_LEN_MAX`].
    pub payload_len_max: usize,
    /// The membership's timeouts (§5.1).
    pub member: MemberConfig,
}

impl TotoConfig {
    /// Defaults for machine `id` of `procs` under `rule`.
    pub fn new(id: ProcId, procs: u32, rule: Rule) -> TotoConfig {
        TotoConfig {
            causal: CausalConfig::new(id, procs),
            rule,
            log_len_max: 1 << 10,
            send_queue_len_max: 1 << 16,
            payload_len_max: PAYLOAD_LEN_MAX,
            member: MemberConfig::default(),
        }
    }
}

/// One machine running ToTo or all-ack over the causal layer. See the module docs.
#[derive(Debug)]
pub struct TotoEndpoint {
    cfg: TotoConfig,
    causal: CausalLayer,
    dag: Dag,
    member: Membership,
    /// Crashes installed whose cut is not all in the DAG yet: Crash(q) waits for it (§5.2).
    crashes: Vec<(ProcId, u64)>,
    out: VecDeque<Output<BasePacket, BaseEvent>>,
    stats: BaseStats,
    /// Per delivered agreed message, how many had each (τ, ω): entry `τ · (n + 1) + ω`
    /// ([`TotoEndpoint::latency_index`]).
    index: Vec<u64>,
}

impl TotoEndpoint {
    /// An endpoint; a φ outside `n/2 ≤ φ < n` is refused (§4.2).
    ///
    /// # Panics
    /// On an otherwise inconsistent configuration.
    pub fn new(cfg: TotoConfig) -> Result<TotoEndpoint, PhiError> {
        if let Rule::Toto { phi } = cfg.rule {
            toto::check_phi(phi, cfg.causal.procs)?;
        }
        assert!(cfg.send_queue_len_max > 0 && cfg.payload_len_max <= PAYLOAD_LEN_MAX);
        Ok(TotoEndpoint {
            causal: CausalLayer::new(cfg.causal.clone()),
            dag: Dag::new(cfg.causal.procs, cfg.log_len_max),
            member: Membership::new(
                cfg.member,
                cfg.causal.id,
                cfg.causal.procs,
                cfg.causal.retry_ns,
            ),
            crashes: Vec::new(),
            out: VecDeque::new(),
            stats: BaseStats::default(),
            index: vec![0; (cfg.causal.procs as usize + 1).pow(2)],
            cfg,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &TotoConfig {
        &self.cfg
    }

    /// Own messages sent so far, heartbeats included.
    pub fn sent(&self) -> u64 {
        self.causal.sent()
    }

    /// Messages of `src` delivered by the causal layer here (heartbeats included). A driver
    /// compares it with the sender's [`TotoEndpoint::sent`] to tell a finished run from one
    /// still in repair.
    pub fn received_from(&self, src: ProcId) -> u64 {
        self.causal.delivered(src)
    }

    /// Sets delivered so far (the paper's `Nact`).
    pub fn nact(&self) -> u64 {
        self.dag.nact()
    }

    /// Messages in the DAG: pending ones and those following them.
    pub fn dag_len(&self) -> usize {
        self.dag.len()
    }

    /// §6's index of latency and DAG width of the messages delivered here: how many agreed
    /// messages were delivered with each pair (τ, ω), at index `τ · (n + 1) + ω`, both in
    /// `0..=n`. τ is the number of machines this one had heard from after a pending message
    /// when it delivered the message's set (`NTail_p`, §4.1: the messages "may be concurrent
    /// to m, or follow m"); ω is the number of candidates then, machines with a message in
    /// `DAG_p` concurrent to it (the paper's ω, "the size of the candidate set"). All-ack's τ
    /// is always n.
    pub fn latency_index(&self) -> &[u64] {
        &self.index
    }

    /// True when nothing is pending, waiting, unstable or owed, and no membership change
    /// is under way.
    pub fn is_idle(&self) -> bool {
        self.causal.is_idle()
            && self.dag.is_empty()
            && self.member.is_steady()
            && self.crashes.is_empty()
    }

    /// Machines installed as crashed here (§5).
    pub fn crashed(&self) -> u64 {
        self.member.crashed()
    }

    /// True if machine `q` is in this machine's view (not installed as crashed).
    pub fn is_member(&self, q: ProcId) -> bool {
        self.causal.is_alive(q)
    }

    /// §5.2, Fig. 4: Crash(q) for each installed crash whose cut is all in the DAG; true if
    /// any came.
    fn crash_ready(&mut self) -> bool {
        let dag = &mut self.dag;
        let before = self.crashes.len();
        self.crashes.retain(|&(q, cut)| {
            debug_assert!(dag.received(q) <= cut);
            if dag.received(q) < cut {
                return true;
            }
            dag.crash(q);
            false
        });
        self.crashes.len() < before
    }

    /// Takes in what the causal layer delivered and delivers every set the rule allows, until
    /// neither moves.
    fn order(&mut self, now: Instant) {
        loop {
            let mut added = false;
            while let Some(m) = self.causal.poll_deliver() {
                self.dag.add(m);
                added = true;
            }
            added |= self.crash_ready();
            if !added {
                // The rules read only the DAG: nothing new, nothing to decide.
                break;
            }
            let mut moved = false;
            while let Some(set) = self.decide() {
                self.deliver(&set);
                moved = true;
            }
            if !moved {
                break;
            }
            // The DAG has room again: let the causal layer deliver what waited for it.
            let dag = &self.dag;
            self.causal.deliver_ready(now, &|o| dag.room(o));
        }
    }

    fn decide(&self) -> Option<Vec<dag::MsgId>> {
        match self.cfg.rule {
            Rule::Toto { phi } => toto::decide(&self.dag, phi),
            Rule::AllAck => allack::decide(&self.dag),
        }
    }

    /// Delivers one set, in the order given (lexicographical).
    fn deliver(&mut self, set: &[dag::MsgId]) {
        debug_assert!(set.windows(2).all(|w| w[0] < w[1]));
        let n = self.dag.procs();
        let (tau, omega) = (self.dag.tail().len(), self.dag.candidates().len());
        debug_assert!(tau <= n && omega <= n && set.len() <= omega);
        let (msgs, nact) = self.dag.deliver(set);
        self.index[tau * (n + 1) + omega] += msgs.len() as u64;
        self.stats.stamped += 1;
        for m in msgs {
            self.stats.delivered += 1;
            self.out.push_back(Output::Event(BaseEvent::Deliver {
                dst: self.cfg.causal.id,
                src: m.origin,
                seq_or_ts: nact,
                payload: m.payload,
            }));
        }
    }

    fn on_timeout(&mut self, now: Instant) {
        let crashed = self.member.on_timeout(now, &mut self.causal);
        self.on_crashed(now, crashed);
        if self.causal.on_timeout(now, &mut self.stats) && self.dag.has_room(self.cfg.causal.id) {
            self.causal.send(now, false, Bytes::new());
        }
    }

    /// The membership installed these crashes (§5.1): the causal layer now takes their
    /// messages up to the cut; Crash(q) follows once those are in the DAG.
    fn on_crashed(&mut self, now: Instant, crashed: Vec<(ProcId, u64)>) {
        if crashed.is_empty() {
            return;
        }
        self.crashes.extend(crashed);
        let dag = &self.dag;
        self.causal.deliver_ready(now, &|o| dag.room(o));
    }

    /// A packet from the network: the membership's, or the causal layer's.
    fn on_packet(&mut self, now: Instant, packet: BasePacket) {
        let src = packet.src;
        let me = self.cfg.causal.id;
        let ok = src.0 < self.cfg.causal.procs
            && src != me
            && packet.dst == me
            && self.causal.is_alive(src)
            && packet.body.plausible();
        if ok {
            self.member.heard(now, src);
        }
        let crashed = match packet.body {
            Body::TotoFlush { epoch, crashed } if ok => self.member.on_flush(
                now,
                src,
                (epoch, crashed),
                &mut self.causal,
                &mut self.stats,
            ),
            Body::TotoInstall { epoch, cut } if ok => {
                self.member
                    .on_install(now, (epoch, cut), &mut self.causal, &mut self.stats)
            }
            Body::TotoFlush { .. } | Body::TotoInstall { .. } => {
                self.stats.dropped_invalid += 1;
                Vec::new()
            }
            body => {
                let dag = &self.dag;
                let packet = BasePacket { body, ..packet };
                self.causal
                    .on_packet(now, packet, &mut self.stats, &|o| dag.room(o));
                Vec::new()
            }
        };
        self.on_crashed(now, crashed);
    }

    fn after_mutation(&mut self, now: Instant) {
        self.order(now);
        while let Some(packet) = self.causal.poll_packet() {
            self.stats.packets_sent += 1;
            self.out.push_back(Output::Send { port: PORT, packet });
        }
        while let Some(packet) = self.member.poll_packet() {
            self.stats.packets_sent += 1;
            self.out.push_back(Output::Send { port: PORT, packet });
        }
        if cfg!(debug_assertions) {
            self.causal.invariants();
            self.dag.invariants();
        }
    }
}

impl Node for TotoEndpoint {
    type Packet = BasePacket;
    type Event = BaseEvent;
    type Mgmt = std::convert::Infallible;

    fn handle(&mut self, now: Instant, input: Input<BasePacket>) {
        self.member.start(now);
        match input {
            Input::Packet { port, packet } if port == PORT => self.on_packet(now, packet),
            Input::Packet { .. } => self.stats.dropped_invalid += 1,
            Input::Timeout => self.on_timeout(now),
            // The §5 membership is the endpoint's own (`member`): no driver notice needed.
            Input::Notice(_) => {}
        }
        self.after_mutation(now);
    }

    fn poll_output(&mut self) -> Option<Output<BasePacket, BaseEvent>> {
        self.out.pop_front()
    }

    fn poll_timeout(&self) -> Option<Instant> {
        let member = self.member.poll_timeout(&self.causal);
        [self.causal.poll_timeout(), member]
            .into_iter()
            .flatten()
            .min()
    }
}

impl Endpoint for TotoEndpoint {
    fn id(&self) -> ProcId {
        self.cfg.causal.id
    }

    fn send(&mut self, now: Instant, payload: Bytes, dests: Dests) -> Result<(), BaseSendError> {
        let procs = self.cfg.causal.procs;
        validate_send(procs, self.cfg.payload_len_max, &payload, &dests)?;
        if dests.len(procs) != procs as usize {
            return Err(BaseSendError::NoDestinations);
        }
        if !self.causal.has_room()
            || !self.dag.has_room(self.cfg.causal.id)
            || self.out.len() >= self.cfg.send_queue_len_max
        {
            return Err(BaseSendError::Full);
        }
        self.stats.sends += 1;
        self.member.start(now);
        self.causal.send(now, true, payload);
        self.after_mutation(now);
        Ok(())
    }

    fn stats(&self) -> &BaseStats {
        &self.stats
    }
}
