//! The one simulation engine every protocol runs on: 1Pipe's hosts, switches and controller
//! ([`crate::onepipe`]) and every baseline ([`crate::baseline::protocol`]), and each protocol still to
//! come, through the [`Protocol`] trait.
//!
//! **What the engine owns.** One event queue keyed (time, insertion order) drives everything.
//! * *Links* ([`Link`]): FIFO with serialization (`bytes / bandwidth`) and a fixed latency;
//!   `--cut` windows; loss in bursts, reordering (a packet held back by a random extra delay so
//!   later packets overtake it) and duplication, drawn only when configured, so fault-free runs
//!   keep their exact traces. Switches forward in zero time (their pipeline latency is part of
//!   the link latency).
//! * *Roles* ([`RoleSt`]): every sans-IO role has a [`Clock`] (it is handed its *local* time)
//!   and a timer, armed from its `poll_timeout` after every input (the driving contract of
//!   `onepipe_proto::node`: mutate, drain, re-arm).
//! * *Cores* ([`Core`]): the CPUs, apart from the roles — each role names the core it runs on
//!   ([`RoleSt::cpu`]), and several roles may share one (a host's processes on the direct
//!   engine and the baselines: one CPU per host, as 1Pipe's host role has). A core is serial:
//!   inputs that reach it while it is busy wait in one FIFO whoever they are for (a timer may
//!   jump the queue: [`Core::timer_first`]), and the protocol charges each input and output at
//!   the core's [`Costs`]. That is what makes throughput saturate (§7.2: "limited by CPU
//!   processing"). A role without a core (a 1Pipe switch) runs each input at once.
//! * *The workload's clock*: every process sends at Poisson times (`--rate`); a send that finds
//!   its core's send queue full is refused (`sends_rejected`) — a limit per core, so per host
//!   where a host's processes share one.
//! * *Packets in flight* live in one slab from the moment they are sent until they are consumed;
//!   events carry slot indices (an event is 12 bytes: the queue moves each a few times).
//!
//! **What a protocol brings** ([`Protocol`]): its roles and where they run (which role a
//! process sends through, which links lead to which role), what happens when a packet reaches the
//! end of a link (a host takes it in; a switch runs its role or forwards it), what a core does
//! with one input (the role's `handle`, then its outputs, each charged), its own events (1Pipe's
//! management network, heals, restarts), and its checkers. The protocol's state is
//! [`Engine::proto`]; its handlers are functions of the whole engine.

use crate::clock::Clock;
use crate::config::SimConfig;
use crate::queue::{EventQueue, SimTime};
use crate::slab::Slab;
use onepipe_proto::rng::Rng;
use onepipe_proto::topology::Topology;
use onepipe_proto::Instant;
use std::collections::VecDeque;
use std::sync::Arc;

/// An event. `X` is the protocol's own ([`Protocol::Ev`]).
#[derive(Clone, Copy, Debug)]
pub enum Ev<X> {
    /// A packet reaches the far end of a link.
    Arrive {
        /// The link.
        link: u32,
        /// The packet's slot in the packet slab.
        slot: u32,
    },
    /// A packet between two roles of one host reaches the receiver (no network).
    Local {
        /// The receiving role.
        role: u32,
        /// The packet's slot.
        slot: u32,
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
        /// The core.
        cpu: u32,
    },
    /// A process issues its next send.
    Send {
        /// The process (its workload slot).
        proc: u32,
    },
    /// One of the protocol's own events.
    Proto(X),
}

/// An input waiting for (or handed to) a role. `I` is the protocol's own ([`Protocol::Input`]).
#[derive(Debug)]
pub enum CoreInput<I> {
    /// A packet (its slot in the packet slab, still counted in the network).
    Packet(u32),
    /// The role's timer fired.
    Timeout,
    /// The workload of process `proc` sends, issued at true time `issued`.
    Send {
        /// The process (its workload slot).
        proc: u32,
        /// When the workload issued it.
        issued: SimTime,
    },
    /// One of the protocol's own inputs (1Pipe: a control message, a heal).
    Proto(I),
}

/// What a core's work costs, ns.
#[derive(Clone, Copy, Debug, Default)]
pub struct Costs {
    /// Per packet taken in.
    pub recv_ns: u64,
    /// Per packet sent.
    pub send_ns: u64,
    /// Per message delivered.
    pub deliver_ns: u64,
}

/// Most sends waiting for a host's CPU before the workload's next send is refused — the
/// application's send queue, one per host in every protocol (a 1Pipe host's role, or the core
/// a host's processes share on the baselines' and the direct engine). Open-loop sends beyond
/// capacity would otherwise pile up without bound and, served first-come first-served, starve
/// the receive path: with the bound, offered load beyond capacity is refused
/// (`sends_rejected`) and delivered throughput levels off.
pub const HOST_QUEUE_SEND_MAX: u32 = 64;

/// Most queued inputs whose room an idle core keeps (see [`Engine::on_cpu_wake`]).
const PENDING_RETAINED: usize = 64;

