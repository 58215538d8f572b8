//! The simulation engine: nodes, links, the event loop, the host CPU model and the workload.
//!
//! One event queue keyed (time, insertion order) drives everything. Hosts and switches are the
//! sans-IO roles of `onepipe-proto`, handed their *local* time from a [`Clock`]; the engine
//! follows the driving contract of `onepipe_proto::node` (mutate, drain, re-arm).
//!
//! Links are FIFO with serialization (`bytes / bandwidth`) and a fixed latency; with probability
//! `reorder_prob` a packet is held back by a random extra delay so later packets overtake it.
//! A host is one CPU: each input costs `host_recv_ns`, each packet it sends `host_send_ns` and
//! each message it delivers `host_deliver_ns`; inputs that arrive while it is busy wait in a
//! FIFO — except its timer, which runs next (a polling loop checks its timers every turn, so
//! beacons are not starved). That is what makes throughput saturate (§7.2: "limited by CPU
//! processing").
//! Switches forward in zero time (their pipeline latency is part of the link latency).

use crate::check::{Checker, Dsts};
use crate::clock::{Clock, ClockParams};
use crate::config::{Service, SimConfig, WorkloadKind, PAYLOAD_HEADER_LEN};
use crate::metrics::{NsHistogram, TraceHash};
use crate::queue::{EventQueue, SimTime};
use bytes::{BufMut, Bytes, BytesMut};
use onepipe_proto::failure::{
    reach_table, Controller, ControllerConfig, CtrlEvent, CtrlMsg, Mgmt, MgmtDest, RelayMsg,
};
use onepipe_proto::host::{Host, HostConfig, HostEvent, UPLINK};
use onepipe_proto::prefetch::{prefetch, Stage};
use onepipe_proto::rng::Rng;
use onepipe_proto::switch::{Router, Switch, SwitchConfig, SwitchMode};
use onepipe_proto::topology::{flow_hash, Topology};
use onepipe_proto::wire::{flags, Packet};
use onepipe_proto::{Input, Instant, Node, NodeId, Output, PortId, ProcId, Timestamp};
use std::collections::VecDeque;
use std::sync::Arc;

/// An event: 12 bytes. A packet in flight stays in one slot of the world's packet slab from
/// the moment it is sent until it is consumed — a switch rewrites its barrier there and sends it
/// on — and its `Arrive` events carry the slot's index: the queue moves every event a few times
/// (the radix heap's refills), and a small event keeps its buckets in cache. The slot is
/// prefetched two events ahead of its arrival.
#[derive(Clone, Copy, Debug)]
pub enum Ev {
    /// A packet reaches the far end of a link.
    Arrive {
        /// The link.
        link: u32,
        /// The packet's slot in the world's packet slab.
        slot: u32,
    },
    /// A node's timer, valid if `generation` is still current.
    Timer {
        /// The node.
        node: u32,
        /// Generation of the arming.
        generation: u32,
    },
    /// A busy host CPU takes its next input.
    CpuWake {
        /// The host.
        host: u32,
    },
    /// A process issues its next send.
    Send {
        /// The process.
        proc: u32,
    },
    /// A control message (§5.2) reaches its addressee over the management network.
    Ctrl {
        /// Index into the world's control-message slab.
        msg: u32,
    },
    /// The controller's timer.
    CtrlTimer,
    /// The controller recovers from an outage (`--controller-down`).
    CtrlRecover,
    /// A host's cut links heal (`--cut host-N@T1..T2`): §5.2 receiver recovery.
    Heal {
        /// The host.
        host: u32,
    },
    /// A crashed host restarts with its state lost (`--restart-host`).
    Restart {
        /// The host.
        host: u32,
    },
}

/// Routes by the topology's ECMP tables (§3.1): process → host, then per-flow hashing. After a
/// §5.2 Resume, around dead links: a choice whose next hop can no longer reach the destination is
/// skipped for the next one of its ECMP group.
#[derive(Debug)]
struct TopoRouter {
    topo: Arc<Topology>,
    /// Host of each process id (a table lookup is cheaper than a division per hop); `u32::MAX`
    /// for an id not given out yet. Ids given to a host that rejoins (§5.2) are set then; the
    /// simulator is single-threaded, so relaxed atomics cost what plain loads do.
    host_of: Vec<std::sync::atomic::AtomicU32>,
    seed: u64,
    /// Set once a failure was resumed: `reach[dst_host][node]` and the dead links. The simulator
    /// is single-threaded, so the lock is never contended; fault-free runs never take it.
    detour: std::sync::RwLock<Option<Detour>>,
    detouring: std::sync::atomic::AtomicBool,
}

#[derive(Debug)]
struct Detour {
    reach: Vec<Vec<bool>>,
    dead: std::collections::BTreeSet<onepipe_proto::LinkId>,
}

impl Router for TopoRouter {
    fn route(&self, at: NodeId, src: ProcId, dst: ProcId) -> Option<PortId> {
        let sh = self.host_of(src)?;
        let dh = self.host_of(dst)?;
        let hash = flow_hash(self.seed, sh, dh);
        let port = self.topo.route(at, dh, hash)?;
        if !self.detouring.load(std::sync::atomic::Ordering::Relaxed) {
            return Some(port);
        }
        let guard = self.detour.read().expect("never poisoned");
        let Some(d) = guard.as_ref() else {
            return Some(port);
        };
        let node = self.topo.node(at);
        let usable = |p: u32| {
            let l = node.outputs[p as usize];
            !d.dead.contains(&l) && d.reach[dh as usize][self.topo.links()[l.index()].to.index()]
        };
        if usable(port.0) {
            return Some(port);
        }
        let (first, count) = self.topo.route_choices(at, dh)?;
        (1..count)
            .map(|i| first + (port.0 - first + i) % count)
            .find(|&p| usable(p))
            .map(PortId)
            .or(Some(port))
    }
}

impl TopoRouter {
    fn host_of(&self, p: ProcId) -> Option<u32> {
        let h = self
            .host_of
            .get(p.index())?
            .load(std::sync::atomic::Ordering::Relaxed);
        (h != u32::MAX).then_some(h)
    }
}

#[derive(Debug)]
enum HostInput {
    Packet(Packet),
    Timeout,
    Send {
        proc: u32,
        issued: SimTime,
    },
    /// A control message (slab index).
    Ctrl(u32),
    /// Its cut link healed (§5.2 receiver recovery).
    Heal,
}

#[derive(Debug)]
struct HostSt {
    host: Host,
    clock: Clock,
    cpu_free: SimTime,
    pending: VecDeque<HostInput>,
    /// Sends among `pending`.
    pending_sends: u32,
    wake_armed: bool,
    timer_generation: u32,
    armed: Option<Instant>,
    /// Reliable scatterings queued in the host's send buffer, in handle order: (handle, process,
    /// scattering id, destinations), until `HostEvent::ReliableSent` reports their timestamp.
    reliable_queued: VecDeque<(u64, u32, u64, Dsts)>,
    /// True time at which the host crashes (`--crash-host`); `SimTime::MAX` for never. From then
    /// on it sends nothing and everything that reaches it is lost — until `restart_at`
    /// (`--restart-host`), when it comes back with its state lost.
    crash_at: SimTime,
    restart_at: SimTime,
    /// True time at which the host's own link (up or down, or its ToR) is cut (`--cut`): alive,
    /// but cut off — until `heal_at` (a healed host cut).
    cut_at: SimTime,
    heal_at: SimTime,
    /// When its [best-effort, commit] barrier last moved, and the longest stall of each that
    /// ended after the first fault (Fig. 10's measure).
    last_move: [SimTime; 2],
    stall_max: [SimTime; 2],
    /// The host's released commit barrier before the input being handled.
    released_before: Option<Timestamp>,
}

impl HostSt {
    /// Whether the host is down (crashed, not restarted) at true time `now`.
    fn crashed(&self, now: SimTime) -> bool {
        now >= self.crash_at && now < self.restart_at
    }

    /// Whether the host is crashed or cut off at true time `now`.
    fn gone(&self, now: SimTime) -> bool {
        self.crashed(now) || (now >= self.cut_at && now < self.heal_at)
    }

