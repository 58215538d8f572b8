//! The event loop that runs the baseline protocols (`onepipe-baselines`) on the simulated data
//! center: the same topology, ECMP routing, link model, host CPU model, clocks, workload and
//! faults as the 1Pipe engine in [`crate::world`], with switches that are plain forwarders.
//!
//! **Processes and cores.** Every process runs on its own core (the paper's testbed gives each
//! process a pair of threads, §7.1): a core is one serial CPU with the 1Pipe host's costs —
//! `host_recv_ns` per packet taken in, `host_send_ns` per packet sent, `host_deliver_ns` per
//! message delivered — and a FIFO of inputs that arrive while it is busy. The processes of a
//! host share its uplink and downlink. A packet between two processes of one host skips the
//! network but still costs a send and a receive. While 64 sends wait for the cores of a host
//! (`64 / procs_per_host` per core), further sends of that process are refused
//! (`sends_rejected`), as for a 1Pipe host.
//!
//! **The sequencer.** It is one more role, process `procs`.
//! * Host placement (\[57\]): attached to host 0's NIC port (it shares host 0's links; the
//!   fat tree has no spare host), on a core of its own whose cost per packet in and out is
//!   [`BaselineConfig::seq_host_packet_ns`] — one send per destination copy, which is what
//!   makes it saturate.
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
//! What it is not: a congestion model. Link queues are unbounded FIFOs as in the 1Pipe engine;
//! switches forward in zero time (their pipeline latency is part of the link latency).

use super::check::{BaseChecker, Dsts, LossRules};
use super::config::{class_of_kind, class_targeted, BaselineConfig};
use crate::clock::{Clock, ClockParams};
use crate::config::{SimConfig, WorkloadKind};
use crate::metrics::{NsHistogram, TraceHash};
use crate::queue::{EventQueue, SimTime};
use bytes::{BufMut, Bytes, BytesMut};
use onepipe_baselines::isis::{IsisConfig, IsisEndpoint};
use onepipe_baselines::lamport::{LamportConfig, LamportEndpoint};
use onepipe_baselines::sequencer::{
    SeqEndpoint, SeqEndpointConfig, Sequencer, SequencerConfig, SequencerPlacement,
};
use onepipe_baselines::token::{TokenConfig, TokenEndpoint};
use onepipe_baselines::{
    BaseEvent, BaseNode, BasePacket, BaseSendError, Dests, PacketClass, Protocol, PORT,
};
use onepipe_proto::rng::Rng;
use onepipe_proto::topology::{flow_hash, Half, NodeKind, Topology};
use onepipe_proto::{Input, Instant, Node, NodeId, Output, ProcId};
use std::collections::VecDeque;

/// An event. Small and `Copy`: packets live in a slab and events carry their index.
#[derive(Clone, Copy, Debug)]
pub enum Ev {
    /// A packet reaches the far end of a link.
    Arrive {
        /// The link.
        link: u32,
        /// Slab index of the packet.
        pkt: u32,
    },
    /// A packet between two roles of one host reaches the receiver (no network).
    Local {
        /// The receiving role.
        role: u32,
        /// Slab index of the packet.
        pkt: u32,
    },
    /// A role's timer, valid if `generation` is still current.
    Timer {
        /// The role.
        role: u32,
        /// Generation of the arming.
        generation: u32,
    },
    /// A busy core takes its next input.
    CpuWake {
        /// The role whose core it is.
        role: u32,
    },
    /// A process issues its next send.
    Send {
        /// The process.
        proc: u32,
    },
}

#[derive(Clone, Copy, Debug)]
enum CoreInput {
    Packet(u32),
    Timeout,
    Send { issued: SimTime },
}

/// One role's core: a serial CPU (or, for a switch-placed sequencer, its pipeline).
#[derive(Debug)]
struct Core {
    clock: Clock,
    free: SimTime,
    pending: VecDeque<CoreInput>,
    /// Sends among `pending`.
    pending_sends: u32,
    /// Packets among `pending`.
    pending_packets: u32,
    wake_armed: bool,
    timer_generation: u32,
    armed: Option<Instant>,
    /// Time spent processing.
    busy_ns: u64,
    /// Cost per packet in, per packet out, per delivery.
    recv_ns: u64,
    send_ns: u64,
    deliver_ns: u64,
}