/// A serial CPU (or a switch-placed role's pipeline) and the inputs waiting for it, for any of
/// the roles it serves.
#[derive(Debug)]
pub struct Core<I> {
    /// True time at which it finishes its current input; the protocol sets it as it charges.
    pub free: SimTime,
    /// Inputs waiting, oldest first, each with the role it is for.
    pub pending: VecDeque<(u32, CoreInput<I>)>,
    /// Sends among `pending`.
    pub pending_sends: u32,
    /// Packets among `pending`.
    pub pending_packets: u32,
    wake_armed: bool,
    /// Time spent processing, when the protocol keeps it.
    pub busy_ns: u64,
    /// What its work costs.
    pub costs: Costs,
    /// Most sends waiting before the workload's next send is refused.
    pub send_queue_max: u32,
    /// Its timer runs as soon as the current input is done, ahead of the queued ones (a polling
    /// loop checks its timers every turn).
    pub timer_first: bool,
    /// The roles it serves, consecutive ([`Engine::assemble`] fills it from [`RoleSt::cpu`]).
    roles: std::ops::Range<u32>,
}

impl<I> Core<I> {
    /// An idle core.
    pub fn new(costs: Costs, send_queue_max: u32, timer_first: bool) -> Core<I> {
        Core {
            free: 0,
            pending: VecDeque::new(),
            pending_sends: 0,
            pending_packets: 0,
            wake_armed: false,
            busy_ns: 0,
            costs,
            send_queue_max,
            timer_first,
            roles: 0..0,
        }
    }

    /// The roles it serves.
    pub fn roles(&self) -> std::ops::Range<u32> {
        self.roles.clone()
    }
}

/// A role as the engine sees it: its clock, its timer, and the core it runs on if any.
#[derive(Debug)]
pub struct RoleSt {
    /// Its clock: the local time it is handed.
    pub clock: Clock,
    generation: u32,
    armed: Option<Instant>,
    /// Its core, an index into the engine's cores; `None` for a role that runs every input at
    /// once (a 1Pipe switch).
    pub cpu: Option<u32>,
}

impl RoleSt {
    /// A role with `clock`, on core `cpu`.
    pub fn new(clock: Clock, cpu: Option<u32>) -> RoleSt {
        RoleSt {
            clock,
            generation: 0,
            armed: None,
            cpu,
        }
    }
}

/// One direction of a physical link.
#[derive(Debug)]
pub struct Link {
    /// The node it leads to, and that node's input port.
    pub to: u32,
    /// See `to`.
    pub to_port: u32,
    /// It leaves a switch (not a host).
    pub from_switch: bool,
    /// Serialization, ps per byte.
    pub ps_per_byte: u64,
    /// Queueing delay (ns) beyond which the egress queue holds more than the ECN threshold.
    pub ecn_queue_ns: u64,
    /// Propagation and switching latency.
    pub delay_ns: u64,
    /// When the wire is free again.
    pub busy_until: SimTime,
    /// Packets still to drop in the current loss burst.
    pub burst_left: u32,
    /// True time from which the link carries nothing (`--cut`), and from which it carries
    /// again (a heal; `SimTime::MAX` for never).
    pub cut_at: SimTime,
    /// See `cut_at`.
    pub heal_at: SimTime,
}

/// Every role's clock model (`--clock-skew`, `--clock-drift`, sync interval, epoch).
pub fn clock_params(cfg: &SimConfig) -> crate::clock::ClockParams {
    crate::clock::ClockParams {
        skew_ns: cfg.net.clock_skew_ns,
        drift_ppm: cfg.net.clock_drift_ppm,
        sync_interval_ns: cfg.net.clock_sync_interval_ns,
        epoch_ns: cfg.net.clock_epoch_ns,
    }
}

/// Picoseconds per byte on every link (but those of `cfg.host_links`).
pub fn ps_per_byte(cfg: &SimConfig) -> u64 {
    ps_per_byte_at(cfg.net.link_gbps)
}

fn ps_per_byte_at(gbps: f64) -> u64 {
    (8_000.0 / gbps).round().max(1.0) as u64
}

/// The links of `topo` at `cfg`'s bandwidth and latency (a host's own where `cfg.host_links`
/// names it), none cut.
pub fn build_links(cfg: &SimConfig, topo: &Topology) -> Vec<Link> {
    let hosts = topo.hosts();
    // The link's host end and direction: a host's uplink leaves it, its downlink reaches it.
    let spec = |from: u32, to: u32| {
        let named = |h: u32, up: bool| {
            (cfg.net.host_links.iter().rev())
                .find(|s| s.hosts.contains(&h))
                .map(|s| if up { s.up } else { s.down })
        };
        let own = match (from < hosts, to < hosts) {
            (true, _) => named(from, true),
            (false, true) => named(to, false),
            (false, false) => None,
        };
        own.map_or((cfg.net.link_gbps, cfg.net.link_delay_ns), |l| {
            (l.gbps, l.delay_ns)
        })
    };
    topo.links()
        .iter()
        .map(|l| {
            let (gbps, delay_ns) = spec(l.from.0, l.to.0);
            let ps_per_byte = ps_per_byte_at(gbps);
            Link {
                to: l.to.0,
                to_port: l.to_port.0,
                from_switch: l.from.0 >= hosts,
                ps_per_byte,
                ecn_queue_ns: cfg.net.ecn_threshold_bytes.saturating_mul(ps_per_byte) / 1000,
                delay_ns,
                busy_until: 0,
                burst_left: 0,
                cut_at: SimTime::MAX,
                heal_at: SimTime::MAX,
            }
        })
        .collect()
}

