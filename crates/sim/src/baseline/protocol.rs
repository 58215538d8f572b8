//! The baseline protocols (`onepipe-baselines`) on the simulation engine ([`crate::engine`]): the
//! same topology, ECMP routing, link model, host CPU model, clocks, workload and faults as 1Pipe
//! ([`crate::onepipe`]), with switches that are plain forwarders.
//!
//! **Processes and cores.** The processes of a host share one core, as a 1Pipe host's
//! processes share its host role's: one serial CPU with the 1Pipe host's costs —
//! `host_recv_ns` per packet taken in, `host_send_ns` per packet sent, `host_deliver_ns` per
//! message delivered — and one FIFO of the inputs, for any of its processes, that arrive while
//! it is busy. The benches give that CPU `procs_per_host` cores' speed
//! ([`NetworkConfig::pool_host_cpu`](crate::config::NetworkConfig::pool_host_cpu), for 1Pipe
//! alike), so a host has a core's capacity per process (the paper's testbed gives each process a
//! pair of threads, §7.1) and a busy process may use what its neighbours leave. The processes of
//! a host share its uplink and downlink. A packet between two processes of one host skips the
//! network but still costs a send and a receive. While [`HOST_QUEUE_SEND_MAX`] sends wait for a
//! host's core, further sends of its processes are refused (`sends_rejected`), as for a 1Pipe
//! host.
//!
//! **The sequencer.** It is one more role, process `procs`.
//! * Host placement (\[57\]): attached to host 0's NIC port (it shares host 0's links; the
//!   fat tree has no spare host), on a core of its own (not host 0's processes') whose cost per
//!   packet in and out is [`BaselineConfig::seq_host_packet_ns`] — one send per destination
//!   copy, which is what makes it saturate.
//! * Switch placement (\[51\]): on the first top-layer switch (a fat-tree core, a leaf-spine
//!   spine; the ToR's up half in a rack). Packets addressed to it climb to it on a fixed up
//!   path; it takes [`BaselineConfig::seq_switch_packet_ns`] per packet in and replicates the
//!   copies at line rate onto its output links.
//!
//! In both placements the sequencer's input stage overlaps its output, but it takes its next
//! input only when that input's copies would find the wire free (a NIC or switch pauses its
//! input rather than queueing on its output without bound), and
//! while [`BaselineConfig::seq_queue_len_max`] packets wait at its input the processes' sends
//! are refused: lossless backpressure (PFC in the paper's RoCEv2 testbed) instead of a queue
//! that grows for the whole run.
//!
//! **Crashes** (`--crash-host`, ToTo and all-ack only: the others do not fail over): from its
//! crash time a host's processes take in nothing (packets to them are dropped), send nothing,
//! and their timers and workload stop. The survivors' membership (ToTo §5) does the rest; the
//! checkers are told who crashes ([`BaseChecker::on_crash`]).
//!
//! What it is not: a congestion model. Link queues are unbounded FIFOs as in the 1Pipe engine;
//! switches forward in zero time (their pipeline latency is part of the link latency).

use super::causal::CausalCheck;
use super::check::{BaseChecker, Dsts, LossRules};
use super::config::{class_of_kind, class_targeted, BaselineConfig};
use super::{ArrivalLog, DeliverySample};
use crate::clock::Clock;
use crate::config::{SimConfig, WorkloadKind};
use crate::engine::{self, Core, CoreInput, Costs, Engine, Protocol, RoleSt, Seeds};
use crate::metrics::{NsHistogram, TraceHash};
use crate::optimistic::OptRun;
use crate::queue::{EventQueue, SimTime};
use bytes::{BufMut, Bytes, BytesMut};
use onepipe_baselines::isis::{IsisConfig, IsisEndpoint};
use onepipe_baselines::lamport::{LamportConfig, LamportEndpoint};
use onepipe_baselines::plato::{PlatoConfig, PlatoEndpoint};
use onepipe_baselines::sequencer::{
    OrderBatchConfig, SeqEndpoint, SeqEndpointConfig, Sequencer, SequencerConfig,
    SequencerPlacement,
};
use onepipe_baselines::token::{TokenConfig, TokenEndpoint};
use onepipe_baselines::toto::{TotoConfig, TotoEndpoint};
use onepipe_baselines::{
    BaseEvent, BaseNode, BasePacket, BaseSendError, Dests, PacketClass, Protocol as BaseProtocol,
    PORT,
};
use onepipe_proto::topology::{Half, NodeKind, Topology};
use onepipe_proto::{drive, Input, Instant, Node, NodeId, Output, ProcId};
use std::convert::Infallible;
use std::sync::Arc;

/// An event of a baseline run: the engine's, none of the protocol's own.
pub type Ev = engine::Ev<Infallible>;