    /// Whether it ever crashes or is cut off.
    fn ever_gone(&self) -> bool {
        self.crash_at < SimTime::MAX || self.cut_at < SimTime::MAX
    }
}

#[derive(Debug)]
struct SwitchSt {
    sw: Switch,
    clock: Clock,
    timer_generation: u32,
    armed: Option<Instant>,
}

#[derive(Debug)]
struct LinkSt {
    to: u32,
    to_port: u32,
    from_switch: bool,
    ps_per_byte: u64,
    /// Queueing delay (ns) beyond which the egress queue holds more than the ECN threshold.
    ecn_queue_ns: u64,
    delay_ns: u64,
    busy_until: SimTime,
    last_barrier: Option<Timestamp>,
    /// Packets still to drop in the current loss burst.
    burst_left: u32,
    /// True time from which the link carries nothing (`--cut`), and from which it carries
    /// again (a heal; `SimTime::MAX` for never).
    cut_at: SimTime,
    heal_at: SimTime,
}

/// Counters the engine keeps.
#[derive(Clone, Debug, Default)]
pub struct EngineStats {
    /// Events processed.
    pub events: u64,
    /// Bytes sent on all links.
    pub link_bytes: u64,
    /// Bytes of beacons sent on all links.
    pub beacon_bytes: u64,
    /// Packets held back by the non-FIFO option.
    pub reordered_packets: u64,
    /// Packets the loss model dropped.
    pub packets_lost: u64,
    /// Packets the duplication model copied.
    pub packets_duplicated: u64,
    /// Packets dropped on cut links (`--cut`).
    pub packets_cut: u64,
    /// Sends refused because the host CPU queue was full.
    pub sends_rejected: u64,
    /// Scatterings sent.
    pub scatterings: u64,
    /// Messages sent (one per destination).
    pub messages_sent: u64,
    /// Messages delivered.
    pub delivered: u64,
    /// Messages delivered while processes were still sending (the throughput numerator: at
    /// overload, deliveries during the drain would overstate it).
    pub delivered_in_period: u64,
    /// Send-failed notifications.
    pub send_failed: u64,
    /// Reliable sends refused because the host's send buffer was full (`SendError::Full`).
    pub sends_refused_full: u64,
    /// Data packets marked ECN by a switch queue above the threshold.
    pub ecn_marked: u64,
    /// Reliable messages delivered.
    pub delivered_reliable: u64,
    /// Control messages sent on the management network (§5.2).
    pub ctrl_messages: u64,
    /// Reliable scatterings recalled (§5.2).
    pub recalled: u64,
    /// Process-failed callbacks raised (§5.2), over all hosts.
    pub proc_failed_callbacks: u64,
    /// Reliable sends not made because a destination had failed.
    pub sends_to_failed: u64,
    /// Control messages lost because the controller was down (`--controller-down`).
    pub ctrl_lost: u64,
    /// Packets dropped by route black holes (`--blackhole`).
    pub packets_blackholed: u64,
    /// §5.2 relays the management network could not deliver (the addressee had crashed).
    pub relays_undeliverable: u64,
    /// §5.2 hosts rejoined as new processes.
    pub rejoined: u64,
    /// Hosts restarted after a crash (`--restart-host`).
    pub restarts: u64,
    /// Traffic of rejoined processes (ids above the first incarnations'): messages delivered
    /// to them, and messages from them delivered anywhere.
    pub rejoined_delivered_to: u64,
    /// See `rejoined_delivered_to`.
    pub rejoined_delivered_from: u64,
}

/// One §5.2 round, as the simulator saw it (true times, ns).
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct FailureRound {
    /// Round number.
    pub round: u32,
    /// Hosts declared failed, with their failure timestamps (raw ns).
    pub hosts: Vec<(u32, u64)>,
    /// When the controller determined it.
    pub declared_ns: u64,
    /// When it resumed.
    pub resumed_ns: Option<u64>,
}

/// Most sends waiting for a host's CPU before the workload's next send is refused — the
/// application's send queue. Open-loop sends beyond capacity would otherwise pile up without
/// bound and, served first-come first-served, starve the receive path: with the bound, offered
/// load beyond capacity is refused (`sends_rejected`) and delivered throughput levels off.
const HOST_QUEUE_SEND_MAX: u32 = 64;

/// Most queued inputs whose room an idle host CPU keeps (see `on_cpu_wake`).
const PENDING_RETAINED: usize = 64;

/// A simulated data center.
pub struct World<Q: EventQueue<Ev>> {
    cfg: SimConfig,
    topo: Arc<Topology>,
    hosts: Vec<HostSt>,
    switches: Vec<SwitchSt>,
    links: Vec<LinkSt>,
    /// The node each link leads to (`links[l].to`), small enough to stay in cache: the prefetch
    /// of an upcoming arrival's node must not itself wait for the link's record.
    link_to: Vec<u32>,
    queue: Q,
    rng: Rng,
    workload_rng: Rng,
    scatter_seq: Vec<u64>,
    /// Flattened routing-graph lookups for the hot path: each host's uplink, and each switch's
    /// output links (`switch_out_links[switch_out_base[s] + port]`).
    host_uplinks: Vec<u32>,
    switch_out_base: Vec<u32>,
    switch_out_links: Vec<u32>,
    scratch_scatter: Vec<(ProcId, Bytes)>,
    scratch_dsts: Vec<u32>,
    procs: u32,
    /// Some host rejoined: its workload slots now send as, and to, its new processes.
    remapped: bool,
    /// (sending host, host) → the processes the sending host knows the other one runs: what
    /// `RelayMsg::PeerJoined` told it (absent: the first ones). A host sends to a rejoined
    /// host's new processes only once it has heard of them, and so stamps above its floor.
    known: std::collections::BTreeMap<(u32, u32), Vec<u32>>,
    now: SimTime,
    /// Data and NAK packets alive (on links or queued at host CPUs).
    live_messages: u64,
    router: Arc<TopoRouter>,
    /// §5.2: the controller, its messages in flight, and its armed timer.
    controller: Controller,
    ctrl_msgs: crate::slab::Slab<(MgmtDest, Mgmt)>,
    /// Packets on links (see [`Ev`]).
    packets: crate::slab::Slab<Packet>,
    /// Links lose, reorder or duplicate packets (`--loss`, `--reorder-prob`, `--dup`).
    link_faults: bool,
    ctrl_in_flight: u64,
    ctrl_armed: Option<Instant>,
    /// §5.2 rounds, in order.
    pub failure_rounds: Vec<FailureRound>,
    /// True time of the first crash or cut (`SimTime::MAX` if none).
    first_fault: SimTime,
    /// The last round whose Resume changed the routes.
    rerouted_round: u32,
    /// The checker, when checks are on.
    pub checker: Option<Checker>,
    /// Send → deliver latency, true time.
    pub latency: NsHistogram,
    /// The same, best-effort messages only.
    pub latency_be: NsHistogram,
    /// The same, reliable messages only.
    pub latency_reliable: NsHistogram,
    /// Arrive → deliver delay at the receiver, its local time.
    pub reorder_delay: NsHistogram,
    /// Hash of every send, delivery and failure.
    pub trace: TraceHash,
    /// Counters.
    pub stats: EngineStats,
    /// `ONEPIPE_SIM_TRACE` set: print every control message and the state at the end of a run
    /// that did not drain (debugging aid; it changes nothing else).
    trace_ctrl: bool,
    /// The route the prefetch of the next event asked its switch for: (switch node, source,
    /// destination, output port). Routing is a pure function of these (until a §5.2 reroute,
    /// which forgets it), so the event's forwarding takes it instead of routing twice.
    route_next: std::cell::Cell<Option<RouteMemo>>,
    /// `route_next` as it was for the event being handled.
    route_cur: Option<RouteMemo>,
}

const _: () = assert!(std::mem::size_of::<Ev>() == 12);

/// A routing answer remembered for one event: (switch node, source, destination, output).
type RouteMemo = (u32, ProcId, ProcId, PortId);

mod build;
use build::{
    apply_cuts, build_hosts, build_links, build_switches, new_checker, new_controller,
    proc_ids_max, schedule_faults,
};