/// How busy the cores were over a period: shares of it, 0 … 1 (a little above 1 where an
/// input that started in the period ran past its end).
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct CpuBusy {
    /// Mean over the cores.
    pub mean: f64,
    /// The busiest core's.
    pub max: f64,
}

/// Counters of the network and the workload, the same for every protocol.
#[derive(Clone, Debug, Default)]
pub struct NetStats {
    /// Events processed.
    pub events: u64,
    /// Packets put on links.
    pub packets: u64,
    /// Bytes sent on all links.
    pub link_bytes: u64,
    /// Of which background traffic ([`Protocol::background`]: 1Pipe beacons, Lamport
    /// heartbeats and sequencer syncs).
    pub background_bytes: u64,
    /// Packets the loss model dropped.
    pub packets_lost: u64,
    /// Packets held back by the non-FIFO option.
    pub reordered_packets: u64,
    /// Packets the duplication model copied.
    pub packets_duplicated: u64,
    /// Packets dropped on cut links (`--cut`).
    pub packets_cut: u64,
    /// Sends refused: the core's send queue was full, or the protocol pushed back.
    pub sends_rejected: u64,
    /// Packets dropped at a full receive queue (`FaultConfig::recv_queue_len_max`).
    pub recv_overflow: u64,
    /// Receiver stalls (`FaultConfig::recv_stall_every_ns`).
    pub recv_stalls: u64,
}

/// Receiver stalls: each core's next stall, drawn from a stream of its own so that every other
/// draw of the run is what it is without stalls.
#[derive(Debug)]
struct Stalls {
    rng: Rng,
    every_ns: u64,
    len_ns: u64,
    /// Per core, the true time its next stall starts.
    next: Vec<SimTime>,
}

/// The random streams of a run, drawn in this order from the seed: the clocks' seed, the
/// router's seed, then the workload's fork.
#[derive(Debug)]
pub struct Seeds {
    /// The engine's stream (link faults), after the two draws below.
    pub rng: Rng,
    /// Seeds every role's clock.
    pub clock: u64,
    /// Seeds ECMP's flow hash.
    pub route: u64,
}

impl Seeds {
    /// The streams of `seed`.
    pub fn new(seed: u64) -> Seeds {
        let mut rng = Rng::new(seed);
        let clock = rng.next_u64();
        let route = rng.next_u64();
        Seeds { rng, clock, route }
    }
}

/// A protocol the engine runs. Its handlers are functions of the whole engine: they reach its
/// own state through [`Engine::proto`] and the network, cores and queue through the engine.
pub trait Protocol: Sized {
    /// What travels on the links.
    type Packet: Clone;
    /// Its own events (small and `Copy`: they ride the queue).
    type Ev: Copy + std::fmt::Debug;
    /// Its own inputs to a core.
    type Input: std::fmt::Debug;

    /// Bytes of `p` on the wire.
    fn wire_len(p: &Self::Packet) -> usize;
    /// Whether `p` is background traffic, counted apart in [`NetStats::background_bytes`].
    fn background(p: &Self::Packet) -> bool;
    /// Whether `p` counts toward the engine's live packets, what a run drains (a 1Pipe beacon or a
    /// circulating token does not).
    fn counted(p: &Self::Packet) -> bool;
    /// Whether the loss model may drop `p` (`--loss-kind`).
    fn lossy(&self, cfg: &SimConfig, p: &Self::Packet) -> bool;
    /// Processes of the run.
    fn procs(&self) -> u32;
    /// Processes the synthetic workload drives (`Ev::Send` for `0..senders`): all of them, or
    /// none when an application sends instead.
    fn senders(&self) -> u32 {
        self.procs()
    }
    /// The role process `proc`'s sends go through (it has a core).
    fn sender(&self, proc: u32) -> u32;
    /// Role `role`'s next deadline, its local time.
    fn poll_timeout(&self, role: u32) -> Option<Instant>;

    /// The packet in `slot` reached the far end of `link`.
    fn arrive<Q: EventQueue<Ev<Self::Ev>>>(
        e: &mut Engine<Self, Q>,
        t: SimTime,
        link: u32,
        slot: u32,
    );
    /// Role `role` runs `input`, its core free: the mutation, then its outputs, each charged
    /// (setting the core's `free`), then the engine's `rearm`.
    fn process<Q: EventQueue<Ev<Self::Ev>>>(
        e: &mut Engine<Self, Q>,
        t: SimTime,
        role: u32,
        input: CoreInput<Self::Input>,
    );
    /// One of its own events.
    fn event<Q: EventQueue<Ev<Self::Ev>>>(e: &mut Engine<Self, Q>, t: SimTime, ev: Self::Ev);