/// A simulated data center running one baseline protocol.
pub type BaseWorld<Q> = Engine<Baselines, Q>;

/// Where a role runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Place {
    Host(u32),
    Switch(u32),
}

pub use crate::engine::HOST_QUEUE_SEND_MAX;

/// Marks "no link" in the per-node table toward the sequencer switch.
const NO_LINK: u32 = u32::MAX;

/// The baselines' counters (the network's and the workload's are [`Engine::net`]).
#[derive(Clone, Debug, Default)]
pub struct BaseEngineStats {
    /// Packets between roles of one host (no network).
    pub local_packets: u64,
    /// Sends the protocol refused (`BaseSendError::Full`: the token's queue).
    pub sends_refused_full: u64,
    /// Sends accepted.
    pub scatterings: u64,
    /// Messages sent (one per destination).
    pub messages_sent: u64,
    /// Messages delivered.
    pub delivered: u64,
    /// Messages delivered while processes were still sending.
    pub delivered_in_period: u64,
    /// Messages receivers gave up on (`BaseEvent::Lost`).
    pub lost_reported: u64,
    /// Sends reported lost before being ordered (`BaseEvent::SendFailed`).
    pub send_failed: u64,
}

/// A baseline protocol's state in a run: its roles (processes `0..procs`, then the sequencer if
/// any) and where they run, the workload's bookkeeping, the checker and the metrics.
pub struct Baselines {
    base: BaselineConfig,
    procs: u32,
    roles: Vec<BaseNode>,
    place: Vec<Place>,
    /// Host of each role, for routing (`topo.hosts()` for a switch-placed sequencer).
    route_host: Vec<u32>,
    sequencer: Option<u32>,
    /// Per node, the output link toward the switch-placed sequencer.
    toward_seq: Vec<u32>,
    route_seed: u64,
    next_seq: Vec<u64>,
    loss_class: Option<PacketClass>,
    heartbeat_interval_ns: u64,
    /// The checker, when checks are on.
    pub checker: Option<BaseChecker>,
    /// The causal-order check, when checks are on and the protocol promises causal order
    /// (ToTo, all-ack).
    pub causal: Option<CausalCheck>,
    /// Send → deliver latency, true time.
    pub latency: NsHistogram,
    /// PLATO's optimistic deliveries: their latency, counts, hash and checker.
    pub opt: Option<OptRun>,
    /// Hash of every send, delivery and loss report.
    pub trace: TraceHash,
    /// Counters.
    pub stats: BaseEngineStats,
    /// What arrived where, when [`BaselineConfig::log_arrivals`] is on.
    pub arrivals: Option<ArrivalLog>,
    /// Every delivery and rollback, when [`BaselineConfig::log_deliveries`] is on.
    pub deliveries: Option<Vec<DeliverySample>>,
    /// Per process, when its host crashes (`--crash-host`, ToTo and all-ack only): from then
    /// on it takes in nothing, sends nothing and its timers stop.
    crash_at: Vec<Option<SimTime>>,
}

impl Baselines {
    /// Process `role`'s host has crashed by `t` (the sequencer never does).
    fn dead(&self, role: u32, t: SimTime) -> bool {
        self.crash_at
            .get(role as usize)
            .copied()
            .flatten()
            .is_some_and(|at| t >= at)
    }
}

impl Protocol for Baselines {
    type Packet = BasePacket;
    type Ev = Infallible;
    type Input = Infallible;

    #[inline]
    fn wire_len(p: &BasePacket) -> usize {
        p.wire_len()
    }

    #[inline]
    fn background(p: &BasePacket) -> bool {
        p.class() == PacketClass::Heartbeat
    }

    #[inline]
    fn counted(p: &BasePacket) -> bool {
        p.class() != PacketClass::Token
    }

    fn lossy(&self, cfg: &SimConfig, p: &BasePacket) -> bool {
        cfg.faults.loss_kind.is_none()
            || self
                .loss_class
                .is_some_and(|t| class_targeted(t, p.class()))
    }

    fn procs(&self) -> u32 {
        self.procs
    }

    fn sender(&self, proc: u32) -> u32 {
        proc
    }

    #[inline]
    fn poll_timeout(&self, role: u32) -> Option<Instant> {
        self.roles[role as usize].poll_timeout()
    }

    fn down(&self, role: u32, t: SimTime) -> bool {
        self.dead(role, t)
    }

    #[inline]
    fn arrive<Q: EventQueue<Ev>>(e: &mut BaseWorld<Q>, t: SimTime, link: u32, slot: u32) {
        e.on_arrive(t, link, slot);
    }

    #[inline]
    fn process<Q: EventQueue<Ev>>(
        e: &mut BaseWorld<Q>,
        t: SimTime,
        role: u32,
        input: CoreInput<Infallible>,
    ) {
        e.core_process(t, role, input);
    }