#[derive(Debug)]
struct LinkSt {
    to: u32,
    ps_per_byte: u64,
    delay_ns: u64,
    busy_until: SimTime,
    /// Packets still to drop in the current loss burst.
    burst_left: u32,
}

/// Where a role runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Place {
    Host(u32),
    Switch(u32),
}

/// Most sends waiting for the cores of one host before the workload's next send is refused —
/// the same bound as a 1Pipe host's send queue in [`crate::world`]. It is split evenly among the
/// host's processes (each core queues at most `64 / procs_per_host`, at least 1), so a host
/// holds as much queued work in either engine.
pub const HOST_QUEUE_SEND_MAX: u32 = 64;

/// Marks "no link" in the per-node table toward the sequencer switch.
const NO_LINK: u32 = u32::MAX;

/// Counters the engine keeps.
#[derive(Clone, Debug, Default)]
pub struct BaseEngineStats {
    /// Events processed.
    pub events: u64,
    /// Bytes sent on all links.
    pub link_bytes: u64,
    /// Bytes of Lamport heartbeats and sequencer syncs (`PacketClass::Heartbeat`).
    pub heartbeat_bytes: u64,
    /// Packets put on links.
    pub packets: u64,
    /// Packets between roles of one host (no network).
    pub local_packets: u64,
    /// Packets held back by the non-FIFO option.
    pub reordered_packets: u64,
    /// Packets the loss model dropped.
    pub packets_lost: u64,
    /// Packets the duplication model copied.
    pub packets_duplicated: u64,
    /// Sends refused: a core's send queue or the sequencer's input was full.
    pub sends_rejected: u64,
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

/// A simulated data center running one baseline protocol.
pub struct BaseWorld<Q: EventQueue<Ev>> {
    cfg: SimConfig,
    base: BaselineConfig,
    topo: Topology,
    procs: u32,
    roles: Vec<BaseNode>,
    cores: Vec<Core>,
    place: Vec<Place>,
    /// Host of each role, for routing (`topo.hosts()` for a switch-placed sequencer).
    route_host: Vec<u32>,
    sequencer: Option<u32>,
    /// Per node, the output link toward the switch-placed sequencer.
    toward_seq: Vec<u32>,
    links: Vec<LinkSt>,
    packets: crate::slab::Slab<BasePacket>,
    queue: Q,
    rng: Rng,
    workload_rng: Rng,
    route_seed: u64,
    next_seq: Vec<u64>,
    loss_class: Option<PacketClass>,
    heartbeat_interval_ns: u64,
    /// Most sends waiting for one core (`HOST_QUEUE_SEND_MAX / procs_per_host`, at least 1).
    core_queue_send_max: u32,
    now: SimTime,
    /// Packets alive (on links, in flight locally, or queued at cores), token packets excluded.
    live_packets: u64,
    /// The checker, when checks are on.
    pub checker: Option<BaseChecker>,
    /// Send → deliver latency, true time.
    pub latency: NsHistogram,
    /// Hash of every send, delivery and loss report.
    pub trace: TraceHash,
    /// Counters.
    pub stats: BaseEngineStats,
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
        let topo = cfg.topology.build()?;
        let pph = cfg.procs_per_host;
        let procs = topo.hosts() * pph;
        let mut rng = Rng::new(cfg.seed);
        let clock_params = ClockParams {
            skew_ns: cfg.clock_skew_ns,
            drift_ppm: cfg.clock_drift_ppm,
            sync_interval_ns: cfg.clock_sync_interval_ns,
            epoch_ns: cfg.clock_epoch_ns,
        };
        let clock_seed = rng.next_u64();
        let route_seed = rng.next_u64();
        let workload_rng = rng.fork(1);
        let heartbeat_interval_ns = base.heartbeat_interval(&cfg, procs);
        let roles = Self::group(&base, procs, heartbeat_interval_ns);
        let switch_node = sequencer_switch(&topo);
        let mut place: Vec<Place> = (0..procs).map(|p| Place::Host(p / pph)).collect();
        let sequencer = (roles.len() as u32 > procs).then_some(procs);
        if sequencer.is_some() {
            place.push(match base.protocol {
                Protocol::SequencerSwitch => Place::Switch(switch_node.0),
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
        let (seq_in, seq_out) = base.seq_host_costs(&cfg);
        let cores = place
            .iter()
            .enumerate()
            .map(|(r, p)| {
                let (node, costs) = match (*p, Some(r as u32) == sequencer) {
                    (Place::Switch(n), _) => (n, (base.seq_switch_packet_ns, 0, 0)),
                    (Place::Host(h), true) => (h, (seq_in, seq_out, 0)),
                    (Place::Host(h), false) => {
                        (h, (cfg.host_recv_ns, cfg.host_send_ns, cfg.host_deliver_ns))
                    }
                };
                Core {
                    clock: Clock::new(clock_params, clock_seed, node),
                    free: 0,
                    pending: VecDeque::new(),
                    pending_sends: 0,
                    pending_packets: 0,
                    wake_armed: false,
                    timer_generation: 0,
                    armed: None,
                    busy_ns: 0,
                    recv_ns: costs.0,
                    send_ns: costs.1,
                    deliver_ns: costs.2,
                }
            })
            .collect();
        let ps_per_byte = (8_000.0 / cfg.link_gbps).round().max(1.0) as u64;
        let links = topo
            .links()
            .iter()
            .map(|l| LinkSt {
                to: l.to.0,
                ps_per_byte,
                delay_ns: cfg.link_delay_ns,
                busy_until: 0,
                burst_left: 0,
            })
            .collect();
        let toward_seq = match base.protocol {
            Protocol::SequencerSwitch => paths_toward(&topo, switch_node),
            _ => Vec::new(),
        };
        let rules = LossRules {
            lost_is_exact: base.protocol != Protocol::Token,
        };
        let checker = cfg.check.then(|| BaseChecker::new(procs, rules));
        let mut w = BaseWorld {
            loss_class: cfg.loss_kind.and_then(class_of_kind),
            topo,
            procs,
            roles,
            cores,
            place,
            route_host,
            sequencer,
            toward_seq,
            links,
            packets: crate::slab::Slab::default(),
            queue,
            rng,
            workload_rng,
            route_seed,
            next_seq: vec![0; procs as usize],
            heartbeat_interval_ns,
            core_queue_send_max: (HOST_QUEUE_SEND_MAX / pph).max(1),
            now: 0,
            live_packets: 0,
            checker,
            latency: NsHistogram::default(),
            trace: TraceHash::default(),
            stats: BaseEngineStats::default(),
            cfg,
            base,
        };
        for r in 0..w.roles.len() as u32 {
            w.rearm(r);
        }
        for p in 0..procs {
            let gap = w.next_gap();
            w.queue.push(gap, Ev::Send { proc: p });
        }
        Ok(w)
    }

    /// The roles of one group: endpoints `0..procs`, then the sequencer if there is one.
    fn group(base: &BaselineConfig, procs: u32, heartbeat_interval_ns: u64) -> Vec<BaseNode> {
        let ids = (0..procs).map(ProcId);
        match base.protocol {
            Protocol::Sequencer | Protocol::SequencerSwitch => {
                let mut nodes: Vec<BaseNode> = ids
                    .map(|id| {
                        BaseNode::SeqEndpoint(SeqEndpoint::new(SeqEndpointConfig::new(id, procs)))
                    })
                    .collect();
                let mut sc = SequencerConfig::new(procs);
                sc.switch_packet_ns = base.seq_switch_packet_ns;
                if base.protocol == Protocol::SequencerSwitch {
                    sc.placement = SequencerPlacement::Switch;
                }
                nodes.push(BaseNode::Sequencer(Sequencer::new(sc)));
                nodes
            }
            Protocol::Token => ids
                .map(|id| {
                    let mut tc = TokenConfig::new(id, procs);
                    tc.batch_max = base.token_batch_max;
                    tc.send_queue_len_max = base.token_queue_len_max;
                    BaseNode::Token(TokenEndpoint::new(tc))
                })
                .collect(),
            Protocol::Lamport => ids
                .map(|id| {
                    let mut lc = LamportConfig::new(id, procs);
                    lc.heartbeat_interval_ns = heartbeat_interval_ns;
                    BaseNode::Lamport(LamportEndpoint::new(lc))
                })
                .collect(),
            Protocol::Isis => ids
                .map(|id| BaseNode::Isis(IsisEndpoint::new(IsisConfig::new(id, procs))))
                .collect(),
        }
    }

    /// The topology.
    pub fn topology(&self) -> &Topology {
        &self.topo
    }

    /// Number of processes (the sequencer excluded).
    pub fn procs(&self) -> u32 {
        self.procs
    }

    /// Current true time.
    pub fn now(&self) -> SimTime {
        self.now
    }

    /// The roles: processes `0..procs`, then the sequencer if any.
    pub fn roles(&self) -> &[BaseNode] {
        &self.roles
    }

    /// The Lamport heartbeat interval in force (computed even for other protocols).
    pub fn heartbeat_interval_ns(&self) -> u64 {
        self.heartbeat_interval_ns
    }

    /// The sequencer's busy time so far (its CPU or pipeline), if there is a sequencer.
    pub fn sequencer_busy_ns(&self) -> Option<u64> {
        self.sequencer.map(|s| self.cores[s as usize].busy_ns)
    }

    /// The node the sequencer runs on, by name, if there is a sequencer.
    pub fn sequencer_node(&self) -> Option<String> {
        self.sequencer.map(|s| match self.place[s as usize] {
            Place::Host(h) => format!("host-{h} (own core)"),
            Place::Switch(n) => self.topo.node(NodeId(n)).name.clone(),
        })
    }

    fn next_gap(&mut self) -> SimTime {
        crate::net::poisson_gap(&mut self.workload_rng, self.cfg.rate_per_proc)
    }

    /// Runs until true time `end`, calling `progress` with the current time now and then.
    pub fn run_until(&mut self, end: SimTime, progress: &mut dyn FnMut(SimTime)) {
        while let Some((t, ev)) = self.queue.pop_until(end) {
            self.now = t;
            self.stats.events += 1;
            if self.stats.events.is_multiple_of(1 << 20) {
                progress(t);
            }
            match ev {
                Ev::Arrive { link, pkt } => self.on_arrive(t, link, pkt),
                Ev::Local { role, pkt } => self.core_input(t, role, CoreInput::Packet(pkt)),
                Ev::Timer { role, generation } => self.on_timer(t, role, generation),
                Ev::CpuWake { role } => self.on_cpu_wake(t, role),
                Ev::Send { proc } => self.on_send_event(t, proc),
            }
        }
        self.now = self.now.max(end);
    }

    /// True when only the token is left moving: no other packet on a link or queued at a core,
    /// no send waiting, and every role idle (nothing buffered, queued or being repaired, no
    /// heartbeat or sync due). A run drains until then, so undelivered messages are losses.
    pub fn quiescent(&self) -> bool {
        self.live_packets == 0
            && self.cores.iter().all(|c| c.pending_sends == 0)
            && self.roles.iter().all(BaseNode::is_idle)
            && self.caught_up()
    }

    /// True when every receiver has taken in (delivered, skipped or given up on) everything
    /// its sources sent it. A receiver that lost a stream's tail does not know it until a
    /// heartbeat, a sync or the token tells it, and the token in particular may be still on
    /// its way: idle roles alone do not make a finished run.
    fn caught_up(&self) -> bool {
        let n = self.procs as usize;
        match self.base.protocol {
            Protocol::Sequencer | Protocol::SequencerSwitch => {
                let ordered = self.ordered_per_receiver().expect("a sequencer");
                self.roles[..n].iter().zip(ordered).all(
                    |(r, o)| matches!(r, BaseNode::SeqEndpoint(e) if e.received_through() >= o),
                )
            }
            Protocol::Token => {
                let stamped: u64 = self.roles.iter().map(|r| r.stats().stamped).sum();
                self.roles
                    .iter()
                    .all(|r| matches!(r, BaseNode::Token(e) if e.received_through() >= stamped))
            }
            Protocol::Lamport => {
                let lamport = |i: usize| match &self.roles[i] {
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
            Protocol::Isis => {
                let isis = |i: usize| match &self.roles[i] {
                    BaseNode::Isis(e) => e,
                    _ => unreachable!("an ISIS group has only ISIS endpoints"),
                };
                (0..n).all(|r| {
                    (0..n).all(|s| {
                        isis(r).received_from(ProcId(s as u32)) >= isis(s).sent_to(ProcId(r as u32))
                    })
                })
            }
        }
    }

    /// Per receiver, how many messages the sequencer ordered for it (sequencer protocols only).
    pub fn ordered_per_receiver(&self) -> Option<Vec<u64>> {
        let s = self.sequencer?;
        let BaseNode::Sequencer(seq) = &self.roles[s as usize] else {
            unreachable!("the role after the endpoints is the sequencer");
        };
        Some(
            (0..self.procs)
                .map(|d| seq.ordered_for(ProcId(d)))
                .collect(),
        )
    }

    fn alloc_packet(&mut self, p: BasePacket) -> u32 {
        if p.class() != PacketClass::Token {
            self.live_packets += 1;
        }
        self.packets.insert(p)
    }

    fn take_packet(&mut self, i: u32) -> BasePacket {
        let p = self.packets.take(i);
        if p.class() != PacketClass::Token {
            self.live_packets -= 1;
        }
        p
    }

    fn packet(&self, i: u32) -> &BasePacket {
        self.packets.get(i)
    }

    // --- The network -------------------------------------------------------------------------

    /// Sends a packet a role produced at time `at`; returns when it has left on the wire.
    fn send_packet(&mut self, from: u32, packet: BasePacket, at: SimTime) -> SimTime {
        let dst = packet.dst.0;
        let Some(&dst_place) = self.place.get(dst as usize) else {
            // Roles address only group members; a stray id is the role's bug, counted as lost.
            self.stats.packets_lost += 1;
            return at;
        };
        let pkt = self.alloc_packet(packet);
        match self.place[from as usize] {
            Place::Host(h) if dst_place == Place::Host(h) => {
                self.stats.local_packets += 1;
                self.queue.push(at, Ev::Local { role: dst, pkt });
                at
            }
            Place::Host(h) => {
                let up = self.topo.uplink(h).0;
                self.transmit(up, pkt, at)
            }
            Place::Switch(n) => {
                let link = self.next_link(n, pkt);
                self.transmit(link, pkt, at)
            }
        }
    }

    /// The output link at switch node `n` for packet `pkt`.
    fn next_link(&self, n: u32, pkt: u32) -> u32 {
        let p = self.packet(pkt);
        if Some(p.dst.0) == self.sequencer && !self.toward_seq.is_empty() {
            let l = self.toward_seq[n as usize];
            assert_ne!(
                l, NO_LINK,
                "no up path from node {n} to the sequencer switch"
            );
            return l;
        }
        let sh = self.route_host[p.src.index()];
        let dh = self.route_host[p.dst.index()];
        let port = self
            .topo
            .route(NodeId(n), dh, flow_hash(self.route_seed, sh, dh))
            .expect("every host is reachable from every switch on its way");
        self.topo.node(NodeId(n)).outputs[port.index()].0
    }

    /// Puts packet `pkt` on `link` at time `t`; returns when its serialization ends.
    fn transmit(&mut self, link: u32, pkt: u32, t: SimTime) -> SimTime {
        let packet = self.packet(pkt);
        let bytes = packet.wire_len() as u64;
        let class = packet.class();
        let l = &mut self.links[link as usize];
        let ser = (bytes * l.ps_per_byte).div_ceil(1000);
        let start = t.max(l.busy_until);
        l.busy_until = start + ser;
        let done = l.busy_until;
        let mut arrive = done + l.delay_ns;
        self.stats.link_bytes += bytes;
        self.stats.packets += 1;
        if class == PacketClass::Heartbeat {
            self.stats.heartbeat_bytes += bytes;
        }
        // Faults are drawn only when configured, so fault-free runs keep their exact traces.
        if self.cfg.loss_rate > 0.0 && self.lose(link, class) {
            self.stats.packets_lost += 1;
            self.take_packet(pkt);
            return done;
        }
        if self.cfg.reorder_prob > 0.0 && self.rng.chance(self.cfg.reorder_prob) {
            arrive += 1 + self.rng.below(self.cfg.reorder_delay_ns.max(1));
            self.stats.reordered_packets += 1;
        }
        if self.cfg.dup_rate > 0.0 && self.rng.chance(self.cfg.dup_rate) {
            let copy = self.packet(pkt).clone();
            let dup = self.alloc_packet(copy);
            self.stats.packets_duplicated += 1;
            self.queue.push(arrive + ser, Ev::Arrive { link, pkt: dup });
        }
        self.queue.push(arrive, Ev::Arrive { link, pkt });
        done
    }

    /// Whether the loss model drops a packet of `class` on `link` (as in [`crate::world`]).
    fn lose(&mut self, link: u32, class: PacketClass) -> bool {
        if self.cfg.loss_kind.is_some()
            && !self.loss_class.is_some_and(|t| class_targeted(t, class))
        {
            return false;
        }
        let burst_left = &mut self.links[link as usize].burst_left;
        crate::net::lose_bursty(burst_left, &mut self.rng, &self.cfg)
    }

    fn on_arrive(&mut self, t: SimTime, link: u32, pkt: u32) {
        let to = self.links[link as usize].to;
        let dst = self.packet(pkt).dst.0;
        if to < self.topo.hosts() || self.place[dst as usize] == Place::Switch(to) {
            debug_assert!(to >= self.topo.hosts() || self.place[dst as usize] == Place::Host(to));
            self.core_input(t, dst, CoreInput::Packet(pkt));
            return;
        }
        // A plain forwarder: zero processing time (the pipeline is in the link latency).
        let out = self.next_link(to, pkt);
        self.transmit(out, pkt, t);
    }

    // --- Cores -------------------------------------------------------------------------------

    fn on_timer(&mut self, t: SimTime, role: u32, generation: u32) {
        let c = &mut self.cores[role as usize];
        if c.timer_generation != generation {
            return;
        }
        c.armed = None;
        self.core_input(t, role, CoreInput::Timeout);
    }

    fn on_send_event(&mut self, t: SimTime, proc: u32) {
        if t >= self.cfg.duration_ns {
            return;
        }
        let seq_full = self
            .sequencer
            .is_some_and(|s| self.cores[s as usize].pending_packets >= self.base.seq_queue_len_max);
        if self.cores[proc as usize].pending_sends >= self.core_queue_send_max || seq_full {
            self.stats.sends_rejected += 1;
        } else {
            self.core_input(t, proc, CoreInput::Send { issued: t });
        }
        let gap = self.next_gap();
        self.queue.push(t + gap, Ev::Send { proc });
    }

    fn core_input(&mut self, t: SimTime, role: u32, input: CoreInput) {
        let c = &mut self.cores[role as usize];
        if c.pending.is_empty() && c.free <= t {
            self.core_process(t, role, input);
            return;
        }
        match input {
            CoreInput::Send { .. } => c.pending_sends += 1,
            CoreInput::Packet(_) => c.pending_packets += 1,
            CoreInput::Timeout => {}
        }
        c.pending.push_back(input);
        if !c.wake_armed {
            c.wake_armed = true;
            let at = c.free.max(t);
            self.queue.push(at, Ev::CpuWake { role });
        }
    }

    fn on_cpu_wake(&mut self, t: SimTime, role: u32) {
        let c = &mut self.cores[role as usize];
        c.wake_armed = false;
        let Some(input) = c.pending.pop_front() else {
            return;
        };
        match input {
            CoreInput::Send { .. } => c.pending_sends -= 1,
            CoreInput::Packet(_) => c.pending_packets -= 1,
            CoreInput::Timeout => {}
        }
        self.core_process(t, role, input);
        let c = &mut self.cores[role as usize];
        if !c.pending.is_empty() {
            c.wake_armed = true;
            let at = c.free.max(t);
            self.queue.push(at, Ev::CpuWake { role });
        }
    }

    /// One input at a role's core: the mutation, then its outputs, each charged in turn.
    fn core_process(&mut self, t: SimTime, role: u32, input: CoreInput) {
        let r = role as usize;
        let local = self.cores[r].clock.local(t);
        let mut cursor = t;
        match input {
            CoreInput::Packet(pkt) => {
                cursor += self.cores[r].recv_ns;
                let packet = self.take_packet(pkt);
                self.roles[r].handle(local, Input::Packet { port: PORT, packet });
            }
            CoreInput::Timeout => self.roles[r].handle(local, Input::Timeout),
            CoreInput::Send { issued } => self.app_send(t, role, issued, local),
        }
        let mut on_wire = cursor;
        while let Some(o) = self.roles[r].poll_output() {
            match o {
                Output::Send { packet, .. } => {
                    cursor += self.cores[r].send_ns;
                    on_wire = on_wire.max(self.send_packet(role, packet, cursor));
                }
                Output::Event(e) => self.on_event(e, &mut cursor, self.cores[r].deliver_ns),
            }
        }
        let c = &mut self.cores[r];
        let work = cursor - t;
        c.busy_ns += work;
        // The sequencer's input stage overlaps its output, but it takes its next input only
        // when that input's copies would find the wire free (module docs): when the output is
        // slower than the input, the output paces it.
        c.free = if Some(role) == self.sequencer {
            cursor.max(on_wire.saturating_sub(work))
        } else {
            cursor
        };
        self.rearm(role);
    }

    /// The application of process `p` sends its next message.
    fn app_send(&mut self, t: SimTime, p: u32, issued: SimTime, local: Instant) {
        let seq = self.next_seq[p as usize];
        let mut payload = BytesMut::with_capacity(self.cfg.msg_size);
        payload.put_u64(seq);
        payload.put_u64(issued);
        payload.resize(self.cfg.msg_size, 0);
        let payload: Bytes = payload.freeze();
        let n = self.procs;
        let (dests, dsts) = match self.cfg.workload {
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
        match self.roles[p as usize].send(local, payload, dests) {
            Ok(()) => {
                self.next_seq[p as usize] += 1;
                self.stats.scatterings += 1;
                self.stats.messages_sent += count;
                self.trace.add(t);
                self.trace.add(u64::from(p) << 32 | seq);
                if let Some(c) = self.checker.as_mut() {
                    c.on_send(p, seq, dsts);
                }
            }
            Err(BaseSendError::Full) => self.stats.sends_refused_full += 1,
            Err(e) => panic!("the simulator's workload sent an invalid message: {e}"),
        }
    }

    fn on_event(&mut self, e: BaseEvent, cursor: &mut SimTime, deliver_ns: u64) {
        match e {
            BaseEvent::Deliver {
                dst,
                src,
                seq_or_ts,
                payload,
            } => {
                *cursor += deliver_ns;
                self.stats.delivered += 1;
                if *cursor <= self.cfg.duration_ns {
                    self.stats.delivered_in_period += 1;
                }
                let word = |i: usize| {
                    payload.get(i..i + 8).map_or(u64::MAX, |b| {
                        u64::from_be_bytes(b.try_into().expect("8 bytes"))
                    })
                };
                let (seq, issued) = (word(0), word(8));
                self.latency.record(cursor.saturating_sub(issued));
                self.trace.add(*cursor);
                self.trace.add(u64::from(dst.0) << 32 | u64::from(src.0));
                self.trace.add(seq);
                self.trace.add(seq_or_ts);
                if let Some(c) = self.checker.as_mut() {
                    c.on_deliver(*cursor, dst.0, src.0, seq, seq_or_ts);
                }
            }
            BaseEvent::Lost { dst, count, .. } => {
                self.stats.lost_reported += count;
                self.trace.add(0x1057 ^ u64::from(dst.0) << 32 ^ count);
                if let Some(c) = self.checker.as_mut() {
                    c.on_lost(dst.0, count);
                }
            }
            BaseEvent::SendFailed {
                src,
                first_send,
                count,
            } => {
                self.stats.send_failed += count;
                self.trace.add(0xFA11 ^ u64::from(src.0) << 32 ^ first_send);
                if let Some(c) = self.checker.as_mut() {
                    c.on_send_failed(*cursor, src.0, first_send, count);
                }
            }
        }
    }

    /// Re-arms a role's timer from its `poll_timeout`, if it changed.
    fn rearm(&mut self, role: u32) {
        let now = self.now;
        let deadline = self.roles[role as usize].poll_timeout();
        let c = &mut self.cores[role as usize];
        if deadline == c.armed {
            return;
        }
        c.armed = deadline;
        c.timer_generation = c.timer_generation.wrapping_add(1);
        if let Some(d) = deadline {
            let at = c.clock.true_time_of(d, now);
            let generation = c.timer_generation;
            self.queue.push(at, Ev::Timer { role, generation });
        }
    }
}