    /// Whether role `role` is down (crashed) at `t`: every input to it is discarded.
    fn down(&self, _role: u32, _t: SimTime) -> bool {
        false
    }
    /// An input reached role `role` while it was down (before its queue is discarded).
    fn on_down<Q: EventQueue<Ev<Self::Ev>>>(_e: &mut Engine<Self, Q>, _t: SimTime, _role: u32) {}
    /// One of its own inputs is discarded (its role was down or restarted).
    fn discard<Q: EventQueue<Ev<Self::Ev>>>(_e: &mut Engine<Self, Q>, _input: Self::Input) {}
    /// Role `role`'s timer fired at `t` while its core is busy with earlier inputs (the timeout
    /// waits for them). A protocol whose roles have work beside the core (1Pipe: the NIC's
    /// keep-alive beacons, §7.1) starts it here; by default nothing.
    fn timer_while_busy<Q: EventQueue<Ev<Self::Ev>>>(
        _e: &mut Engine<Self, Q>,
        _t: SimTime,
        _role: u32,
    ) {
    }
    /// A packet reached role `role` at `t` and waits for its busy core (its NIC has it). By
    /// default nothing; 1Pipe tells the host its switch spoke (§4.2).
    fn packet_while_busy<Q: EventQueue<Ev<Self::Ev>>>(
        _e: &mut Engine<Self, Q>,
        _t: SimTime,
        _role: u32,
    ) {
    }
    /// Whether every send is refused now (backpressure beyond the cores' queues).
    fn sends_blocked<Q: EventQueue<Ev<Self::Ev>>>(_e: &Engine<Self, Q>) -> bool {
        false
    }
    /// Called before each event is handled (1Pipe: its prefetch).
    fn before_event<Q: EventQueue<Ev<Self::Ev>>>(_e: &mut Engine<Self, Q>) {}
    /// Packet `p` is about to go on `link`, which leaves a switch (before the cut check: 1Pipe's
    /// checker follows the barriers each link carries).
    fn leaving_switch(&mut self, _t: SimTime, _link: u32, _p: &Self::Packet) {}
    /// The packet in `slot` queues behind more than the ECN threshold at a switch egress.
    fn congested<Q: EventQueue<Ev<Self::Ev>>>(_e: &mut Engine<Self, Q>, _slot: u32) {}
}

/// A simulated data center running protocol `P`, its events in queue `Q`.
pub struct Engine<P: Protocol, Q> {
    /// The configuration.
    pub cfg: SimConfig,
    /// The network.
    pub topo: Arc<Topology>,
    pub(crate) queue: Q,
    pub(crate) now: SimTime,
    /// Link faults.
    pub(crate) rng: Rng,
    /// The workload's draws.
    pub(crate) workload_rng: Rng,
    pub(crate) links: Vec<Link>,
    /// The node each link leads to (`links[l].to`), small enough to stay in cache for a
    /// prefetch.
    pub(crate) link_to: Vec<u32>,
    pub(crate) packets: Slab<P::Packet>,
    /// Packets alive that count ([`Protocol::counted`]): on links, or waiting at cores.
    pub(crate) live: u64,
    pub(crate) roles: Vec<RoleSt>,
    /// The cores, shared by the roles that name them.
    pub(crate) cpus: Vec<Core<P::Input>>,
    /// Links lose, reorder or duplicate packets (`--loss`, `--reorder-prob`, `--dup`).
    link_faults: bool,
    /// Receiver stalls, when configured.
    stalls: Option<Stalls>,
    /// Counters of the network and the workload.
    pub net: NetStats,
    /// The protocol's state.
    pub proto: P,
}