    fn event<Q: EventQueue<Ev>>(_e: &mut BaseWorld<Q>, _t: SimTime, ev: Infallible) {
        match ev {}
    }

    /// While [`BaselineConfig::seq_queue_len_max`] packets wait at the sequencer's input, the
    /// processes' sends are refused (lossless backpressure).
    fn sends_blocked<Q: EventQueue<Ev>>(e: &BaseWorld<Q>) -> bool {
        let p = &e.proto;
        p.sequencer
            .is_some_and(|s| e.core_ref(s).pending_packets >= p.base.seq_queue_len_max)
    }
}

/// The switch a switch-placed sequencer runs on: the first top-layer node (fat-tree core,
/// spine), or in a rack the ToR's up half.
pub fn sequencer_switch(topo: &Topology) -> NodeId {
    let is = |half: Half| {
        topo.switches()
            .find(|&n| matches!(topo.node(n).kind, NodeKind::Switch { half: h, .. } if h == half))
    };
    is(Half::Top)
        .or_else(|| is(Half::Up))
        .expect("a topology has at least one switch")
}

/// The checker of a run with checks on, told which processes crash (`crash_at`, per
/// process).
fn new_checker(
    cfg: &SimConfig,
    base: &BaselineConfig,
    crash_at: &[Option<SimTime>],
) -> Option<BaseChecker> {
    let rules = LossRules {
        lost_is_exact: base.protocol != BaseProtocol::Token,
    };
    let mut c = cfg
        .check
        .then(|| BaseChecker::new(crash_at.len() as u32, rules))?;
    for (p, at) in crash_at.iter().enumerate() {
        if at.is_some() {
            c.on_crash(p as u32);
        }
    }
    Some(c)
}

/// Per process of `procs`, when its host crashes (`--crash-host`; the earliest if named
/// twice), if it does.
fn crash_times(cfg: &SimConfig, procs: u32) -> Vec<Option<SimTime>> {
    let pph = cfg.net.procs_per_host;
    (0..procs)
        .map(|p| {
            cfg.faults
                .crashes
                .iter()
                .filter(|c| c.0 == p / pph)
                .map(|c| c.1)
                .min()
        })
        .collect()
}

/// Per node, an output link on an up path to `target` (`NO_LINK` where there is none): a
/// fixed path, as an address-based route to one switch is.
fn paths_toward(topo: &Topology, target: NodeId) -> Vec<u32> {
    let mut next = vec![NO_LINK; topo.nodes().len()];
    let mut reaches = vec![false; topo.nodes().len()];
    reaches[target.index()] = true;
    // The routing graph is a DAG of depth at most a handful of links: relax until stable.
    let mut changed = true;
    while changed {
        changed = false;
        for (i, l) in topo.links().iter().enumerate() {
            if reaches[l.to.index()] && !reaches[l.from.index()] {
                reaches[l.from.index()] = true;
                next[l.from.index()] = i as u32;
                changed = true;
            }
        }
    }
    next
}

impl<Q: EventQueue<Ev>> BaseWorld<Q> {
    /// Builds the network and the group of `base.protocol` (the configuration must have passed
    /// `BaselineConfig::validate`).
    pub fn new(cfg: SimConfig, base: BaselineConfig, queue: Q) -> Result<BaseWorld<Q>, String> {
        let topo = Arc::new(cfg.net.topology.build()?);
        let pph = cfg.net.procs_per_host;
        let procs = topo.hosts() * pph;
        let seeds = Seeds::new(cfg.seed);
        let clock_params = engine::clock_params(&cfg);
        let heartbeat_interval_ns = base.heartbeat_interval(&cfg, procs);
        let roles = Self::group(&base, procs, heartbeat_interval_ns);
        let switch_node = sequencer_switch(&topo);
        let mut place: Vec<Place> = (0..procs).map(|p| Place::Host(p / pph)).collect();
        let sequencer = (roles.len() as u32 > procs).then_some(procs);
        if sequencer.is_some() {
            place.push(match base.protocol {
                BaseProtocol::SequencerSwitch => Place::Switch(switch_node.0),
                _ => Place::Host(0),
            });
        }
        let route_host = place
            .iter()
            .map(|p| match p {
                Place::Host(h) => *h,
                Place::Switch(_) => topo.hosts(),
            })
            .collect();
        let cpus = Self::cores(
            &cfg,
            &base,
            topo.hosts(),
            sequencer.map(|s| place[s as usize]),
        );
        let clocks = place
            .iter()
            .enumerate()
            .map(|(r, p)| {
                let node = match *p {
                    Place::Host(h) | Place::Switch(h) => h,
                };
                let cpu = if Some(r as u32) == sequencer {
                    topo.hosts()
                } else {
                    r as u32 / pph
                };
                RoleSt::new(Clock::new(clock_params, seeds.clock, node), Some(cpu))
            })
            .collect();
        let links = engine::build_links(&cfg, &topo);
        let toward_seq = match base.protocol {
            BaseProtocol::SequencerSwitch => paths_toward(&topo, switch_node),
            _ => Vec::new(),
        };
        let crash_at = crash_times(&cfg, procs);
        let proto = Baselines {
            loss_class: cfg.faults.loss_kind.and_then(class_of_kind),
            procs,
            roles,
            place,
            route_host,
            sequencer,
            toward_seq,
            route_seed: seeds.route,
            next_seq: vec![0; procs as usize],
            heartbeat_interval_ns,
            checker: new_checker(&cfg, &base, &crash_at),
            causal: (cfg.check
                && matches!(base.protocol, BaseProtocol::Toto | BaseProtocol::AllAck))
            .then(|| CausalCheck::new(procs)),
            latency: NsHistogram::default(),
            opt: (base.protocol == BaseProtocol::Plato).then(|| OptRun::new(procs, cfg.check)),
            trace: TraceHash::default(),
            stats: BaseEngineStats::default(),
            arrivals: base.log_arrivals.then(|| ArrivalLog::new(procs)),
            deliveries: base.log_deliveries.then(Vec::new),
            crash_at,
            base,
        };
        Ok(Engine::assemble(
            cfg, topo, queue, seeds, proto, clocks, cpus, links,
        ))
    }