impl<Q: EventQueue<Ev>> World<Q> {
    /// Builds the network of `cfg` (which must have passed `validate`): the topology and its
    /// router, the hosts, the switches, the links and their faults, the controller, then the
    /// first events.
    pub fn new(cfg: SimConfig, queue: Q) -> Result<World<Q>, String> {
        let topo = Arc::new(cfg.topology.build()?);
        let pph = cfg.procs_per_host;
        let procs = topo.hosts() * pph;
        let proc_ids_max = proc_ids_max(&cfg, procs)?;
        // The draws, in order: the clocks' seed, the router's seed, then the workload's fork.
        let mut rng = Rng::new(cfg.seed);
        let clock_seed = rng.next_u64();
        let topo_router = Arc::new(TopoRouter::new(&topo, pph, proc_ids_max, rng.next_u64()));
        let mut hosts = build_hosts(&cfg, &topo, clock_seed, proc_ids_max);
        let switches = build_switches(&cfg, &topo, clock_seed, topo_router.clone());
        let mut links = build_links(&cfg, &topo);
        let heals = apply_cuts(&cfg, &topo, &mut links)?;
        let restarts = schedule_faults(&cfg, &topo, &mut hosts, &links);
        let host_uplinks = (0..topo.hosts()).map(|h| topo.uplink(h).0).collect();
        let (mut switch_out_base, mut switch_out_links) = (Vec::new(), Vec::new());
        for n in topo.switches() {
            switch_out_base.push(switch_out_links.len() as u32);
            switch_out_links.extend(topo.node(n).outputs.iter().map(|l| l.0));
        }
        let checker = new_checker(&cfg, procs, &hosts, switches.len());
        let workload_rng = rng.fork(1);
        let controller = new_controller(&cfg, &topo, proc_ids_max);
        let mut w = World {
            topo,
            hosts,
            switches,
            link_to: links.iter().map(|l| l.to).collect(),
            links,
            queue,
            rng,
            workload_rng,
            scatter_seq: vec![0; proc_ids_max as usize],
            host_uplinks,
            switch_out_base,
            switch_out_links,
            scratch_scatter: Vec::new(),
            scratch_dsts: Vec::new(),
            procs,
            remapped: false,
            known: std::collections::BTreeMap::new(),
            now: 0,
            live_messages: 0,
            router: topo_router,
            controller,
            ctrl_msgs: crate::slab::Slab::default(),
            packets: crate::slab::Slab::default(),
            link_faults: cfg.loss_rate > 0.0 || cfg.reorder_prob > 0.0 || cfg.dup_rate > 0.0,
            ctrl_in_flight: 0,
            ctrl_armed: None,
            failure_rounds: Vec::new(),
            rerouted_round: 0,
            first_fault: cfg
                .crashes
                .iter()
                .map(|c| c.1)
                .chain(cfg.cuts.iter().map(|c| c.1))
                .min()
                .unwrap_or(SimTime::MAX),
            checker,
            latency: NsHistogram::default(),
            latency_be: NsHistogram::default(),
            latency_reliable: NsHistogram::default(),
            reorder_delay: NsHistogram::default(),
            trace: TraceHash::default(),
            stats: EngineStats::default(),
            trace_ctrl: std::env::var_os("ONEPIPE_SIM_TRACE").is_some(),
            route_next: std::cell::Cell::new(None),
            route_cur: None,
            cfg,
        };
        w.schedule_start(heals, restarts);
        Ok(w)
    }

    /// The first events: every node's timer, every process's first send, the controller's
    /// recoveries, the heals and the restarts.
    fn schedule_start(&mut self, heals: Vec<(u32, SimTime)>, restarts: Vec<(u32, SimTime)>) {
        for n in 0..self.topo.nodes().len() as u32 {
            self.rearm(n);
        }
        for p in 0..self.procs {
            let gap = self.next_gap();
            self.queue.push(gap, Ev::Send { proc: p });
        }
        for &(_, to) in &self.cfg.controller_down {
            self.queue.push(to, Ev::CtrlRecover);
        }
        for (host, at) in heals {
            self.queue.push(at, Ev::Heal { host });
        }
        for (host, at) in restarts {
            self.queue.push(at, Ev::Restart { host });
        }
    }

    /// The topology.
    pub fn topology(&self) -> &Topology {
        &self.topo
    }

    /// Number of processes.
    pub fn procs(&self) -> u32 {
        self.procs
    }

    /// The process that workload slot `slot` sends as now: the slot's process, or — once its
    /// host rejoined (§5.2) — the new process that took its place.
    fn slot_proc(&self, slot: u32) -> u32 {
        let pph = self.cfg.procs_per_host;
        self.hosts[(slot / pph) as usize].host.config().procs[(slot % pph) as usize].0
    }

    /// Current true time.
    pub fn now(&self) -> SimTime {
        self.now
    }

    /// The host endpoints.
    pub fn hosts(&self) -> impl Iterator<Item = &Host> {
        self.hosts.iter().map(|h| &h.host)
    }

    /// Fig. 10's measure: the longest barrier stall that ended after the first fault, averaged
    /// over the hosts that stayed correct: (best-effort, commit) in ns; `None` without faults.
    pub fn stall_ns(&self) -> Option<(f64, f64)> {
        if self.first_fault == SimTime::MAX {
            return None;
        }
        let failed: Vec<u32> = self.controller.failed_hosts().map(|h| h.0).collect();
        let correct: Vec<&HostSt> = self
            .hosts
            .iter()
            .enumerate()
            .filter(|(h, st)| !st.ever_gone() && !failed.contains(&(*h as u32)))
            .map(|(_, st)| st)
            .collect();
        let n = correct.len().max(1) as f64;
        let mean = |k: usize| correct.iter().map(|st| st.stall_max[k] as f64).sum::<f64>() / n;
        Some((mean(0), mean(1)))
    }