impl<P: Protocol, Q: EventQueue<Ev<P::Ev>>> Engine<P, Q> {
    /// Assembles an engine from what the protocol built (its state, its roles in index order,
    /// the cores they name, the links), forks the workload's stream from `seeds.rng`, and
    /// schedules the first events: every role's timer, then every process's first send.
    ///
    /// Every core serves at least one role, and the roles of one core are consecutive.
    #[allow(clippy::too_many_arguments)]
    pub fn assemble(
        cfg: SimConfig,
        topo: Arc<Topology>,
        queue: Q,
        mut seeds: Seeds,
        proto: P,
        roles: Vec<RoleSt>,
        mut cpus: Vec<Core<P::Input>>,
        links: Vec<Link>,
    ) -> Engine<P, Q> {
        for (r, role) in roles.iter().enumerate() {
            let Some(cpu) = role.cpu else { continue };
            let served = &mut cpus[cpu as usize].roles;
            if served.start == served.end {
                *served = r as u32..r as u32 + 1;
            } else {
                assert_eq!(
                    served.end, r as u32,
                    "core {cpu}: its roles are consecutive"
                );
                served.end += 1;
            }
        }
        assert!(
            cpus.iter().all(|c| c.roles.start < c.roles.end),
            "every core serves a role"
        );
        let workload_rng = seeds.rng.fork(1);
        let stalls = (cfg.faults.recv_stall_every_ns > 0).then(|| {
            let mut rng = Rng::new(cfg.seed ^ 0x57A1_1ED0);
            let every_ns = cfg.faults.recv_stall_every_ns;
            let next = (0..cpus.len())
                .map(|_| poisson_gap(&mut rng, 1e9 / every_ns as f64))
                .collect();
            Stalls {
                rng,
                every_ns,
                len_ns: cfg.faults.recv_stall_ns,
                next,
            }
        });
        let mut e = Engine {
            stalls,
            link_faults: cfg.faults.loss_rate > 0.0
                || cfg.faults.reorder_prob > 0.0
                || cfg.faults.dup_rate > 0.0,
            topo,
            queue,
            now: 0,
            rng: seeds.rng,
            workload_rng,
            link_to: links.iter().map(|l| l.to).collect(),
            links,
            packets: Slab::default(),
            live: 0,
            roles,
            cpus,
            net: NetStats::default(),
            proto,
            cfg,
        };
        for r in 0..e.roles.len() as u32 {
            e.rearm(r);
        }
        for p in 0..e.proto.senders() {
            if let Some(at) = e.next_send_after(0, p) {
                e.queue.push(at, Ev::Send { proc: p });
            }
        }
        e
    }

    /// The topology.
    pub fn topology(&self) -> &Topology {
        &self.topo
    }

    /// Processes of the run.
    pub fn procs(&self) -> u32 {
        self.proto.procs()
    }

    /// Current true time.
    pub fn now(&self) -> SimTime {
        self.now
    }

    /// Runs until true time `end`, calling `progress` with the current time now and then.
    pub fn run_until(&mut self, end: SimTime, progress: &mut dyn FnMut(SimTime)) {
        while let Some((t, ev)) = self.queue.pop_until(end) {
            debug_assert!(t >= self.now, "an event at {t} ns after {} ns", self.now);
            self.now = t;
            self.net.events += 1;
            if self.net.events.is_multiple_of(1 << 20) {
                progress(t);
            }
            P::before_event(self);
            match ev {
                Ev::Arrive { link, slot } => P::arrive(self, t, link, slot),
                Ev::Local { role, slot } => self.input(t, role, CoreInput::Packet(slot)),
                Ev::Timer { role, generation } => self.on_timer(t, role, generation),
                Ev::CpuWake { cpu } => self.on_cpu_wake(t, cpu),
                Ev::Send { proc } => self.on_send_event(t, proc),
                Ev::Proto(x) => P::event(self, t, x),
            }
        }
        self.now = self.now.max(end);
    }

    /// The time to a process's next send.
    pub(crate) fn next_gap(&mut self) -> SimTime {
        poisson_gap(&mut self.workload_rng, self.cfg.workload.rate_per_proc)
    }

    /// When process `proc`, which sent (or started) at `t`, sends next: a Poisson gap at its
    /// rate, or, under [`WorkloadConfig::rate_steps`](crate::WorkloadConfig::rate_steps), at
    /// the rate of each step in turn (a gap that crosses a step is drawn again from the step,
    /// exact for a Poisson process); `None` if it never sends again in the sending period.
    pub(crate) fn next_send_after(&mut self, t: SimTime, proc: u32) -> Option<SimTime> {
        if self.cfg.workload.periodic {
            debug_assert!(self.cfg.workload.rate_steps.is_empty());
            let period = (1e9 / self.cfg.workload.rate_per_proc).round().max(1.0) as SimTime;
            // A send is never at 0 (every gap is at least 1 ns): `t == 0` is the start.
            let gap = match t {
                0 => 1 + self.workload_rng.below(period),
                _ => period,
            };
            return Some(t + gap);
        }
        if self.cfg.workload.rate_steps.is_empty() {
            return Some(t + self.next_gap());
        }
        let mut from = t;
        while from < self.cfg.workload.duration_ns {
            let (rate, until) = self.cfg.workload.rate_at(proc, from);
            if rate > 0.0 {
                let at = from + poisson_gap(&mut self.workload_rng, rate);
                if until.is_none_or(|u| at < u) {
                    return Some(at);
                }
            }
            from = until?;
        }
        None
    }

    // --- Packets and links -------------------------------------------------------------------

    /// The output link at switch node `n` of a packet from host `src_host` to `dst_host`: the
    /// ECMP choice of the flow (the same for every packet between the two hosts, so each pair's
    /// packets stay in order), seeded by `route_seed`.
    pub(crate) fn ecmp_link(&self, n: u32, src_host: u32, dst_host: u32, route_seed: u64) -> u32 {
        let hash = onepipe_proto::topology::flow_hash(route_seed, src_host, dst_host);
        let port = self
            .topo
            .route(onepipe_proto::NodeId(n), dst_host, hash)
            .expect("every host is reachable from every switch on its way");
        self.topo.node(onepipe_proto::NodeId(n)).outputs[port.index()].0
    }