    /// The cores of `hosts` hosts, and of the sequencer at `sequencer` if there is one: core h
    /// is host h's, shared by its processes; the sequencer's is the next one, its own.
    fn cores(
        cfg: &SimConfig,
        base: &BaselineConfig,
        hosts: u32,
        sequencer: Option<Place>,
    ) -> Vec<Core<Infallible>> {
        let (seq_in, seq_out) = base.seq_host_costs(cfg);
        let host_costs = Costs {
            recv_ns: cfg.net.host_recv_ns,
            send_ns: cfg.net.host_send_ns,
            deliver_ns: cfg.net.host_deliver_ns,
        };
        let mut cpus: Vec<Core<Infallible>> = (0..hosts)
            .map(|_| Core::new(host_costs, HOST_QUEUE_SEND_MAX, false))
            .collect();
        if let Some(place) = sequencer {
            let costs = match place {
                Place::Switch(_) => (base.seq_switch_packet_ns, 0),
                Place::Host(_) => (seq_in, seq_out),
            };
            let costs = Costs {
                recv_ns: costs.0,
                send_ns: costs.1,
                deliver_ns: 0,
            };
            cpus.push(Core::new(costs, HOST_QUEUE_SEND_MAX, false));
        }
        cpus
    }

    /// The roles of one group: endpoints `0..procs`, then the sequencer if there is one.
    fn group(base: &BaselineConfig, procs: u32, heartbeat_interval_ns: u64) -> Vec<BaseNode> {
        let ids = (0..procs).map(ProcId);
        match base.protocol {
            BaseProtocol::Sequencer | BaseProtocol::SequencerSwitch => {
                let mut nodes: Vec<BaseNode> = ids
                    .map(|id| {
                        BaseNode::SeqEndpoint(SeqEndpoint::new(SeqEndpointConfig::new(id, procs)))
                    })
                    .collect();
                let mut sc = SequencerConfig::new(procs);
                sc.switch_packet_ns = base.seq_switch_packet_ns;
                if base.protocol == BaseProtocol::SequencerSwitch {
                    sc.placement = SequencerPlacement::Switch;
                }
                nodes.push(BaseNode::Sequencer(Sequencer::new(sc)));
                nodes
            }
            BaseProtocol::Token => ids
                .map(|id| {
                    let mut tc = TokenConfig::new(id, procs);
                    tc.batch_max = base.token_batch_max;
                    tc.send_queue_len_max = base.token_queue_len_max;
                    BaseNode::Token(TokenEndpoint::new(tc))
                })
                .collect(),
            BaseProtocol::Lamport => ids
                .map(|id| {
                    let mut lc = LamportConfig::new(id, procs);
                    lc.heartbeat_interval_ns = heartbeat_interval_ns;
                    BaseNode::Lamport(LamportEndpoint::new(lc))
                })
                .collect(),
            BaseProtocol::Isis => ids
                .map(|id| BaseNode::Isis(IsisEndpoint::new(IsisConfig::new(id, procs))))
                .collect(),
            BaseProtocol::Plato | BaseProtocol::PlatoFixed => Self::plato_group(base, procs),
            BaseProtocol::Toto | BaseProtocol::AllAck => ids
                .map(|id| {
                    let mut tc = TotoConfig::new(id, procs, base.toto_rule(procs));
                    tc.causal.idle_ns = base.toto_heartbeat_ns;
                    tc.causal.retry_ns = base.toto_retry_ns;
                    tc.member.suspect_ns = base.toto_suspect();
                    let e = TotoEndpoint::new(tc).expect("φ checked by BaselineConfig::validate");
                    BaseNode::Toto(e)
                })
                .collect(),
        }
    }