    /// The switches.
    pub fn switches(&self) -> impl Iterator<Item = &Switch> {
        self.switches.iter().map(|s| &s.sw)
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
            self.route_cur = self.route_next.take();
            self.prefetch_ahead();
            match ev {
                Ev::Arrive { link, slot } => self.on_arrive(t, link, slot),
                Ev::Timer { node, generation } => self.on_timer(t, node, generation),
                Ev::CpuWake { host } => self.on_cpu_wake(t, host),
                Ev::Send { proc } => self.on_send_event(t, proc),
                Ev::Ctrl { msg } => self.on_ctrl(t, msg),
                Ev::CtrlTimer => {
                    if let Some(up) = self.controller_down_until(t) {
                        // A crashed controller runs nothing; its timer fires on recovery.
                        self.queue.push(up, Ev::CtrlTimer);
                        continue;
                    }
                    self.ctrl_armed = None;
                    self.controller.handle(Instant(t), Input::Timeout);
                    self.drain_controller(t);
                }
                Ev::Heal { host } => self.host_input(t, host, HostInput::Heal),
                Ev::Restart { host } => self.restart(t, host),
                Ev::CtrlRecover => {
                    if self.controller_down_until(t).is_none() {
                        self.controller.on_recover(Instant(t));
                        self.drain_controller(t);
                    }
                }
            }
        }
        self.now = self.now.max(end);
    }

    /// Starts loading what the next events will touch (see [`onepipe_proto::prefetch`]), in
    /// four stages one event apart, so that each stage's pointers were loaded by the one before:
    /// for the fourth event from now its queue entry, its link and its node's fields, then the
    /// records they point to, the per-peer entries, and (a switch's) output link. A hint only: the
    /// run is the same without it.
    #[inline(always)]
    fn prefetch_ahead(&self) {
        if let Some(ev) = self.queue.peek_ahead(2) {
            prefetch(ev);
            if let Ev::Arrive { slot, .. } = *ev {
                self.packets.prefetch(slot);
            }
            self.prefetch_event(Stage::Fields, ev);
        }
        if let Some(ev) = self.queue.peek_ahead(1) {
            self.prefetch_event(Stage::Records, ev);
        }
        if let Some(ev) = self.queue.peek_ahead(0) {
            self.prefetch_event(Stage::Peers, ev);
        }
    }

    /// One stage of the prefetch for event `ev`.
    #[inline(always)]
    fn prefetch_event(&self, stage: Stage, ev: &Ev) {
        let (node, packet, link) = match ev {
            // The packet's slot was prefetched with the first stage, which does not read it.
            Ev::Arrive { link, slot } => (
                self.link_to[*link as usize],
                (stage != Stage::Fields).then(|| self.packets.get(*slot)),
                *link,
            ),
            Ev::Timer { node, .. } => (*node, None, u32::MAX),
            Ev::CpuWake { host } => (*host, None, u32::MAX),
            _ => return,
        };
        if node < self.topo.hosts() {
            let st = &self.hosts[node as usize];
            let packet = match (ev, stage) {
                // A CPU wake runs the host's oldest queued input.
                (Ev::CpuWake { .. }, Stage::Records) => {
                    if let Some(input) = st.pending.front() {
                        prefetch(input);
                    }
                    None
                }
                (Ev::CpuWake { .. }, _) => match st.pending.front() {
                    Some(HostInput::Packet(p)) if stage != Stage::Fields => Some(p),
                    _ => None,
                },
                _ => packet,
            };
            if stage == Stage::Fields {
                prefetch(st);
                prefetch(&st.pending);
                prefetch(&st.clock);
                prefetch(&st.cpu_free);
                prefetch(&st.armed);
                prefetch(&st.crash_at);
                prefetch(&st.last_move);
                prefetch(&st.released_before);
            }
            st.host.prefetch(stage, packet);
            return;
        }
        let si = (node - self.topo.hosts()) as usize;
        let sw = &self.switches[si].sw;
        match (stage, packet) {
            (Stage::Fields, _) => {
                prefetch(&self.switches[si]);
                if link != u32::MAX {
                    prefetch(&self.links[link as usize]);
                }
                sw.prefetch(stage, PortId(0));
                self.topo.prefetch_route(NodeId(node));
            }
            (Stage::Records, Some(_)) => {
                sw.prefetch(stage, PortId(self.links[link as usize].to_port));
            }
            (Stage::Peers, Some(p)) => {
                let Some((src, dst)) = p.endpoints() else {
                    return;
                };
                if let Some(out) = sw.route(src, dst) {
                    self.route_next.set(Some((node, src, dst, out)));
                    sw.prefetch_output(out);
                    let base = self.switch_out_base[si] as usize;
                    if let Some(&l) = self.switch_out_links.get(base + out.index()) {
                        prefetch(&self.links[l as usize]);
                    }
                }
            }
            _ => {}
        }
    }

    /// A packet enters the network (sent by a host or a switch, or a duplicate): counted until
    /// it is consumed or dropped ([`World::consume`]).
    fn count_in(&mut self, p: &Packet) {
        if !matches!(p, Packet::Beacon(_)) {
            self.live_messages += 1;
        }
    }

    /// A packet leaves the network: handed to its host or switch, or dropped.
    fn consume(&mut self, p: Packet) -> Packet {
        if !matches!(p, Packet::Beacon(_)) {
            self.live_messages -= 1;
        }
        p
    }

    /// The packet in `slot` leaves the network without reaching anyone (cut, lost, unroutable).
    fn drop_slot(&mut self, slot: u32) {
        let packet = self.packets.take(slot);
        self.consume(packet);
    }

    /// True when nothing but beacons and timers is left: no data or NAK on a link or waiting for
    /// a host CPU, no send waiting, nothing buffered for reordering or reassembly. A run drains
    /// until then (or its drain limit), so undelivered messages are losses, not stragglers.
    pub fn quiescent(&self) -> bool {
        // Packets in flight to a crashed host count until they arrive and are dropped.
        self.live_messages == 0
            && self.ctrl_in_flight == 0
            && self.controller.open_rounds() == 0
            && self.controller.poll_timeout().is_none()
            && self.hosts.iter().enumerate().all(|(i, h)| {
                h.gone(self.now)
                    || self.controller.is_failed(NodeId(i as u32))
                    || h.host.reorder_len() == 0
                        && h.host.partial_len() == 0
                        && h.host.unresolved_sends() == 0
                        && h.host.failure_rounds_open() == 0
                        && h.pending.iter().all(|i| matches!(i, HostInput::Timeout))
            })
    }

    /// Sends a new packet on `link` at time `t`.
    fn transmit(&mut self, link: u32, packet: Packet, t: SimTime) {
        self.count_in(&packet);
        self.put_on_link(link, packet, t);
    }

    /// Puts a packet already counted in the network on `link` at time `t`.
    fn put_on_link(&mut self, link: u32, packet: Packet, t: SimTime) {
        let slot = self.packets.insert(packet);
        self.put_slot_on_link(link, slot, t);
    }

    /// Puts the packet in `slot` (counted in the network: new, or forwarded by a switch) on
    /// `link` at time `t`.
    fn put_slot_on_link(&mut self, link: u32, slot: u32, t: SimTime) {
        let packet = self.packets.get_mut(slot);
        let bytes = packet.wire_len() as u64;
        let is_beacon = matches!(packet, Packet::Beacon(_));
        let barrier = match &*packet {
            Packet::Beacon(b) => Some(b.barrier),
            Packet::Data(d) => d.header.barrier(),
            Packet::Nak(_) | Packet::Ack(_) | Packet::AckBatch(_) => None,
        };
        let l = &mut self.links[link as usize];
        if l.from_switch {
            if let Some(b) = barrier {
                if let (Some(last), Some(c)) = (l.last_barrier, self.checker.as_mut()) {
                    c.on_link_barrier(t, link, last, b);
                }
                l.last_barrier = Some(b);
            }
        }
        if t >= l.cut_at && t < l.heal_at {
            self.stats.packets_cut += 1;
            self.drop_slot(slot);
            return;
        }
        let ser = (bytes * l.ps_per_byte).div_ceil(1000);
        let start = t.max(l.busy_until);
        // §6.1 DCTCP: a switch egress queue above the threshold marks data packets.
        if l.from_switch && start > t + l.ecn_queue_ns {
            if let Packet::Data(d) = self.packets.get_mut(slot) {
                if d.header.flags & flags::ECN == 0 {
                    d.header.flags |= flags::ECN;
                    self.stats.ecn_marked += 1;
                }
            }
        }
        let l = &mut self.links[link as usize];
        l.busy_until = start + ser;
        let arrive = l.busy_until + l.delay_ns;
        self.stats.link_bytes += bytes;
        if is_beacon {
            self.stats.beacon_bytes += bytes;
        }
        if self.link_faults {
            self.put_on_faulty_link(link, slot, arrive, ser);
            return;
        }
        self.queue.push(arrive, Ev::Arrive { link, slot });
    }

    /// The end of [`World::put_slot_on_link`] when loss, reordering or duplication is
    /// configured: the packet in `slot`, serialized in `ser`, would arrive at `arrive`. Faults
    /// are drawn only when configured, so fault-free runs keep their exact traces.
    #[cold]
    fn put_on_faulty_link(&mut self, link: u32, slot: u32, mut arrive: SimTime, ser: SimTime) {
        if self.cfg.loss_rate > 0.0 && self.lose(link, slot) {
            self.stats.packets_lost += 1;
            self.drop_slot(slot);
            return;
        }
        if self.cfg.reorder_prob > 0.0 && self.rng.chance(self.cfg.reorder_prob) {
            arrive += 1 + self.rng.below(self.cfg.reorder_delay_ns.max(1));
            self.stats.reordered_packets += 1;
        }
        if self.cfg.dup_rate > 0.0 && self.rng.chance(self.cfg.dup_rate) {
            let copy = self.packets.get(slot).clone();
            self.count_in(&copy);
            self.stats.packets_duplicated += 1;
            // The copy follows the original on the same link (FIFO), one serialization later.
            let copy = self.packets.insert(copy);
            self.queue
                .push(arrive + ser, Ev::Arrive { link, slot: copy });
        }
        self.queue.push(arrive, Ev::Arrive { link, slot });
    }

    /// Whether the loss model drops this packet on `link`: a loss event (probability
    /// `loss_rate`) drops it and the next `loss_burst - 1` packets of the targeted kind.
    fn lose(&mut self, link: u32, slot: u32) -> bool {
        if self
            .cfg
            .loss_kind
            .is_some_and(|k| !k.matches(self.packets.get(slot)))
        {
            return false;
        }
        let burst_left = &mut self.links[link as usize].burst_left;
        crate::net::lose_bursty(burst_left, &mut self.rng, &self.cfg)
    }

    fn on_arrive(&mut self, t: SimTime, link: u32, slot: u32) {
        let (to, port) = {
            let l = &self.links[link as usize];
            (l.to, l.to_port)
        };
        if to < self.topo.hosts() {
            debug_assert_eq!(port, UPLINK.0);
            let packet = self.packets.take(slot);
            self.host_input(t, to, HostInput::Packet(packet));
            return;
        }
        let si = (to - self.topo.hosts()) as usize;
        if matches!(self.packets.get(slot), Packet::Beacon(_)) {
            let packet = self.packets.take(slot);
            self.switch_handle(
                t,
                to,
                Input::Packet {
                    port: PortId(port),
                    packet,
                },
            );
            return;
        }
        // The hot path: data and NAKs are forwarded in place (`Switch::forward`, which is what
        // `handle` does for them); the switch's timer is unaffected, so there is no clock read
        // and no re-arm.
        let routed = self
            .route_cur
            .filter(|r| r.0 == to)
            .map(|(_, src, dst, out)| (src, dst, out));
        let packet = self.packets.get_mut(slot);
        match self.switches[si]
            .sw
            .forward_routed(PortId(port), packet, routed)
        {
            Some(out) => {
                let base = self.switch_out_base[si] as usize;
                let out_link = self.switch_out_links[base + out.index()];
                if !self.cfg.blackholes.is_empty()
                    && self.blackholed(t, link, self.packets.get(slot))
                {
                    let packet = self.packets.take(slot);
                    self.blackhole(t, out_link, to, packet);
                    return;
                }
                self.put_slot_on_link(out_link, slot, t);
            }
            None => self.drop_slot(slot),
        }
        if let Some(c) = self.checker.as_mut() {
            c.on_switch_barrier(t, si, self.switches[si].sw.barrier());
        }
    }

    /// `--blackhole`: whether the switch that forwarded `packet`, which came in on `link`,
    /// black-holes it. Only the first-hop switch of the source host does.
    fn blackholed(&self, t: SimTime, link: u32, packet: &Packet) -> bool {
        let Some((src, dst)) = packet.endpoints() else {
            return false;
        };
        // Hosts by the router's table: a rejoined host's new processes are its own.
        let host_of = |p: ProcId| self.router.host_of(p).unwrap_or(u32::MAX);
        let (sh, dh) = (host_of(src), host_of(dst));
        self.host_uplinks.get(sh as usize) == Some(&link)
            && self
                .cfg
                .blackholes
                .iter()
                .any(|&(a, b, at)| a == sh && b == dh && t >= at)
    }

    /// Drops a black-holed packet at switch `node`: a data packet carrying barriers goes on as a
    /// beacon with them on `out_link`, so no link falls silent and the routing notices nothing.
    fn blackhole(&mut self, t: SimTime, out_link: u32, node: u32, packet: Packet) {
        self.stats.packets_blackholed += 1;
        let beacon = match self.consume(packet) {
            Packet::Data(d) => match (d.header.barrier(), d.header.commit()) {
                (Some(barrier), Some(commit)) => Some(onepipe_proto::wire::Beacon {
                    from: NodeId(node),
                    barrier,
                    commit,
                }),
                _ => None,
            },
            _ => None,
        };
        if let Some(b) = beacon {
            self.transmit(out_link, Packet::Beacon(b), t);
        }
    }

    fn on_timer(&mut self, t: SimTime, node: u32, generation: u32) {
        if node < self.topo.hosts() {
            let st = &mut self.hosts[node as usize];
            if st.timer_generation != generation {
                return;
            }
            st.armed = None;
            self.host_input(t, node, HostInput::Timeout);
        } else {
            let st = &mut self.switches[(node - self.topo.hosts()) as usize];
            if st.timer_generation != generation {
                return;
            }
            st.armed = None;
            self.switch_handle(t, node, Input::Timeout);
        }
    }

    fn on_send_event(&mut self, t: SimTime, proc: u32) {
        if t >= self.cfg.duration_ns {
            return;
        }
        let host = proc / self.cfg.procs_per_host;
        if self.hosts[host as usize].pending_sends >= HOST_QUEUE_SEND_MAX {
            self.stats.sends_rejected += 1;
        } else {
            self.host_input(t, host, HostInput::Send { proc, issued: t });
        }
        let gap = self.next_gap();
        self.queue.push(t + gap, Ev::Send { proc });
    }

    /// `--restart-host`: the crashed host comes back with its state lost (its processes as
    /// before, failed; `Host::restarted`), and asks the controller to recover.
    fn restart(&mut self, t: SimTime, h: u32) {
        let st = &mut self.hosts[h as usize];
        let local = st.clock.local(t);
        let cfg = st.host.config().clone();
        let stats = st.host.stats().clone();
        st.host = Host::restarted(cfg, local);
        // Counters survive (the report sums them); nothing else does.
        st.host.restore_stats(stats);
        st.pending.clear();
        st.pending_sends = 0;
        st.cpu_free = t;
        st.armed = None;
        st.reliable_queued.clear();
        self.stats.restarts += 1;
        if self.trace_ctrl {
            eprintln!("[{t}] host {h} restarts, its state lost");
        }
        self.trace.add(0x5EB0 ^ (h as u64) << 32);
        if let Some(c) = self.checker.as_mut() {
            c.on_restarted(h);
        }
        self.finish_host_input(t, h, t, local, (None, None));
    }

    fn host_input(&mut self, t: SimTime, h: u32, input: HostInput) {
        if self.hosts[h as usize].crashed(t) {
            self.crashed_input(t, h, input);
            return;
        }
        let st = &mut self.hosts[h as usize];
        if st.pending.is_empty() && st.cpu_free <= t {
            self.host_process(t, h, input);
        } else {
            if matches!(input, HostInput::Send { .. }) {
                st.pending_sends += 1;
            }
            // A timer runs as soon as the CPU finishes its current input, ahead of the queued
            // packets — a polling loop checks its timers every iteration. Queued behind a burst
            // (every unacknowledged message resent after a §5.2 Resume, or overload), the host's
            // beacons starved for more than the link timeout and its ToR reported it dead (VOPR
            // seed 15 at 10 ms: every host of the network declared failed).
            if matches!(input, HostInput::Timeout) {
                st.pending.push_front(input);
            } else {
                st.pending.push_back(input);
            }
            if !st.wake_armed {
                st.wake_armed = true;
                let at = st.cpu_free.max(t);
                self.queue.push(at, Ev::CpuWake { host: h });
            }
        }
    }

    /// A crashed host: what reaches it is lost, its timers and sends never run.
    fn crashed_input(&mut self, t: SimTime, h: u32, input: HostInput) {
        if let Some(c) = self.checker.as_mut() {
            c.on_crash(t, h);
        }
        let st = &mut self.hosts[h as usize];
        for i in std::mem::take(&mut st.pending).into_iter().chain([input]) {
            match i {
                HostInput::Packet(packet) => {
                    self.consume(packet);
                }
                HostInput::Ctrl(m) => {
                    self.ctrl_msgs.take(m);
                    self.ctrl_in_flight -= 1;
                }
                _ => {}
            }
        }
        self.hosts[h as usize].pending_sends = 0;
    }

    fn on_cpu_wake(&mut self, t: SimTime, h: u32) {
        if self.hosts[h as usize].crashed(t) {
            self.hosts[h as usize].wake_armed = false;
            self.crashed_input(t, h, HostInput::Timeout);
            return;
        }
        let st = &mut self.hosts[h as usize];
        st.wake_armed = false;
        let Some(input) = st.pending.pop_front() else {
            return;
        };
        if st.pending.is_empty() && st.pending.capacity() > PENDING_RETAINED {
            // A burst (a scattering's ACKs, a beacon storm) queued many inputs; the room goes
            // back to the allocator for the next host's burst instead of staying here.
            st.pending = VecDeque::new();
        }
        if matches!(input, HostInput::Send { .. }) {
            st.pending_sends -= 1;
        }
        self.host_process(t, h, input);
        let st = &mut self.hosts[h as usize];
        if !st.pending.is_empty() {
            st.wake_armed = true;
            let at = st.cpu_free.max(t);
            self.queue.push(at, Ev::CpuWake { host: h });
        }
    }

    /// Builds the scattering of one send of workload slot `slot` into `scratch_scatter` /
    /// `scratch_dsts`.
    fn build_scattering(&mut self, slot: u32, seq: u64, issued: SimTime) -> Dsts {
        let mut payload = BytesMut::with_capacity(self.cfg.msg_size);
        payload.put_u64(seq);
        payload.put_u64(issued);
        payload.resize(self.cfg.msg_size, 0);
        let payload = payload.freeze();
        self.scratch_scatter.clear();
        self.scratch_dsts.clear();
        // Destinations are drawn as workload slots, then named by the process each slot is now.
        let n = self.procs;
        let dsts = match self.cfg.workload {
            WorkloadKind::AllToAll => {
                self.scratch_dsts.extend(0..n);
                Dsts::All(n)
            }
            WorkloadKind::OneToOne => {
                self.scratch_dsts.push((slot + n / 2) % n);
                Dsts::List(self.scratch_dsts.clone())
            }
            WorkloadKind::Scatter { k } => {
                // k distinct destinations, uniformly (rejection sampling; k <= n is validated).
                while self.scratch_dsts.len() < k as usize {
                    let d = self.workload_rng.below(n as u64) as u32;
                    if !self.scratch_dsts.contains(&d) {
                        self.scratch_dsts.push(d);
                    }
                }
                self.scratch_dsts.sort_unstable();
                Dsts::List(self.scratch_dsts.clone())
            }
        };
        let dsts = if self.remapped {
            let pph = self.cfg.procs_per_host;
            let sh = slot / pph;
            for i in 0..self.scratch_dsts.len() {
                let d = self.scratch_dsts[i];
                self.scratch_dsts[i] = if d / pph == sh {
                    self.slot_proc(d)
                } else {
                    self.known
                        .get(&(sh, d / pph))
                        .map_or(d, |procs| procs[(d % pph) as usize])
                };
            }
            Dsts::List(self.scratch_dsts.clone())
        } else {
            dsts
        };
        // An application told a process failed (§5.2 callback) stops sending to it.
        let host = &self.hosts[(slot / self.cfg.procs_per_host) as usize].host;
        let dsts = if host.failures_known() == 0 {
            dsts
        } else {
            let before = self.scratch_dsts.len();
            self.scratch_dsts
                .retain(|&d| host.failure_of(ProcId(d)).is_none());
            if self.scratch_dsts.len() == before {
                dsts
            } else {
                Dsts::List(self.scratch_dsts.clone())
            }
        };
        for &d in &self.scratch_dsts {
            self.scratch_scatter.push((ProcId(d), payload.clone()));
        }
        dsts
    }

    fn host_process(&mut self, t: SimTime, h: u32, input: HostInput) {
        let hi = h as usize;
        let local = self.hosts[hi].clock.local(t);
        let barrier_before = self.hosts[hi].host.barrier().map(|b| b.timestamp());
        let commit_before = self.hosts[hi].host.commit_barrier().map(|b| b.timestamp());
        self.hosts[hi].released_before =
            self.hosts[hi].host.commit_released().map(|b| b.timestamp());
        let mut cursor = t;
        match input {
            HostInput::Packet(packet) => {
                cursor += self.cfg.host_recv_ns;
                let packet = self.consume(packet);
                self.hosts[hi].host.handle(
                    local,
                    Input::Packet {
                        port: UPLINK,
                        packet,
                    },
                );
            }
            HostInput::Timeout => self.hosts[hi].host.handle(local, Input::Timeout),
            HostInput::Heal => self.hosts[hi].host.recover(local),
            HostInput::Ctrl(m) => {
                cursor += self.cfg.host_recv_ns;
                self.ctrl_in_flight -= 1;
                let (_, msg) = self.ctrl_msgs.take(m);
                match msg {
                    Mgmt::Ctrl(msg) => self.host_control(t, h, local, msg),
                    Mgmt::Relay(msg) => self.host_relay(t, h, local, msg),
                }
            }
            HostInput::Send { proc: slot, issued } => {
                let reliable = match self.cfg.service {
                    Service::BestEffort => false,
                    Service::Reliable => true,
                    Service::Mixed => self.workload_rng.chance(0.5),
                };
                let proc = self.slot_proc(slot);
                let seq = self.scatter_seq[proc as usize];
                let dsts = self.build_scattering(slot, seq, issued);
                if self.scratch_scatter.is_empty() {
                    self.stats.sends_to_failed += 1;
                    let before = (barrier_before, commit_before);
                    return self.finish_host_input(t, h, cursor, local, before);
                }
                let scattering = std::mem::take(&mut self.scratch_scatter);
                let host = &mut self.hosts[hi].host;
                let sent = if reliable {
                    host.send_reliable(local, ProcId(proc), &scattering)
                        .map(Err)
                } else {
                    host.send(local, ProcId(proc), &scattering).map(Ok)
                };
                self.scratch_scatter = scattering;
                match sent {
                    Ok(stamped) => {
                        self.scatter_seq[proc as usize] += 1;
                        self.stats.scatterings += 1;
                        self.stats.messages_sent += self.scratch_dsts.len() as u64;
                        match stamped {
                            Ok(ts) => self.record_send(t, h, proc, seq, ts, dsts, false),
                            Err(handle) => {
                                self.hosts[hi]
                                    .reliable_queued
                                    .push_back((handle, proc, seq, dsts));
                            }
                        }
                    }
                    Err(onepipe_proto::host::SendError::Full) => {
                        self.stats.sends_refused_full += 1;
                    }
                    Err(onepipe_proto::host::SendError::Failed(_)) => {
                        self.stats.sends_to_failed += 1;
                    }
                    Err(e) => panic!("the simulator's workload sent an invalid scattering: {e}"),
                }
            }
        }
        self.finish_host_input(t, h, cursor, local, (barrier_before, commit_before));
    }

    /// Hands relay `msg` to host `h`, and follows its §5.2 recovery: settled (its processes
    /// are held to the correct receivers), rejoined (new processes take its workload slots).
    fn host_relay(&mut self, t: SimTime, h: u32, local: Instant, msg: RelayMsg) {
        let hi = h as usize;
        if let RelayMsg::PeerJoined { host, procs, .. } = &msg {
            let procs = procs.iter().map(|p| p.0).collect();
            self.known.insert((h, host.0), procs);
        }
        let before = self.hosts[hi].host.stats().clone();
        let input = Input::Mgmt(Mgmt::Relay(msg));
        self.hosts[hi].host.handle(local, input);
        let after = self.hosts[hi].host.stats();
        let (settled, joined) = (
            after.recovered > before.recovered,
            after.rejoined > before.rejoined,
        );
        if self.hosts[hi].host.own_failure().is_some() {
            if let Some(c) = self.checker.as_mut() {
                c.on_frozen(h);
            }
        }
        // A host that restarted lost its buffer with its processes: they failed for good
        // (Appendix: "If R fails permanently, atomicity is violated"), and are not held to the
        // correct receivers as recovered ones are.
        if settled && t < self.hosts[hi].restart_at {
            if let Some(c) = self.checker.as_mut() {
                c.on_recovered(h);
            }
        }
        if joined {
            let procs: Vec<u32> = self.hosts[hi]
                .host
                .config()
                .procs
                .iter()
                .map(|p| p.0)
                .collect();
            if self.trace_ctrl {
                eprintln!("[{t}] host {h} rejoined as {procs:?}");
            }
            for &p in &procs {
                if let Some(slot) = self.router.host_of.get(p as usize) {
                    slot.store(h, std::sync::atomic::Ordering::Relaxed);
                }
                self.trace.add(0x101E ^ (p as u64) << 32 ^ h as u64);
            }
            self.remapped = true;
            self.stats.rejoined += 1;
            if let Some(c) = self.checker.as_mut() {
                c.on_joined(t, h, &procs);
            }
        }
    }

    /// Hands control message `msg` to host `h` (with a trace of recalls under
    /// `ONEPIPE_SIM_TRACE`).
    fn host_control(&mut self, t: SimTime, h: u32, local: Instant, msg: CtrlMsg) {
        let hi = h as usize;
        let probe: Vec<(ProcId, ProcId)> = match &msg {
            CtrlMsg::Recall { unacked, .. } if self.trace_ctrl => unacked
                .iter()
                .filter(|u| self.router.host_of(u.1) == Some(h))
                .map(|u| (u.0, u.1))
                .collect(),
            _ => Vec::new(),
        };
        let before: Vec<_> = probe
            .iter()
            .map(|&(s, d)| self.hosts[hi].host.reliable_window(s, d))
            .collect();
        let input = Input::Mgmt(Mgmt::Ctrl(msg));
        self.hosts[hi].host.handle(local, input);
        for (i, &(s, d)) in probe.iter().enumerate() {
            eprintln!(
                "[{t}] recall at host {h}: {s:?}->{d:?} window {:?} -> {:?}",
                before[i],
                self.hosts[hi].host.reliable_window(s, d)
            );
        }
    }

    /// Drains a host's outputs after an input, charging its CPU from `cursor` on; `before` are
    /// its (barrier, commit barrier) before the input.
    fn finish_host_input(
        &mut self,
        t: SimTime,
        h: u32,
        mut cursor: SimTime,
        local: Instant,
        before: (Option<Timestamp>, Option<Timestamp>),
    ) {
        let hi = h as usize;
        let (barrier_before, commit_before) = before;
        let released_before = self.hosts[hi].released_before;
        let uplink = self.host_uplinks[hi];
        while let Some(o) = self.hosts[hi].host.poll_output() {
            match o {
                Output::Send { packet, .. } => {
                    cursor += self.cfg.host_send_ns;
                    self.transmit(uplink, packet, cursor);
                }
                Output::Event(HostEvent::Deliver(d)) => {
                    cursor += self.cfg.host_deliver_ns;
                    self.stats.delivered += 1;
                    self.stats.rejoined_delivered_to += (d.dst.0 >= self.procs) as u64;
                    self.stats.rejoined_delivered_from += (d.src.0 >= self.procs) as u64;
                    if cursor <= self.cfg.duration_ns {
                        self.stats.delivered_in_period += 1;
                    }
                    let seq =
                        u64::from_be_bytes(d.payload[..8].try_into().expect("16-byte header"));
                    let issued =
                        u64::from_be_bytes(d.payload[8..16].try_into().expect("16-byte header"));
                    debug_assert!(d.payload.len() >= PAYLOAD_HEADER_LEN);
                    self.latency.record(cursor - issued);
                    if d.reliable {
                        self.stats.delivered_reliable += 1;
                        self.latency_reliable.record(cursor - issued);
                    } else {
                        self.latency_be.record(cursor - issued);
                    }
                    self.reorder_delay.record(local.saturating_since(d.arrived));
                    self.trace.add(cursor);
                    self.trace.add((d.dst.0 as u64) << 32 | d.src.0 as u64);
                    self.trace.add(seq);
                    if let Some(c) = self.checker.as_mut() {
                        // A reliable delivery must not be below a commit barrier the host had
                        // released everything below (a backlog left by `deliver_burst_max` is
                        // below the barrier, not yet released).
                        let before = if d.reliable {
                            released_before
                        } else {
                            barrier_before
                        };
                        c.on_deliver(cursor, h, &d, seq, before);
                    }
                }
                Output::Event(HostEvent::ReliableSent { handle, src, ts }) => {
                    let (queued, proc, seq, dsts) = self.hosts[hi]
                        .reliable_queued
                        .pop_front()
                        .expect("a queued reliable scattering");
                    debug_assert_eq!((queued, proc), (handle, src.0));
                    self.record_send(t, h, proc, seq, ts, dsts, true);
                }
                Output::Event(HostEvent::ReliableAborted { handle, src }) => {
                    let (queued, proc, _, _) = self.hosts[hi]
                        .reliable_queued
                        .pop_front()
                        .expect("a queued reliable scattering");
                    debug_assert_eq!((queued, proc), (handle, src.0));
                    self.stats.sends_to_failed += 1;
                }
                Output::Event(HostEvent::ProcFailed { proc, ts, .. }) => {
                    self.stats.proc_failed_callbacks += 1;
                    self.trace.add(0xFA1D ^ (proc.0 as u64) << 32 ^ h as u64);
                    self.trace.add(ts.raw());
                }
                Output::Event(HostEvent::Recalled { src, ts }) => {
                    self.stats.recalled += 1;
                    self.trace.add(0x2ECA ^ (src.0 as u64) << 32);
                    self.trace.add(ts.raw());
                    if let Some(c) = self.checker.as_mut() {
                        c.on_recalled(src.0, ts);
                    }
                }
                Output::Mgmt { to, msg } => {
                    // A relay is charged as a packet sent; a control message is not.
                    if matches!(msg, Mgmt::Relay(_)) {
                        cursor += self.cfg.host_send_ns;
                    }
                    self.send_mgmt(cursor, to, msg);
                }
                Output::Event(HostEvent::SendFailed {
                    src,
                    dst,
                    ts,
                    reason,
                    ..
                }) => {
                    self.stats.send_failed += 1;
                    self.trace.add(0xFA11 ^ (src.0 as u64) << 32 ^ dst.0 as u64);
                    self.trace.add(ts.raw());
                    if let Some(c) = self.checker.as_mut() {
                        c.on_send_failed(cursor, src.0, dst.0, ts, reason);
                    }
                }
            }
        }
        self.hosts[hi].cpu_free = cursor;
        let now_b = self.hosts[hi].host.barrier().map(|b| b.timestamp());
        let now_c = self.hosts[hi].host.commit_barrier().map(|b| b.timestamp());
        for (k, moved) in [now_b != barrier_before, now_c != commit_before]
            .into_iter()
            .enumerate()
        {
            if moved {
                let st = &mut self.hosts[hi];
                if t > self.first_fault {
                    st.stall_max[k] = st.stall_max[k].max(t - st.last_move[k]);
                }
                st.last_move[k] = t;
            }
        }
        if let Some(c) = self.checker.as_mut() {
            let b = self.hosts[hi].host.barrier().map(|b| b.timestamp());
            c.on_host_barrier(t, h, b);
        }
        self.rearm(h);
    }

    /// A scattering got its timestamp: into the trace and the checker.
    #[allow(clippy::too_many_arguments)]
    fn record_send(
        &mut self,
        t: SimTime,
        h: u32,
        proc: u32,
        seq: u64,
        ts: Timestamp,
        dsts: Dsts,
        reliable: bool,
    ) {
        self.trace.add(t);
        self.trace.add((proc as u64) << 32 | seq);
        self.trace.add(ts.raw());
        if let Some(c) = self.checker.as_mut() {
            c.on_send(t, h, proc, seq, ts, dsts, reliable);
        }
    }

    fn switch_handle(&mut self, t: SimTime, node: u32, input: Input<Packet, Mgmt>) {
        let si = (node - self.topo.hosts()) as usize;
        let local = self.switches[si].clock.local(t);
        self.switches[si].sw.handle(local, input);
        self.drain_switch(t, node);
    }

    /// Carries out a switch's outputs after a mutation, and re-arms its timer.
    fn drain_switch(&mut self, t: SimTime, node: u32) {
        let si = (node - self.topo.hosts()) as usize;
        let base = self.switch_out_base[si] as usize;
        while let Some(o) = self.switches[si].sw.poll_output() {
            match o {
                Output::Send { port, packet } => {
                    let link = self.switch_out_links[base + port.index()];
                    self.transmit(link, packet, t);
                }
                Output::Mgmt { to, msg } => self.send_mgmt(t, to, msg),
            }
        }
        if let Some(c) = self.checker.as_mut() {
            c.on_switch_barrier(t, si, self.switches[si].sw.barrier());
        }
        self.rearm(node);
    }

    /// Sends a control message or a relay on the management network (`ctrl_delay_ns`).
    fn send_mgmt(&mut self, t: SimTime, to: MgmtDest, msg: Mgmt) {
        if self.trace_ctrl {
            eprintln!("[{t}] ctrl -> {to:?}: {msg:?}");
        }
        self.stats.ctrl_messages += 1;
        self.ctrl_in_flight += 1;
        let i = self.ctrl_msgs.insert((to, msg));
        self.queue
            .push(t + self.cfg.ctrl_delay_ns, Ev::Ctrl { msg: i });
    }

    fn on_ctrl(&mut self, t: SimTime, i: u32) {
        let to = self.ctrl_msgs.get(i).0;
        match to {
            MgmtDest::Controller => {
                let (_, msg) = self.ctrl_msgs.take(i);
                self.ctrl_in_flight -= 1;
                if self.controller_down_until(t).is_some() {
                    // Lost, as with a crashed process; the senders' timers send it again.
                    self.stats.ctrl_lost += 1;
                    if self.trace_ctrl {
                        eprintln!("[{t}] lost (controller down): {msg:?}");
                    }
                    return;
                }
                self.controller.handle(Instant(t), Input::Mgmt(msg));
                self.drain_controller(t);
            }
            MgmtDest::Node(n) if n.0 < self.topo.hosts() => {
                let relay = matches!(self.ctrl_msgs.get(i).1, Mgmt::Relay(_));
                if relay && self.hosts[n.index()].crashed(t) {
                    // §5.2: "if controller also cannot deliver the message, R will be announced
                    // as failed" — the management network reports the relay undeliverable.
                    self.stats.relays_undeliverable += 1;
                    if self.controller_down_until(t).is_none() {
                        self.controller.on_unreachable(Instant(t), n);
                        self.drain_controller(t);
                    }
                }
                self.host_input(t, n.0, HostInput::Ctrl(i));
            }
            MgmtDest::Node(n) => {
                let (_, msg) = self.ctrl_msgs.take(i);
                self.ctrl_in_flight -= 1;
                self.switch_handle(t, n.0, Input::Mgmt(msg));
            }
        }
    }

    /// If the controller is down at true time `t` (`--controller-down`), when it recovers.
    fn controller_down_until(&self, t: SimTime) -> Option<SimTime> {
        self.cfg
            .controller_down
            .iter()
            .filter(|&&(from, to)| from <= t && t < to)
            .map(|&(_, to)| to)
            .max()
    }

    /// Carries out what the controller decided (the controller runs on true time: it is one
    /// node, its clock is the reference).
    fn drain_controller(&mut self, t: SimTime) {
        while let Some(o) = self.controller.poll_output() {
            match o {
                Output::Mgmt { to, msg } => {
                    if let Mgmt::Ctrl(CtrlMsg::Resume { round, dead_links }) = &msg {
                        // Routing around the dead links takes effect with the round's Resume
                        // (computed once per round, not once per addressee).
                        if *round > self.rerouted_round {
                            self.rerouted_round = *round;
                            self.reroute(dead_links);
                        }
                    }
                    self.send_mgmt(t, to, msg);
                }
                Output::Event(CtrlEvent::Declared { round, hosts, .. }) => {
                    if self.trace_ctrl {
                        eprintln!("[{t}] declared round {round}: {hosts:?}");
                    }
                    for &(h, ts) in &hosts {
                        self.trace.add(0xDEC1 ^ (h.0 as u64) << 32 ^ round as u64);
                        self.trace.add(ts.raw());
                        if let Some(c) = self.checker.as_mut() {
                            let procs: Vec<u32> =
                                self.controller.procs_of(h).iter().map(|p| p.0).collect();
                            c.on_declared(&procs, ts);
                        }
                    }
                    self.failure_rounds.push(FailureRound {
                        round,
                        hosts: hosts.iter().map(|&(h, ts)| (h.0, ts.raw())).collect(),
                        declared_ns: t,
                        resumed_ns: None,
                    });
                }
                Output::Event(CtrlEvent::Joined {
                    host, dead_links, ..
                }) => {
                    if self.trace_ctrl {
                        eprintln!(
                            "[{t}] controller admitted host {host:?}; removed {dead_links:?}"
                        );
                    }
                    // Routes follow the links taken back.
                    self.reroute(&dead_links);
                }
                Output::Event(CtrlEvent::Resumed { round }) => {
                    match self.failure_rounds.iter_mut().find(|r| r.round == round) {
                        Some(r) => r.resumed_ns = Some(t),
                        None => self.failure_rounds.push(FailureRound {
                            round,
                            declared_ns: t,
                            resumed_ns: Some(t),
                            ..FailureRound::default()
                        }),
                    }
                }
                Output::Event(_) => {}
            }
        }
        let next = self.controller.poll_timeout();
        if next != self.ctrl_armed {
            self.ctrl_armed = next;
            if let Some(at) = next {
                self.queue.push(at.as_nanos().max(t), Ev::CtrlTimer);
            }
        }
    }

    /// §5.2 Resume: packets route around the dead links from now on.
    fn reroute(&mut self, dead_links: &[onepipe_proto::LinkId]) {
        let dead: std::collections::BTreeSet<_> = dead_links.iter().copied().collect();
        let reach = reach_table(&self.topo, &dead);
        *self.router.detour.write().expect("never poisoned") = Some(Detour { reach, dead });
        // Routes remembered for the prefetch are stale now.
        self.route_next.set(None);
        self.route_cur = None;
        self.router
            .detouring
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Prints what keeps the run from draining (with `ONEPIPE_SIM_TRACE`).
    pub fn trace_state(&self) {
        if !self.trace_ctrl {
            return;
        }
        for (i, st) in self.switches.iter().enumerate() {
            let n = NodeId(i as u32 + self.topo.hosts());
            let inputs: Vec<String> = (0..self.topo.node(n).inputs.len())
                .map(|p| {
                    let port = onepipe_proto::PortId(p as u32);
                    format!(
                        "{:?}{}{}",
                        st.sw.commit_register(port).map(|c| c.raw()),
                        if st.sw.link_removed(port) {
                            " dead"
                        } else {
                            ""
                        },
                        if st.sw.commit_input_removed(port) {
                            " removed"
                        } else {
                            ""
                        },
                    )
                })
                .collect();
            eprintln!(
                "  switch {} commit {:?}: {inputs:?}",
                self.topo.node(n).name,
                st.sw.commit_barrier().map(|c| c.raw())
            );
        }
        eprintln!(
            "[{}] live {} ctrl in flight {} open rounds {} failed {:?}",
            self.now,
            self.live_messages,
            self.ctrl_in_flight,
            self.controller.open_rounds(),
            self.controller.failed_hosts().collect::<Vec<_>>()
        );
        for (i, h) in self.hosts.iter().enumerate() {
            eprintln!(
                "  host {i}: gone {} unresolved {} pending {:?} rounds open {} reorder {} partial {} commit {:?} barrier {:?} uplink {}",
                h.gone(self.now),
                h.host.unresolved_sends(),
                h.host.reliable_pending(),
                h.host.failure_rounds_open(),
                h.host.reorder_len(),
                h.host.partial_len(),
                h.host.commit_barrier(),
                h.host.barrier(),
                h.host.uplink_alive(),
            );
            for (src, dst, psn, ts) in h.host.reliable_unacked().into_iter().take(4) {
                let Some(rh) = self.router.host_of(dst).map(|h| &self.hosts[h as usize]) else {
                    continue;
                };
                eprintln!(
                    "    unacked {src:?}->{dst:?} psn {psn:?} ts {ts}: receiver window {:?}, commit {:?}",
                    rh.host.reliable_window(src, dst),
                    rh.host.commit_barrier()
                );
            }
        }
    }

    /// Re-arms a node's timer from its `poll_timeout`, if it changed.
    fn rearm(&mut self, node: u32) {
        let now = self.now;
        let (deadline, armed, clock, generation) = if node < self.topo.hosts() {
            let st = &mut self.hosts[node as usize];
            (
                st.host.poll_timeout(),
                &mut st.armed,
                &mut st.clock,
                &mut st.timer_generation,
            )
        } else {
            let st = &mut self.switches[(node - self.topo.hosts()) as usize];
            (
                st.sw.poll_timeout(),
                &mut st.armed,
                &mut st.clock,
                &mut st.timer_generation,
            )
        };
        if deadline == *armed {
            return;
        }
        *armed = deadline;
        *generation = generation.wrapping_add(1);
        if let Some(d) = deadline {
            let at = clock.true_time_of(d, now);
            let generation = *generation;
            self.queue.push(at, Ev::Timer { node, generation });
        }
    }
}