    /// A new packet enters the network; returns its slot.
    #[inline]
    pub(crate) fn new_packet(&mut self, p: P::Packet) -> u32 {
        self.live += P::counted(&p) as u64;
        self.packets.insert(p)
    }

    /// The packet in `slot` leaves the network: handed to a role, or dropped.
    #[inline]
    pub(crate) fn take_packet(&mut self, slot: u32) -> P::Packet {
        let p = self.packets.take(slot);
        self.live -= P::counted(&p) as u64;
        p
    }

    /// The packet in `slot` leaves the network without reaching anyone.
    #[inline]
    pub(crate) fn drop_slot(&mut self, slot: u32) {
        self.take_packet(slot);
    }

    /// Sends a new packet on `link` at time `t`; returns when its serialization ends.
    #[inline]
    pub(crate) fn transmit(&mut self, link: u32, p: P::Packet, t: SimTime) -> SimTime {
        let slot = self.new_packet(p);
        self.put_on_link(link, slot, t)
    }

    /// Puts the packet in `slot` (new, or forwarded by a switch) on `link` at time `t`;
    /// returns when its serialization ends.
    #[inline]
    pub(crate) fn put_on_link(&mut self, link: u32, slot: u32, t: SimTime) -> SimTime {
        let packet = self.packets.get(slot);
        let bytes = P::wire_len(packet) as u64;
        let background = P::background(packet);
        let l = &self.links[link as usize];
        if l.from_switch {
            self.proto.leaving_switch(t, link, packet);
        }
        let l = &self.links[link as usize];
        if t >= l.cut_at && t < l.heal_at {
            self.net.packets_cut += 1;
            self.drop_slot(slot);
            return t;
        }
        let ser = (bytes * l.ps_per_byte).div_ceil(1000);
        let start = t.max(l.busy_until);
        // §6.1 DCTCP: a switch egress queue above the threshold marks data packets.
        if l.from_switch && start > t + l.ecn_queue_ns {
            P::congested(self, slot);
        }
        let l = &mut self.links[link as usize];
        l.busy_until = start + ser;
        let done = l.busy_until;
        let arrive = done + l.delay_ns;
        self.net.link_bytes += bytes;
        self.net.packets += 1;
        if background {
            self.net.background_bytes += bytes;
        }
        if self.link_faults {
            self.put_on_faulty_link(link, slot, arrive, ser);
        } else {
            self.queue.push(arrive, Ev::Arrive { link, slot });
        }
        done
    }

    /// The end of [`Engine::put_on_link`] when loss, reordering or duplication is configured:
    /// the packet in `slot`, serialized in `ser`, would arrive at `arrive`.
    #[cold]
    fn put_on_faulty_link(&mut self, link: u32, slot: u32, mut arrive: SimTime, ser: SimTime) {
        if self.cfg.faults.loss_rate > 0.0
            && self.proto.lossy(&self.cfg, self.packets.get(slot))
            && lose_bursty(
                &mut self.links[link as usize].burst_left,
                &mut self.rng,
                &self.cfg,
            )
        {
            self.net.packets_lost += 1;
            self.drop_slot(slot);
            return;
        }
        if self.cfg.faults.reorder_prob > 0.0 && self.rng.chance(self.cfg.faults.reorder_prob) {
            arrive += 1 + self.rng.below(self.cfg.faults.reorder_delay_ns.max(1));
            self.net.reordered_packets += 1;
        }
        if self.cfg.faults.dup_rate > 0.0 && self.rng.chance(self.cfg.faults.dup_rate) {
            let copy = self.packets.get(slot).clone();
            let copy = self.new_packet(copy);
            self.net.packets_duplicated += 1;
            // The copy follows the original on the same link (FIFO), one serialization later,
            // and holds the link for that serialization: a packet sent after the original
            // (a beacon whose barrier passes the original's timestamp) arrives after the copy
            // too. Were it overtaken, a copy whose original was lost further on would arrive
            // below the barrier: a late drop no FIFO network produces.
            let l = &mut self.links[link as usize];
            l.busy_until += ser;
            self.queue
                .push(arrive + ser, Ev::Arrive { link, slot: copy });
        }
        self.queue.push(arrive, Ev::Arrive { link, slot });
    }

    // --- Roles, cores and timers -------------------------------------------------------------

    /// Role `role`'s core (it has one), shared with the other roles it serves.
    #[inline]
    pub(crate) fn core(&mut self, role: u32) -> &mut Core<P::Input> {
        let cpu = self.roles[role as usize].cpu.expect("a role on a core");
        &mut self.cpus[cpu as usize]
    }

    /// Role `role`'s core, to read.
    #[inline]
    pub(crate) fn core_ref(&self, role: u32) -> &Core<P::Input> {
        let cpu = self.roles[role as usize].cpu.expect("a role on a core");
        &self.cpus[cpu as usize]
    }