    /// PLATO's group: endpoints (optimistic or not) and a sequencer sending the order in
    /// batches of `plato_k`.
    fn plato_group(base: &BaselineConfig, procs: u32) -> Vec<BaseNode> {
        let optimistic = base.protocol == BaseProtocol::Plato;
        let mut nodes: Vec<BaseNode> = (0..procs)
            .map(|id| {
                let mut pc = PlatoConfig::new(ProcId(id), procs);
                pc.opt = optimistic.then(|| base.plato_opt());
                // A copy the order has not named long after a batch would have: an orphan. At
                // least 10 ms: under overload the order trails the copies by milliseconds, and
                // dropping a copy that is only late makes the sequencer resend it, which
                // feeds the overload (`vopr --plato` seed 213).
                let batch_late = 100 * base.plato_flush_ns.max(pc.nack_timeout_ns);
                pc.orphan_timeout_ns = batch_late.max(10_000_000);
                BaseNode::Plato(PlatoEndpoint::new(pc))
            })
            .collect();
        let mut sc = SequencerConfig::new(procs);
        sc.order_batch = Some(OrderBatchConfig {
            k: base.plato_k,
            flush_ns: base.plato_flush_ns,
        });
        nodes.push(BaseNode::Sequencer(Sequencer::new(sc)));
        nodes
    }

    /// The roles: processes `0..procs`, then the sequencer if any.
    pub fn roles(&self) -> &[BaseNode] {
        &self.proto.roles
    }

    /// The Lamport heartbeat interval in force (computed even for other protocols).
    pub fn heartbeat_interval_ns(&self) -> u64 {
        self.proto.heartbeat_interval_ns
    }

    /// The sequencer's busy time so far (its CPU or pipeline), if there is a sequencer.
    pub fn sequencer_busy_ns(&self) -> Option<u64> {
        self.proto.sequencer.map(|s| self.core_ref(s).busy_ns)
    }

    /// The node the sequencer runs on, by name, if there is a sequencer.
    pub fn sequencer_node(&self) -> Option<String> {
        self.proto
            .sequencer
            .map(|s| match self.proto.place[s as usize] {
                Place::Host(h) => format!("host-{h} (own core)"),
                Place::Switch(n) => self.topo.node(NodeId(n)).name.clone(),
            })
    }

    /// True when only the token is left moving: no other packet on a link or queued at a core,
    /// no send waiting, and every role idle (nothing buffered, queued or being repaired, no
    /// heartbeat or sync due). A run drains until then, so undelivered messages are losses.
    pub fn quiescent(&self) -> bool {
        let now = self.now();
        self.live == 0
            && self.cpus.iter().all(|c| c.pending_sends == 0)
            && self
                .proto
                .roles
                .iter()
                .enumerate()
                .all(|(r, role)| self.proto.dead(r as u32, now) || role.is_idle())
            && self.caught_up()
    }

    /// True when every receiver has taken in (delivered, skipped or given up on) everything
    /// its sources sent it. A receiver that lost a stream's tail does not know it until a
    /// heartbeat, a sync or the token tells it, and the token in particular may be still on
    /// its way: idle roles alone do not make a finished run.
    fn caught_up(&self) -> bool {
        let n = self.proto.procs as usize;
        match self.proto.base.protocol {
            BaseProtocol::Sequencer
            | BaseProtocol::SequencerSwitch
            | BaseProtocol::Plato
            | BaseProtocol::PlatoFixed => {
                let ordered = self.ordered_per_receiver().expect("a sequencer");
                self.proto.roles[..n]
                    .iter()
                    .zip(ordered)
                    .all(|(r, o)| match r {
                        BaseNode::SeqEndpoint(e) => e.received_through() >= o,
                        BaseNode::Plato(e) => e.received_through() >= o,
                        _ => false,
                    })
            }
            BaseProtocol::Token => {
                let stamped: u64 = self.proto.roles.iter().map(|r| r.stats().stamped).sum();
                self.proto
                    .roles
                    .iter()
                    .all(|r| matches!(r, BaseNode::Token(e) if e.received_through() >= stamped))
            }
            BaseProtocol::Lamport => {
                let lamport = |i: usize| match &self.proto.roles[i] {
                    BaseNode::Lamport(e) => e,
                    _ => unreachable!("a Lamport group has only Lamport endpoints"),
                };
                (0..n).all(|r| {
                    (0..n).all(|s| {
                        lamport(r).received_from(ProcId(s as u32))
                            >= lamport(s).sent_to(ProcId(r as u32))
                    })
                })
            }
            BaseProtocol::Isis => {
                let isis = |i: usize| match &self.proto.roles[i] {
                    BaseNode::Isis(e) => e,
                    _ => unreachable!("an ISIS group has only ISIS endpoints"),
                };
                (0..n).all(|r| {
                    (0..n).all(|s| {
                        isis(r).received_from(ProcId(s as u32)) >= isis(s).sent_to(ProcId(r as u32))
                    })
                })
            }
            BaseProtocol::Toto | BaseProtocol::AllAck => {
                let toto = |i: usize| match &self.proto.roles[i] {
                    BaseNode::Toto(e) => e,
                    _ => unreachable!("a ToTo group has only ToTo endpoints"),
                };
                // A crashed machine is left out: the survivors are idle only once they agreed
                // on its cut and delivered up to it (§5).
                let now = self.now();
                let alive: Vec<usize> = (0..n)
                    .filter(|&p| !self.proto.dead(p as u32, now))
                    .collect();
                alive.iter().all(|&r| {
                    alive
                        .iter()
                        .all(|&s| toto(r).received_from(ProcId(s as u32)) >= toto(s).sent())
                })
            }
        }
    }