    /// The cores, in index order.
    pub fn cpus(&self) -> &[Core<P::Input>] {
        &self.cpus
    }

    /// The mean and the largest share of `0..period_ns` the cores were busy (the protocols that
    /// keep [`Core::busy_ns`]); zeros for none.
    pub fn cpu_busy_share(&self, period_ns: SimTime) -> CpuBusy {
        let share = |c: &Core<P::Input>| c.busy_ns as f64 / period_ns.max(1) as f64;
        let n = self.cpus.len().max(1) as f64;
        CpuBusy {
            mean: self.cpus.iter().map(share).sum::<f64>() / n,
            max: self.cpus.iter().map(share).fold(0.0, f64::max),
        }
    }

    /// Role `role`'s local time at true time `t`.
    #[inline]
    pub(crate) fn local(&mut self, role: u32, t: SimTime) -> onepipe_proto::Instant {
        self.roles[role as usize].clock.local(t)
    }

    /// Hands `input` to role `role`: discarded if the role is down, run at once if its core is
    /// free (or it has none), else queued behind whatever waits for that core.
    #[inline]
    pub(crate) fn input(&mut self, t: SimTime, role: u32, input: CoreInput<P::Input>) {
        if self.proto.down(role, t) {
            self.discard_all(t, role, Some(input));
            return;
        }
        let Some(cpu) = self.roles[role as usize].cpu else {
            P::process(self, t, role, input);
            return;
        };
        self.apply_stalls(t, cpu);
        let c = &mut self.cpus[cpu as usize];
        debug_assert!(c.roles.contains(&role));
        if c.pending.is_empty() && c.free <= t {
            P::process(self, t, role, input);
            return;
        }
        let max = self.cfg.faults.recv_queue_len_max;
        if let CoreInput::Packet(slot) = input {
            if max > 0 && c.pending_packets >= max {
                self.net.recv_overflow += 1;
                self.drop_slot(slot);
                return;
            }
        }
        let c = &mut self.cpus[cpu as usize];
        match input {
            CoreInput::Send { .. } => c.pending_sends += 1,
            CoreInput::Packet(_) => c.pending_packets += 1,
            CoreInput::Timeout | CoreInput::Proto(_) => {}
        }
        let timer = matches!(input, CoreInput::Timeout);
        let packet = matches!(input, CoreInput::Packet(_));
        if c.timer_first && timer {
            c.pending.push_front((role, input));
        } else {
            c.pending.push_back((role, input));
        }
        if !c.wake_armed {
            c.wake_armed = true;
            let at = c.free.max(t);
            self.queue.push(at, Ev::CpuWake { cpu });
        }
        if timer {
            P::timer_while_busy(self, t, role);
        } else if packet {
            P::packet_while_busy(self, t, role);
        }
    }

    /// A down role: its queued inputs and `input` are lost.
    fn discard_all(&mut self, t: SimTime, role: u32, input: Option<CoreInput<P::Input>>) {
        P::on_down(self, t, role);
        self.clear_core(role, input);
    }

    /// Discards role `role`'s queued inputs (the other roles' on its core stay, in order) and
    /// `input`.
    fn clear_core(&mut self, role: u32, input: Option<CoreInput<P::Input>>) {
        let pending = match self.roles[role as usize].cpu {
            Some(cpu) => {
                let c = &mut self.cpus[cpu as usize];
                if c.roles.len() == 1 {
                    c.pending_sends = 0;
                    c.pending_packets = 0;
                    std::mem::take(&mut c.pending)
                } else {
                    let (mine, others) = std::mem::take(&mut c.pending)
                        .into_iter()
                        .partition(|(r, _)| *r == role);
                    c.pending = others;
                    for (_, i) in &mine {
                        match i {
                            CoreInput::Send { .. } => c.pending_sends -= 1,
                            CoreInput::Packet(_) => c.pending_packets -= 1,
                            CoreInput::Timeout | CoreInput::Proto(_) => {}
                        }
                    }
                    mine
                }
            }
            None => VecDeque::new(),
        };
        for i in pending.into_iter().map(|(_, i)| i).chain(input) {
            match i {
                CoreInput::Packet(slot) => self.drop_slot(slot),
                CoreInput::Proto(x) => P::discard(self, x),
                CoreInput::Timeout | CoreInput::Send { .. } => {}
            }
        }
    }

    /// Role `role` restarts at `t` with its state lost: its queue is discarded, its core free,
    /// its timer disarmed. Its core is its own (a 1Pipe host's): a shared core would still be
    /// busy with the other roles' work.
    pub(crate) fn reset_role(&mut self, t: SimTime, role: u32) {
        self.clear_core(role, None);
        let r = &mut self.roles[role as usize];
        r.armed = None;
        if let Some(cpu) = r.cpu {
            let c = &mut self.cpus[cpu as usize];
            assert_eq!(c.roles.len(), 1, "a restarted role has a core of its own");
            c.free = t;
        }
    }

    /// Core `cpu`'s stalls that started by `t`: each keeps it busy `len_ns` longer (from the
    /// stall's start if it was idle then).
    fn apply_stalls(&mut self, t: SimTime, cpu: u32) {
        let Some(s) = self.stalls.as_mut() else {
            return;
        };
        let c = &mut self.cpus[cpu as usize];
        let next = &mut s.next[cpu as usize];
        while *next <= t {
            c.free = c.free.max(*next) + s.len_ns;
            self.net.recv_stalls += 1;
            *next += s.len_ns + poisson_gap(&mut s.rng, 1e9 / s.every_ns as f64);
        }
    }

    /// Core `cpu` takes its oldest input, or discards the inputs of a role found down.
    fn on_cpu_wake(&mut self, t: SimTime, cpu: u32) {
        if self.stalls.is_some() {
            self.apply_stalls(t, cpu);
            let c = &mut self.cpus[cpu as usize];
            if c.free > t {
                // A stall began while the input before was being done: wake when it ends.
                self.queue.push(c.free, Ev::CpuWake { cpu });
                return;
            }
        }
        let c = &mut self.cpus[cpu as usize];
        c.wake_armed = false;
        // With nothing queued (a restart or a crash emptied it), the wake still checks the
        // core's first role, so a crash is noticed as it was when a core served one role.
        let role = c.pending.front().map_or(c.roles.start, |(r, _)| *r);
        if self.proto.down(role, t) {
            self.discard_all(t, role, None);
            self.wake_if_pending(t, cpu);
            return;
        }
        let c = &mut self.cpus[cpu as usize];
        let Some((role, input)) = c.pending.pop_front() else {
            return;
        };
        if c.pending.is_empty() && c.pending.capacity() > PENDING_RETAINED {
            // A burst (a scattering's ACKs, a beacon storm) queued many inputs; the room goes
            // back to the allocator for the next core's burst instead of staying here.
            c.pending = VecDeque::new();
        }
        match input {
            CoreInput::Send { .. } => c.pending_sends -= 1,
            CoreInput::Packet(_) => c.pending_packets -= 1,
            CoreInput::Timeout | CoreInput::Proto(_) => {}
        }
        P::process(self, t, role, input);
        self.wake_if_pending(t, cpu);
    }

    /// Arms core `cpu`'s wake when its current input is done, if anything waits for it.
    fn wake_if_pending(&mut self, t: SimTime, cpu: u32) {
        let c = &mut self.cpus[cpu as usize];
        if !c.pending.is_empty() && !c.wake_armed {
            c.wake_armed = true;
            let at = c.free.max(t);
            self.queue.push(at, Ev::CpuWake { cpu });
        }
    }

    fn on_timer(&mut self, t: SimTime, role: u32, generation: u32) {
        let r = &mut self.roles[role as usize];
        if r.generation != generation {
            return;
        }
        r.armed = None;
        self.input(t, role, CoreInput::Timeout);
    }

    /// Re-arms role `role`'s timer from its `poll_timeout`, if it changed.
    pub(crate) fn rearm(&mut self, role: u32) {
        let now = self.now;
        let deadline = self.proto.poll_timeout(role);
        let r = &mut self.roles[role as usize];
        if deadline == r.armed {
            return;
        }
        r.armed = deadline;
        r.generation = r.generation.wrapping_add(1);
        if let Some(d) = deadline {
            let at = r.clock.true_time_of(d, now);
            let generation = r.generation;
            self.queue.push(at, Ev::Timer { role, generation });
        }
    }

    fn on_send_event(&mut self, t: SimTime, proc: u32) {
        if t >= self.cfg.workload.duration_ns {
            return;
        }
        let role = self.proto.sender(proc);
        let c = self.core(role);
        if c.pending_sends >= c.send_queue_max || P::sends_blocked(self) {
            self.net.sends_rejected += 1;
        } else {
            self.input(t, role, CoreInput::Send { proc, issued: t });
        }
        if let Some(at) = self.next_send_after(t, proc) {
            self.queue.push(at, Ev::Send { proc });
        }
    }
}

/// Bursty loss on one link (`--loss-rate`, `--loss-burst`): a packet is lost while a burst is
/// under way, or starts one with probability `loss_rate`; a burst loses `loss_burst` packets in
/// a row. Draws from `rng` only when no burst is under way.
fn lose_bursty(burst_left: &mut u32, rng: &mut Rng, cfg: &SimConfig) -> bool {
    if *burst_left > 0 {
        *burst_left -= 1;
        return true;
    }
    if rng.chance(cfg.faults.loss_rate) {
        *burst_left = cfg.faults.loss_burst - 1;
        return true;
    }
    false
}

/// The time to a process's next send: exponential with mean `1 / rate_per_s` (a Poisson
/// process), at least 1 ns.
fn poisson_gap(rng: &mut Rng, rate_per_s: f64) -> SimTime {
    let mean = 1e9 / rate_per_s;
    (rng.exponential(mean).round() as SimTime).max(1)
}

#[cfg(test)]
mod tests;