    /// ToTo's and all-ack's (τ, ω) counts summed over the machines
    /// ([`TotoEndpoint::latency_index`]); `None` for other protocols.
    pub fn toto_index(&self) -> Option<Vec<u64>> {
        let mut sum: Option<Vec<u64>> = None;
        for role in &self.proto.roles[..self.proto.procs as usize] {
            let BaseNode::Toto(e) = role else {
                return None;
            };
            let counts = e.latency_index();
            let acc = sum.get_or_insert_with(|| vec![0; counts.len()]);
            for (a, c) in acc.iter_mut().zip(counts) {
                *a += c;
            }
        }
        sum
    }

    /// Per receiver, how many messages the sequencer ordered for it (sequencer protocols only).
    pub fn ordered_per_receiver(&self) -> Option<Vec<u64>> {
        let s = self.proto.sequencer?;
        let BaseNode::Sequencer(seq) = &self.proto.roles[s as usize] else {
            unreachable!("the role after the endpoints is the sequencer");
        };
        Some(
            (0..self.proto.procs)
                .map(|d| seq.ordered_for(ProcId(d)))
                .collect(),
        )
    }

    // --- The network -------------------------------------------------------------------------

    /// Sends a packet a role produced at time `at`; returns when it has left on the wire.
    fn send_packet(&mut self, from: u32, packet: BasePacket, at: SimTime) -> SimTime {
        let dst = packet.dst.0;
        let Some(&dst_place) = self.proto.place.get(dst as usize) else {
            // Roles address only group members; a stray id is the role's bug, counted as lost.
            self.net.packets_lost += 1;
            return at;
        };
        let pkt = self.new_packet(packet);
        match self.proto.place[from as usize] {
            Place::Host(h) if dst_place == Place::Host(h) => {
                self.proto.stats.local_packets += 1;
                self.queue.push(
                    at,
                    Ev::Local {
                        role: dst,
                        slot: pkt,
                    },
                );
                at
            }
            Place::Host(h) => {
                let up = self.topo.uplink(h).0;
                self.put_on_link(up, pkt, at)
            }
            Place::Switch(n) => {
                let link = self.next_link(n, pkt);
                self.put_on_link(link, pkt, at)
            }
        }
    }

    /// The output link at switch node `n` for packet `pkt`.
    fn next_link(&self, n: u32, pkt: u32) -> u32 {
        let p = self.packets.get(pkt);
        if Some(p.dst.0) == self.proto.sequencer && !self.proto.toward_seq.is_empty() {
            let l = self.proto.toward_seq[n as usize];
            assert_ne!(
                l, NO_LINK,
                "no up path from node {n} to the sequencer switch"
            );
            return l;
        }
        let sh = self.proto.route_host[p.src.index()];
        let dh = self.proto.route_host[p.dst.index()];
        self.ecmp_link(n, sh, dh, self.proto.route_seed)
    }

    fn on_arrive(&mut self, t: SimTime, link: u32, pkt: u32) {
        let to = self.links[link as usize].to;
        let dst = self.packets.get(pkt).dst.0;
        if to < self.topo.hosts() || self.proto.place[dst as usize] == Place::Switch(to) {
            debug_assert!(
                to >= self.topo.hosts() || self.proto.place[dst as usize] == Place::Host(to)
            );
            self.input(t, dst, CoreInput::Packet(pkt));
            return;
        }
        // A plain forwarder: zero processing time (the pipeline is in the link latency).
        let out = self.next_link(to, pkt);
        self.put_on_link(out, pkt, t);
    }

    /// One input at a role's core: the mutation, then its outputs, each charged in turn.
    fn core_process(&mut self, t: SimTime, role: u32, input: CoreInput<Infallible>) {
        let r = role as usize;
        let local = self.local(role, t);
        let mut cursor = t;
        match input {
            CoreInput::Packet(pkt) => {
                cursor += self.core(role).costs.recv_ns;
                let packet = self.take_packet(pkt);
                if let Some(log) = self.proto.arrivals.as_mut() {
                    log.on_taken_in(role, &packet);
                }
                self.proto.roles[r].handle(local, Input::Packet { port: PORT, packet });
            }
            CoreInput::Timeout => self.proto.roles[r].handle(local, Input::Timeout),
            CoreInput::Send { issued, .. } => self.app_send(t, role, issued, local),
            CoreInput::Proto(x) => match x {},
        }
        let mut on_wire = cursor;
        drive::drain_in(
            self,
            |w| &mut w.proto.roles[r],
            |w, o| match o {
                Output::Send { packet, .. } => {
                    cursor += w.core(role).costs.send_ns;
                    on_wire = on_wire.max(w.send_packet(role, packet, cursor));
                }
                Output::Event(e) => {
                    let deliver_ns = w.core(role).costs.deliver_ns;
                    w.on_event(e, &mut cursor, deliver_ns, local);
                }
            },
        );
        let sequencer = self.proto.sequencer;
        let c = self.core(role);
        let work = cursor - t;
        c.busy_ns += work;
        // The sequencer's input stage overlaps its output, but it takes its next input only
        // when that input's copies would find the wire free (module docs): when the output is
        // slower than the input, the output paces it.
        c.free = if Some(role) == sequencer {
            cursor.max(on_wire.saturating_sub(work))
        } else {
            cursor
        };
        self.rearm(role);
    }

    /// The application of process `p` sends its next message.
    fn app_send(&mut self, t: SimTime, p: u32, issued: SimTime, local: Instant) {
        let seq = self.proto.next_seq[p as usize];
        let mut payload = BytesMut::with_capacity(self.cfg.workload.msg_size);
        payload.put_u64(seq);
        payload.put_u64(issued);
        payload.resize(self.cfg.workload.msg_size, 0);
        let payload: Bytes = payload.freeze();
        let n = self.proto.procs;
        let (dests, dsts) = match self.cfg.workload.workload {
            WorkloadKind::AllToAll => (Dests::all(), Dsts::All),
            WorkloadKind::OneToOne => {
                let d = (p + n / 2) % n;
                (Dests::one(ProcId(d)), Dsts::List(vec![d].into()))
            }
            WorkloadKind::Scatter { k } => {
                // k distinct destinations, uniformly (rejection sampling; k <= n is validated).
                let mut v: Vec<u32> = Vec::with_capacity(k as usize);
                while v.len() < k as usize {
                    let d = self.workload_rng.below(u64::from(n)) as u32;
                    if !v.contains(&d) {
                        v.push(d);
                    }
                }
                v.sort_unstable();
                (
                    Dests::list(v.iter().map(|&d| ProcId(d))),
                    Dsts::List(v.into()),
                )
            }
        };
        let count = dests.len(n) as u64;
        match self.proto.roles[p as usize].send(local, payload, dests) {
            Ok(()) => {
                self.proto.next_seq[p as usize] += 1;
                self.proto.stats.scatterings += 1;
                self.proto.stats.messages_sent += count;
                self.proto.trace.add(t);
                self.proto.trace.add(u64::from(p) << 32 | seq);
                if let Some(c) = self.proto.checker.as_mut() {
                    c.on_send(p, seq, dsts);
                }
                if let Some(c) = self.proto.causal.as_mut() {
                    c.on_send(p, seq);
                }
            }
            Err(BaseSendError::Full) => self.proto.stats.sends_refused_full += 1,
            Err(e) => panic!("the simulator's workload sent an invalid message: {e}"),
        }
    }

    /// A role's event at true time `*cursor`; `local` is the role's clock when its input came.
    fn on_event(&mut self, e: BaseEvent, cursor: &mut SimTime, deliver_ns: u64, local: Instant) {
        match e {
            BaseEvent::Deliver {
                dst,
                src,
                seq_or_ts,
                payload,
            } => {
                *cursor += deliver_ns;
                self.proto.stats.delivered += 1;
                if *cursor <= self.cfg.workload.duration_ns {
                    self.proto.stats.delivered_in_period += 1;
                }
                let word = |i: usize| {
                    payload.get(i..i + 8).map_or(u64::MAX, |b| {
                        u64::from_be_bytes(b.try_into().expect("8 bytes"))
                    })
                };
                let (seq, issued) = (word(0), word(8));
                self.proto.latency.record(cursor.saturating_sub(issued));
                if self.proto.base.protocol != BaseProtocol::Plato {
                    // PLATO's deliveries are logged when usable (`on_opt_event`).
                    self.log_delivery(*cursor, Some(cursor.saturating_sub(issued)), None);
                }
                self.proto.trace.add(*cursor);
                self.proto
                    .trace
                    .add(u64::from(dst.0) << 32 | u64::from(src.0));
                self.proto.trace.add(seq);
                self.proto.trace.add(seq_or_ts);
                if let Some(c) = self.proto.checker.as_mut() {
                    c.on_deliver(*cursor, dst.0, src.0, seq, seq_or_ts);
                }
                if let Some(c) = self.proto.causal.as_mut() {
                    c.on_deliver(*cursor, dst.0, src.0, seq);
                }
                if let Some(o) = self.proto.opt.as_mut() {
                    o.on_deliver(*cursor, dst.0, src.0, seq, u128::from(seq_or_ts));
                }
            }
            e @ (BaseEvent::OptDeliver { .. }
            | BaseEvent::Revoke { .. }
            | BaseEvent::Confirm { .. }) => self.on_opt_event(e, *cursor, local),
            BaseEvent::Lost { dst, count, .. } => {
                self.proto.stats.lost_reported += count;
                self.proto
                    .trace
                    .add(0x1057 ^ u64::from(dst.0) << 32 ^ count);
                if let Some(c) = self.proto.checker.as_mut() {
                    c.on_lost(dst.0, count);
                }
            }
            BaseEvent::SendFailed {
                src,
                first_send,
                count,
            } => {
                self.proto.stats.send_failed += count;
                self.proto
                    .trace
                    .add(0xFA11 ^ u64::from(src.0) << 32 ^ first_send);
                if let Some(c) = self.proto.checker.as_mut() {
                    c.on_send_failed(*cursor, src.0, first_send, count);
                }
            }
        }
    }

    /// One of PLATO's hooks at true time `cursor` (`local`: the role's clock then): the
    /// optimistic latency and revoke counts, and the hooks' checker.
    fn on_opt_event(&mut self, e: BaseEvent, cursor: SimTime, local: Instant) {
        let o = self.proto.opt.as_mut().expect("only PLATO reports hooks");
        match e {
            BaseEvent::OptDeliver {
                dst,
                src,
                msg_id,
                usable_at,
                payload,
            } => o.on_opt_deliver(
                cursor,
                local,
                (dst.0, src.0, msg_id, 0),
                &payload,
                usable_at,
            ),
            BaseEvent::Revoke {
                dst, src, msg_id, ..
            } => {
                let rollback = o.on_revoke(cursor, (dst.0, src.0, msg_id, 0));
                if rollback {
                    self.log_delivery(cursor, None, self.plato_delta_ns(dst.0));
                }
            }
            BaseEvent::Confirm { dst, src, msg_id } => {
                let (usable, latency_ns) = o.on_confirm(cursor, (dst.0, src.0, msg_id, 0));
                self.log_delivery(usable, Some(latency_ns), self.plato_delta_ns(dst.0));
            }
            _ => unreachable!("not an optimistic hook"),
        }
    }

    /// Logs a delivery (with its latency) or a rollback (`None`) at true time `at`, when
    /// [`BaselineConfig::log_deliveries`] is on.
    fn log_delivery(&mut self, at: SimTime, latency_ns: Option<u64>, delta_ns: Option<u64>) {
        if let Some(log) = self.proto.deliveries.as_mut() {
            log.push(DeliverySample {
                at_ns: at,
                latency_ns,
                delta_ns,
            });
        }
    }

    /// PLATO endpoint `role`'s Δ now, if deliveries are logged (`None` otherwise, or for
    /// another role).
    fn plato_delta_ns(&self, role: u32) -> Option<u64> {
        self.proto.deliveries.as_ref()?;
        match &self.proto.roles[role as usize] {
            BaseNode::Plato(e) => e.delta_ns(),
            _ => None,
        }
    }
}

impl ArrivalLog {
    /// An empty log for `procs` processes.
    fn new(procs: u32) -> ArrivalLog {
        ArrivalLog {
            early: vec![Vec::new(); procs as usize],
            packets_taken_in: 0,
        }
    }

    /// Process `role`'s core took in `packet`.
    fn on_taken_in(&mut self, role: u32, packet: &BasePacket) {
        self.packets_taken_in += 1;
        if let onepipe_baselines::Body::Early { msg_id, .. } = packet.body {
            if let Some(order) = self.early.get_mut(role as usize) {
                order.push((packet.src.0, msg_id));
            }
        }
    }
}
