//! 1Pipe on the simulation engine ([`crate::engine`]): its hosts, switches and §5.2 controller as
//! a [`Protocol`], with the workload, the failure injection and the checkers.
//!
//! **Placement and costs.** A host is one role ([`Host`], all its processes) on one core: each
//! input costs `host_recv_ns`, each packet it sends `host_send_ns` and each message it delivers
//! `host_deliver_ns`; its timer runs next when it is due (a polling loop checks its timers every
//! turn, so beacons are not starved), and while one long input keeps the core busy past it,
//! the host's NIC sends keep-alive beacons (`World::keepalive`; §7.1 gives the NIC's beacons a
//! core of their own). Switches are roles without a core: a data packet or a NAK
//! is forwarded in place ([`Switch::forward_routed`]), a beacon or a timeout handled at once. On
//! the tree fabric (`--fabric tree`, the `tree` module) the switches are the live runtime's
//! aggregators, each a role without a core that takes every input through `Node`. The
//! controller is off the network, on the management network (`ctrl_delay_ns` per message), and
//! runs on true time.
//!
//! **Faults** beyond the engine's link faults: crashed hosts (`--crash-host`, and
//! `--restart-host` with their state lost), cut links and their heals (§5.2 receiver recovery),
//! route black holes (`--blackhole`), controller outages (`--controller-down`), clock steps.

use crate::check::{Checker, Dsts};
use crate::clock::Clock;
use crate::config::{Service, SimConfig, WorkloadKind, PAYLOAD_HEADER_LEN};
use crate::engine::{
    self, Core, CoreInput, Costs, Engine, Link, Protocol, RoleSt, Seeds, HOST_QUEUE_SEND_MAX,
};
use crate::metrics::{NsHistogram, TraceHash};
use crate::queue::{EventQueue, SimTime};
use bytes::{BufMut, Bytes, BytesMut};
use onepipe_proto::drive;
use onepipe_proto::failure::{
    reach_table, Controller, ControllerConfig, CtrlEvent, CtrlMsg, Mgmt, MgmtDest, RelayMsg,
};
use onepipe_proto::host::{Host, HostConfig, HostEvent, UPLINK};
use onepipe_proto::prefetch::{prefetch, Stage};
use onepipe_proto::switch::{Router, Switch, SwitchConfig, SwitchMode};
use onepipe_proto::topology::{flow_hash, Topology};
use onepipe_proto::wire::{flags, Packet};
use onepipe_proto::{Input, Instant, Node, NodeId, Notice, Output, PortId, ProcId, Timestamp};
use std::collections::VecDeque;
use std::sync::Arc;

/// 1Pipe's own events.
#[derive(Clone, Copy, Debug)]
pub enum OnePipeEv {
    /// A control message (§5.2) reaches its addressee over the management network.
    Ctrl {
        /// Index into the control-message slab.
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
    /// A host leaves (`--leave-host`), or checks again whether its sends are resolved.
    Leave {
        /// The host.
        host: u32,
    },
    /// A crashed host restarts with its state lost (`--restart-host`).
    Restart {
        /// The host.
        host: u32,
    },
    /// A host's NIC sends a keep-alive beacon if its CPU is still busy (`World::keepalive`).
    KeepAlive {
        /// The host.
        host: u32,
    },
    /// An application's unordered message reaches its host (`OnePipe::plain_msgs`).
    AppPlain {
        /// Index into the unordered-message slab.
        msg: u32,
    },
}

/// An event of a 1Pipe run: 12 bytes. A packet in flight stays in one slot of the engine's
/// packet slab from the moment it is sent until it is consumed — a switch rewrites its barrier
/// there and sends it on — and its `Arrive` events carry the slot's index: the queue moves every
/// event a few times (the radix heap's refills), and a small event keeps its buckets in cache.
/// The slot is prefetched two events ahead of its arrival.
pub type Ev = engine::Ev<OnePipeEv>;

const _: () = assert!(std::mem::size_of::<Ev>() == 12);

/// A simulated data center running 1Pipe.
pub type World<Q> = Engine<OnePipe, Q>;

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

impl OnePipe {
    /// The host process `p` runs on now (a process that rejoined runs on its old host under a
    /// new id), if any.
    pub fn host_of(&self, p: ProcId) -> Option<u32> {
        self.router.host_of(p)
    }

    /// The process ids the run may use (rejoined processes get ids past the first ones).
    pub fn proc_ids_max(&self) -> u32 {
        self.router.host_of.len() as u32
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

/// 1Pipe's counters (the network's and the workload's are [`Engine::net`]).
#[derive(Clone, Debug, Default)]
pub struct OnePipeStats {
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
    /// Hosts that left (`--leave-host`): (host, true time it departed, ns).
    pub departed: Vec<(u32, u64)>,
    /// Workload sends skipped by leaving hosts.
    pub sends_while_leaving: u64,
    /// Traffic of rejoined processes (ids above the first incarnations'): messages delivered
    /// to them, and messages from them delivered anywhere.
    pub rejoined_delivered_to: u64,
    /// See `rejoined_delivered_to`.
    pub rejoined_delivered_from: u64,
    /// Keep-alive beacons hosts' NICs sent while their CPUs were busy (`World::keepalive`).
    pub nic_keepalives: u64,
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

/// 1Pipe's own inputs to a host's core.
#[derive(Debug)]
pub enum OnePipeInput {
    /// A control message or a relay (its slot in the control-message slab).
    Ctrl(u32),
    /// Its cut link healed (§5.2 receiver recovery).
    Heal,
    /// An application's unordered message for one of its processes (its slot in the
    /// unordered-message slab).
    AppPlain(u32),
}

/// An application's unordered message in flight (`AppSend::ordered` false): it bypasses the
/// hosts' 1Pipe roles and their reorder buffers (see `World::send_plain`).
#[derive(Debug)]
pub(crate) struct PlainMsg {
    /// The destination's host.
    host: u32,
    src: ProcId,
    dst: ProcId,
    /// The sender's clock at the send.
    ts: Timestamp,
    payload: Bytes,
}

/// What the simulation keeps about a host beside its role (its clock, timer and core are the
/// engine's).
#[derive(Debug)]
struct HostSt {
    host: Host,
    /// Reliable scatterings queued in the host's send buffer, in handle order: (handle, process,
    /// scattering id, destinations), until `HostEvent::ReliableSent` reports their timestamp.
    reliable_queued: VecDeque<(u64, u32, u64, Dsts)>,
    /// True time at which the host crashes (`--crash-host`); `SimTime::MAX` for never. From then
    /// on it sends nothing and everything that reaches it is lost — until `restart_at`
    /// (`--restart-host`), when it comes back with its state lost.
    crash_at: SimTime,
    restart_at: SimTime,
    /// True time at which the host starts to leave (`--leave-host`): it sends nothing new, and
    /// departs (`crash_at` is set then) once its sends are resolved.
    leave_at: SimTime,
    /// True time at which the host's own link (up or down, or its ToR) is cut (`--cut`): alive,
    /// but cut off — until `heal_at` (a healed host cut).
    cut_at: SimTime,
    heal_at: SimTime,
    /// When its [best-effort, commit] barrier last moved, and the longest stall of each that
    /// ended after the first fault (Fig. 10's measure).
    last_move: [SimTime; 2],
    stall_max: [SimTime; 2],
    /// Its NIC's keep-alive beacons are under way (`World::keepalive`).
    keepalive_armed: bool,
    /// The host's released commit barrier before the input being handled.
    released_before: Option<Timestamp>,
    /// The host's released best-effort barrier before the input being handled (below the
    /// barrier while a delivery burst is left for the next inputs).
    be_released_before: Option<Timestamp>,
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
        self.crash_at < SimTime::MAX || self.cut_at < SimTime::MAX || self.leave_at < SimTime::MAX
    }
}

/// 1Pipe's state in a run: its roles (hosts `0..H` are roles `0..H`, switch node `n` is role
/// `n`), the controller and the management network, the workload's bookkeeping, the checkers
/// and the metrics.
pub struct OnePipe {
    hosts: Vec<HostSt>,
    switches: Vec<Switch>,
    /// `--fabric tree`: the aggregators, in place of `switches`.
    tree: Option<tree::TreeFabric>,
    /// Per link, the last barrier it carried out of a switch (the checker's).
    link_barrier: Vec<Option<Timestamp>>,
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
    router: Arc<TopoRouter>,
    /// §5.2: the controller, its messages in flight, and its armed timer.
    controller: Controller,
    ctrl_msgs: crate::slab::Slab<(MgmtDest, Mgmt)>,
    /// Applications' unordered messages (`AppSend::ordered` false: replies that need no place in
    /// the total order) in flight, and those a host's applications asked for during the input
    /// being handled: (host, source process, destination, payload).
    plain_msgs: crate::slab::Slab<PlainMsg>,
    plain_in_flight: u64,
    plain_out: Vec<(u32, u32, ProcId, Bytes)>,
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
    pub stats: OnePipeStats,
    /// `ONEPIPE_SIM_TRACE` set: print every control message and the state at the end of a run
    /// that did not drain (debugging aid; it changes nothing else).
    trace_ctrl: bool,
    /// The route the prefetch of the next event asked its switch for: (switch node, source,
    /// destination, output port). Routing is a pure function of these (until a §5.2 reroute,
    /// which forgets it), so the event's forwarding takes it instead of routing twice.
    route_next: std::cell::Cell<Option<RouteMemo>>,
    /// `route_next` as it was for the event being handled.
    route_cur: Option<RouteMemo>,
    /// `--app`: the processes' applications, in place of the synthetic workload.
    apps: Option<apps::AppRun>,
    /// `--optimistic-delta`: the optimistic deliveries' latency, counts and checker.
    pub opt: Option<crate::optimistic::OptRun>,
}

/// A routing answer remembered for one event: (switch node, source, destination, output).
type RouteMemo = (u32, ProcId, ProcId, PortId);

mod apps;
mod build;
mod control;
mod host;
mod tree;
pub use crate::apps::AppReport;
use build::{
    apply_cuts, build_hosts, build_switches, first_fault, new_checker, new_controller,
    proc_ids_max, schedule_faults, switch_out_links,
};

impl OnePipe {
    /// Whether role `role` is a host (else a switch).
    #[inline]
    fn is_host(&self, role: u32) -> bool {
        (role as usize) < self.hosts.len()
    }
}

impl Protocol for OnePipe {
    type Packet = Packet;
    type Ev = OnePipeEv;
    type Input = OnePipeInput;

    #[inline]
    fn wire_len(p: &Packet) -> usize {
        p.wire_len()
    }

    #[inline]
    fn background(p: &Packet) -> bool {
        matches!(p, Packet::Beacon(_))
    }

    #[inline]
    fn counted(p: &Packet) -> bool {
        !matches!(p, Packet::Beacon(_))
    }

    #[inline]
    fn lossy(&self, cfg: &SimConfig, p: &Packet) -> bool {
        cfg.faults.loss_kind.is_none_or(|k| k.matches(p))
    }

    fn procs(&self) -> u32 {
        self.procs
    }

    fn senders(&self) -> u32 {
        if self.apps.is_some() {
            0
        } else {
            self.procs
        }
    }

    #[inline]
    fn sender(&self, proc: u32) -> u32 {
        proc / (self.procs / self.hosts.len() as u32)
    }

    #[inline]
    fn poll_timeout(&self, role: u32) -> Option<Instant> {
        match self.hosts.get(role as usize) {
            Some(st) => match &self.apps {
                None => st.host.poll_timeout(),
                Some(a) => {
                    let app = a.poll_timeout(&st.host.config().procs);
                    st.host.poll_timeout().into_iter().chain(app).min()
                }
            },
            None => match &self.tree {
                Some(f) => f.aggs[role as usize - self.hosts.len()].poll_timeout(),
                None => self.switches[role as usize - self.hosts.len()].poll_timeout(),
            },
        }
    }

    #[inline]
    fn arrive<Q: EventQueue<Ev>>(e: &mut World<Q>, t: SimTime, link: u32, slot: u32) {
        e.on_arrive(t, link, slot);
    }

    #[inline]
    fn process<Q: EventQueue<Ev>>(
        e: &mut World<Q>,
        t: SimTime,
        role: u32,
        input: CoreInput<OnePipeInput>,
    ) {
        if e.proto.is_host(role) {
            e.host_process(t, role, input);
        } else {
            debug_assert!(matches!(input, CoreInput::Timeout));
            e.switch_handle(t, role, Input::Timeout);
        }
    }

    fn event<Q: EventQueue<Ev>>(e: &mut World<Q>, t: SimTime, ev: OnePipeEv) {
        match ev {
            OnePipeEv::Ctrl { msg } => e.on_ctrl(t, msg),
            OnePipeEv::CtrlTimer => {
                if let Some(up) = e.controller_down_until(t) {
                    // A crashed controller runs nothing; its timer fires on recovery.
                    e.queue.push(up, Ev::Proto(OnePipeEv::CtrlTimer));
                    return;
                }
                e.proto.ctrl_armed = None;
                e.proto.controller.handle(Instant(t), Input::Timeout);
                e.drain_controller(t);
            }
            OnePipeEv::Heal { host } => e.input(t, host, CoreInput::Proto(OnePipeInput::Heal)),
            OnePipeEv::AppPlain { msg } => {
                let host = e.proto.plain_msgs.get(msg).host;
                e.input(t, host, CoreInput::Proto(OnePipeInput::AppPlain(msg)));
            }
            OnePipeEv::Restart { host } => e.restart(t, host),
            OnePipeEv::KeepAlive { host } => e.keepalive(t, host),
            OnePipeEv::Leave { host } => e.leave(t, host),
            OnePipeEv::CtrlRecover => {
                if e.controller_down_until(t).is_none() {
                    e.proto
                        .controller
                        .handle(Instant(t), Input::Notice(Notice::Recovered));
                    e.drain_controller(t);
                }
            }
        }
    }

    fn timer_while_busy<Q: EventQueue<Ev>>(e: &mut World<Q>, t: SimTime, role: u32) {
        let Some(hs) = e.proto.hosts.get(role as usize) else {
            return;
        };
        if !hs.keepalive_armed {
            e.keepalive(t, role);
        }
    }

    fn packet_while_busy<Q: EventQueue<Ev>>(e: &mut World<Q>, _t: SimTime, role: u32) {
        if let Some(hs) = e.proto.hosts.get_mut(role as usize) {
            hs.host.uplink_heard();
        }
    }

    #[inline]
    fn down(&self, role: u32, t: SimTime) -> bool {
        self.hosts.get(role as usize).is_some_and(|h| h.crashed(t))
    }

    fn on_down<Q: EventQueue<Ev>>(e: &mut World<Q>, t: SimTime, role: u32) {
        if let Some(c) = e.proto.checker.as_mut() {
            c.on_crash(t, role);
        }
    }

    fn discard<Q: EventQueue<Ev>>(e: &mut World<Q>, input: OnePipeInput) {
        match input {
            OnePipeInput::Ctrl(m) => {
                e.proto.ctrl_msgs.take(m);
                e.proto.ctrl_in_flight -= 1;
            }
            OnePipeInput::AppPlain(m) => {
                e.proto.plain_msgs.take(m);
                e.proto.plain_in_flight -= 1;
            }
            OnePipeInput::Heal => {}
        }
    }

    #[inline(always)]
    fn before_event<Q: EventQueue<Ev>>(e: &mut World<Q>) {
        e.proto.route_cur = e.proto.route_next.take();
        e.prefetch_ahead();
    }

    #[inline]
    fn leaving_switch(&mut self, t: SimTime, link: u32, p: &Packet) {
        let barrier = match p {
            Packet::Beacon(b) => Some(b.barrier),
            Packet::Data(d) => d.header.barrier(),
            Packet::Nak(_) | Packet::Ack(_) | Packet::AckBatch(_) => None,
        };
        if let Some(b) = barrier {
            if let (Some(last), Some(c)) = (self.link_barrier[link as usize], self.checker.as_mut())
            {
                c.on_link_barrier(t, link, last, b);
            }
            self.link_barrier[link as usize] = Some(b);
        }
    }

    fn congested<Q: EventQueue<Ev>>(e: &mut World<Q>, slot: u32) {
        if let Packet::Data(d) = e.packets.get_mut(slot) {
            if d.header.flags & flags::ECN == 0 {
                d.header.flags |= flags::ECN;
                e.proto.stats.ecn_marked += 1;
            }
        }
    }
}

impl<Q: EventQueue<Ev>> World<Q> {
    /// Builds the network of `cfg` (which must have passed `validate`): the topology and its
    /// router, the hosts, the switches, the links and their faults, the controller, then the
    /// first events.
    pub fn new(cfg: SimConfig, queue: Q) -> Result<World<Q>, String> {
        let seeds = Seeds::new(cfg.seed);
        let tree = tree::TreeBuilt::of(&cfg, seeds.clock)?;
        let topo = match &tree {
            Some(t) => t.topology(),
            None => Arc::new(cfg.net.topology.build()?),
        };
        let pph = cfg.net.procs_per_host;
        let procs = topo.hosts() * pph;
        let proc_ids_max = proc_ids_max(&cfg, procs)?;
        let topo_router = Arc::new(TopoRouter::new(&topo, pph, proc_ids_max, seeds.route));
        let (mut hosts, mut roles, cpus) = build_hosts(&cfg, &topo, seeds.clock, proc_ids_max);
        let (switches, switch_roles) = match tree {
            Some(_) => (Vec::new(), Vec::new()),
            None => build_switches(&cfg, &topo, seeds.clock, topo_router.clone()),
        };
        roles.extend(switch_roles);
        let mut links = engine::build_links(&cfg, &topo);
        let tree = tree.map(|t| t.wire(&mut roles, &mut links));
        let heals = apply_cuts(&cfg, &topo, &mut links)?;
        let restarts = schedule_faults(&cfg, &topo, &mut hosts, &links);
        let host_uplinks = (0..topo.hosts()).map(|h| topo.uplink(h).0).collect();
        let (switch_out_base, switch_out_links) = switch_out_links(&topo);
        let aggs = tree.as_ref().map_or(0, |f| f.aggs.len());
        let checker = new_checker(&cfg, procs, &hosts, switches.len() + aggs);
        let controller = new_controller(&cfg, &topo, proc_ids_max);
        let proto = OnePipe {
            hosts,
            switches,
            tree,
            link_barrier: vec![None; links.len()],
            scatter_seq: vec![0; proc_ids_max as usize],
            host_uplinks,
            switch_out_base,
            switch_out_links,
            scratch_scatter: Vec::new(),
            scratch_dsts: Vec::new(),
            procs,
            remapped: false,
            known: std::collections::BTreeMap::new(),
            router: topo_router,
            controller,
            ctrl_msgs: crate::slab::Slab::default(),
            plain_msgs: crate::slab::Slab::default(),
            plain_in_flight: 0,
            plain_out: Vec::new(),
            ctrl_in_flight: 0,
            ctrl_armed: None,
            failure_rounds: Vec::new(),
            rerouted_round: 0,
            first_fault: first_fault(&cfg),
            checker,
            latency: NsHistogram::default(),
            latency_be: NsHistogram::default(),
            latency_reliable: NsHistogram::default(),
            reorder_delay: NsHistogram::default(),
            trace: TraceHash::default(),
            stats: OnePipeStats::default(),
            trace_ctrl: std::env::var_os("ONEPIPE_SIM_TRACE").is_some(),
            route_next: std::cell::Cell::new(None),
            route_cur: None,
            apps: cfg
                .workload
                .app
                .as_ref()
                .map(|_| apps::AppRun::new(&cfg, procs, topo.hosts())),
            opt: (cfg.protocol.optimistic_delta_ns > 0)
                .then(|| crate::optimistic::OptRun::new(procs, cfg.check)),
        };
        let mut w = Engine::assemble(cfg, topo, queue, seeds, proto, roles, cpus, links);
        w.schedule_recoveries(heals, restarts);
        Ok(w)
    }

    /// After every role's timer and every process's first send: the controller's recoveries,
    /// the `heals` and the `restarts` (host, true time), then the leaves.
    fn schedule_recoveries(&mut self, heals: Vec<(u32, SimTime)>, restarts: Vec<(u32, SimTime)>) {
        for i in 0..self.cfg.faults.controller_down.len() {
            let to = self.cfg.faults.controller_down[i].1;
            self.queue.push(to, Ev::Proto(OnePipeEv::CtrlRecover));
        }
        for (host, at) in heals {
            self.queue.push(at, Ev::Proto(OnePipeEv::Heal { host }));
        }
        for (host, at) in restarts {
            self.queue.push(at, Ev::Proto(OnePipeEv::Restart { host }));
        }
        for i in 0..self.cfg.faults.leaves.len() {
            let (host, at) = self.cfg.faults.leaves[i];
            self.queue.push(at, Ev::Proto(OnePipeEv::Leave { host }));
        }
    }

    /// The process that workload slot `slot` sends as now: the slot's process, or — once its
    /// host rejoined (§5.2) — the new process that took its place.
    fn slot_proc(&self, slot: u32) -> u32 {
        let pph = self.cfg.net.procs_per_host;
        self.proto.hosts[(slot / pph) as usize].host.config().procs[(slot % pph) as usize].0
    }

    /// The host endpoints.
    pub fn hosts(&self) -> impl Iterator<Item = &Host> {
        self.proto.hosts.iter().map(|h| &h.host)
    }

    /// Fig. 10's measure: the longest barrier stall that ended after the first fault, averaged
    /// over the hosts that stayed correct: (best-effort, commit) in ns; `None` without faults.
    pub fn stall_ns(&self) -> Option<(f64, f64)> {
        if self.proto.first_fault == SimTime::MAX {
            return None;
        }
        let failed: Vec<u32> = self.proto.controller.failed_hosts().map(|h| h.0).collect();
        let correct: Vec<&HostSt> = self
            .proto
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
        self.proto.switches.iter()
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
            Ev::Timer { role, .. } => (*role, None, u32::MAX),
            // Host h's core is core h (`build_hosts`).
            Ev::CpuWake { cpu } => (*cpu, None, u32::MAX),
            _ => return,
        };
        if node < self.topo.hosts() {
            self.prefetch_host(stage, ev, node, packet);
        } else if self.proto.tree.is_none() {
            self.prefetch_switch(stage, node, packet, link);
        }
    }

    /// The prefetch stage `stage` of event `ev` at host `node`, `packet` the one it carries (from
    /// the second stage on).
    #[inline(always)]
    fn prefetch_host(&self, stage: Stage, ev: &Ev, node: u32, packet: Option<&Packet>) {
        let st = &self.proto.hosts[node as usize];
        let role = &self.roles[node as usize];
        let pending = self.cpus.get(node as usize).map(|c| &c.pending);
        let front = pending.and_then(|p| p.front()).map(|(_, i)| i);
        let packet = match (ev, stage) {
            // A CPU wake runs the host's oldest queued input.
            (Ev::CpuWake { .. }, Stage::Records) => {
                if let Some(input) = front {
                    prefetch(input);
                    if let CoreInput::Packet(slot) = input {
                        self.packets.prefetch(*slot);
                    }
                }
                None
            }
            (Ev::CpuWake { .. }, _) => match front {
                Some(CoreInput::Packet(slot)) if stage != Stage::Fields => {
                    Some(self.packets.get(*slot))
                }
                _ => None,
            },
            _ => packet,
        };
        if stage == Stage::Fields {
            prefetch(st);
            prefetch(role);
            if let Some(p) = pending {
                prefetch(p);
            }
            prefetch(&st.crash_at);
            prefetch(&st.last_move);
            prefetch(&st.released_before);
        }
        st.host.prefetch(stage, packet);
    }

    /// The prefetch stage `stage` of an event at switch `node`, `packet` the one it carries (from
    /// the second stage on) on `link` (`u32::MAX`: none).
    #[inline(always)]
    fn prefetch_switch(&self, stage: Stage, node: u32, packet: Option<&Packet>, link: u32) {
        let si = (node - self.topo.hosts()) as usize;
        let sw = &self.proto.switches[si];
        match (stage, packet) {
            (Stage::Fields, _) => {
                prefetch(sw);
                prefetch(&self.roles[node as usize]);
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
                    self.proto.route_next.set(Some((node, src, dst, out)));
                    sw.prefetch_output(out);
                    let base = self.proto.switch_out_base[si] as usize;
                    if let Some(&l) = self.proto.switch_out_links.get(base + out.index()) {
                        prefetch(&self.links[l as usize]);
                    }
                }
            }
            _ => {}
        }
    }

    /// True when nothing but beacons and timers is left: no data or NAK on a link or waiting for
    /// a host CPU, no send waiting, nothing buffered for reordering or reassembly. A run drains
    /// until then (or its drain limit), so undelivered messages are losses, not stragglers.
    pub fn quiescent(&self) -> bool {
        // Packets in flight to a crashed host count until they arrive and are dropped.
        let p = &self.proto;
        let pph = self.cfg.net.procs_per_host;
        // A process is dead if its host is, or was declared failed, or rejoined since under new
        // process ids (the application ran in the first incarnation only).
        let dead = |proc: u32| {
            let h = (proc / pph) as usize;
            p.hosts.get(h).is_some_and(|x| {
                x.gone(self.now) || !x.host.config().procs.iter().any(|q| q.0 == proc)
            }) || p.controller.is_failed(NodeId(h as u32))
        };
        self.live == 0
            && p.apps.as_ref().is_none_or(|a| a.idle_except(dead))
            && p.ctrl_in_flight == 0
            && p.plain_in_flight == 0
            && p.controller.open_rounds() == 0
            && p.controller.poll_timeout().is_none()
            && p.hosts.iter().enumerate().all(|(i, h)| {
                h.gone(self.now)
                    || p.controller.is_failed(NodeId(i as u32))
                    || h.host.reorder_len() == 0
                        && h.host.partial_len() == 0
                        && h.host.unresolved_sends() == 0
                        && h.host.failure_rounds_open() == 0
                        // A packet waiting for the CPU is in `live` if it is data, an ACK or
                        // a NAK; a beacon is background there as it is on a link.
                        && self.cpus[i]
                            .pending
                            .iter()
                            .all(|(_, i)| matches!(i, CoreInput::Timeout | CoreInput::Packet(_)))
            })
    }

    /// A packet reached the end of `link`: a host takes it in on its core; a switch handles a
    /// beacon, and forwards data and NAKs in place.
    #[inline]
    fn on_arrive(&mut self, t: SimTime, link: u32, slot: u32) {
        let (to, port) = {
            let l = &self.links[link as usize];
            (l.to, l.to_port)
        };
        if to < self.topo.hosts() {
            debug_assert_eq!(port, UPLINK.0);
            self.input(t, to, CoreInput::Packet(slot));
            return;
        }
        if self.proto.tree.is_some() {
            self.tree_arrive(t, to, port, slot);
            return;
        }
        let si = (to - self.topo.hosts()) as usize;
        if matches!(self.packets.get(slot), Packet::Beacon(_)) {
            let packet = self.take_packet(slot);
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
            .proto
            .route_cur
            .filter(|r| r.0 == to)
            .map(|(_, src, dst, out)| (src, dst, out));
        let packet = self.packets.get_mut(slot);
        match self.proto.switches[si].forward_routed(PortId(port), packet, routed) {
            Some(out) => {
                let base = self.proto.switch_out_base[si] as usize;
                let out_link = self.proto.switch_out_links[base + out.index()];
                if !self.cfg.faults.blackholes.is_empty()
                    && self.blackholed(t, link, self.packets.get(slot))
                {
                    self.blackhole(t, out_link, to, slot);
                    return;
                }
                self.put_on_link(out_link, slot, t);
            }
            None => self.drop_slot(slot),
        }
        if let Some(c) = self.proto.checker.as_mut() {
            c.on_switch_barrier(t, si, self.proto.switches[si].barrier());
        }
    }

    /// `--blackhole`: whether the switch that forwarded `packet`, which came in on `link`,
    /// black-holes it. Only the first-hop switch of the source host does.
    fn blackholed(&self, t: SimTime, link: u32, packet: &Packet) -> bool {
        let Some((src, dst)) = packet.endpoints() else {
            return false;
        };
        // Hosts by the router's table: a rejoined host's new processes are its own.
        let host_of = |p: ProcId| self.proto.router.host_of(p).unwrap_or(u32::MAX);
        let (sh, dh) = (host_of(src), host_of(dst));
        self.proto.host_uplinks.get(sh as usize) == Some(&link)
            && self
                .cfg
                .faults
                .blackholes
                .iter()
                .any(|&(a, b, at)| a == sh && b == dh && t >= at)
    }

    /// Drops the black-holed packet in `slot` at switch `node`: a data packet carrying barriers
    /// goes on as a beacon with them on `out_link`, so no link falls silent and the routing
    /// notices nothing.
    fn blackhole(&mut self, t: SimTime, out_link: u32, node: u32, slot: u32) {
        self.proto.stats.packets_blackholed += 1;
        let beacon = match self.take_packet(slot) {
            Packet::Data(d) => match (d.header.barrier(), d.header.commit()) {
                (Some(barrier), Some(commit)) => Some(onepipe_proto::wire::Beacon {
                    from: NodeId(node),
                    barrier,
                    commit,
                    demand: false,
                }),
                _ => None,
            },
            _ => None,
        };
        if let Some(b) = beacon {
            self.transmit(out_link, Packet::Beacon(b), t);
        }
    }

    /// Host `h`'s NIC keeps its uplink alive at `t` while its CPU is busy: one keep-alive beacon
    /// ([`Host::keepalive_beacon`]), and the next a beacon interval later, as long as the CPU
    /// stays busy. §7.1's testbed gives each NIC's beacons a core of their own; here the
    /// host's one core also runs its applications, and a hot server delivering thousands of
    /// messages that share one timestamp (a burst cannot be cut inside a timestamp) was busy
    /// past its link timeout and declared failed (Fig. 14 c, YCSB, 512 processes: 89 hosts).
    /// The keep-alive tells the switch nothing new, so barriers are unchanged; the host's own
    /// beacon still goes when its timeout runs.
    fn keepalive(&mut self, t: SimTime, h: u32) {
        let hi = h as usize;
        let busy = self.core(h).free > t;
        if !busy || self.proto.down(h, t) {
            self.proto.hosts[hi].keepalive_armed = false;
            return;
        }
        if let Some(b) = self.proto.hosts[hi].host.keepalive_beacon() {
            self.proto.stats.nic_keepalives += 1;
            let uplink = self.proto.host_uplinks[hi];
            self.transmit(uplink, Packet::Beacon(b), t);
        }
        self.proto.hosts[hi].keepalive_armed = true;
        let next = t + self.cfg.net.beacon_interval_ns;
        self.queue
            .push(next, Ev::Proto(OnePipeEv::KeepAlive { host: h }));
    }

    /// `--restart-host`: the crashed host comes back with its state lost (its processes as
    /// before, failed; `Host::restarted`), and asks the controller to recover.
    fn restart(&mut self, t: SimTime, h: u32) {
        let local = self.local(h, t);
        let st = &mut self.proto.hosts[h as usize];
        let cfg = st.host.config().clone();
        let stats = st.host.stats().clone();
        // Counters survive (the report sums them); nothing else does.
        st.host = Host::restarted(cfg, local).with_stats(stats);
        st.reliable_queued.clear();
        // A host that had left sends again as its new processes.
        st.leave_at = SimTime::MAX;
        self.reset_role(t, h);
        self.proto.stats.restarts += 1;
        if self.proto.trace_ctrl {
            eprintln!("[{t}] host {h} restarts, its state lost");
        }
        self.proto.trace.add(0x5EB0 ^ (h as u64) << 32);
        if let Some(c) = self.proto.checker.as_mut() {
            c.on_restarted(h);
        }
        self.finish_host_input(t, h, t, local, (None, None));
    }

    /// Host `h` leaves (issue 35): once its sends are resolved (or `LEAVE_FLUSH_MAX_NS` after
    /// it started to leave) it stops, as a crash would, and tells the controller
    /// (`CtrlMsg::Departed`, with its timestamp when everything it sent was resolved).
    fn leave(&mut self, t: SimTime, h: u32) {
        let hi = h as usize;
        let st = &self.proto.hosts[hi];
        if st.crash_at <= t {
            return;
        }
        let flushed = st.host.unresolved_sends() == 0;
        if !flushed
            && t < st
                .leave_at
                .saturating_add(crate::config::LEAVE_FLUSH_MAX_NS)
        {
            self.queue
                .push(t + 10_000, Ev::Proto(OnePipeEv::Leave { host: h }));
            return;
        }
        let local = self.local(h, t);
        let st = &mut self.proto.hosts[hi];
        let last = flushed.then(|| st.host.timestamp(local));
        st.crash_at = t;
        self.proto.stats.departed.push((h, t));
        if self.proto.trace_ctrl {
            eprintln!("[{t}] host {h} leaves (flushed: {flushed})");
        }
        self.proto.trace.add(0x1EA5 ^ (h as u64) << 32);
        if let Some(c) = self.proto.checker.as_mut() {
            c.on_crash(t, h);
        }
        let msg = CtrlMsg::Departed {
            host: NodeId(h),
            last,
        };
        self.send_mgmt(t, MgmtDest::Controller, Mgmt::Ctrl(msg));
    }

    fn switch_handle(&mut self, t: SimTime, node: u32, input: Input<Packet, Mgmt>) {
        if self.proto.tree.is_some() {
            self.agg_handle(t, node, input);
            return;
        }
        let si = (node - self.topo.hosts()) as usize;
        let local = self.local(node, t);
        self.proto.switches[si].handle(local, input);
        self.drain_switch(t, node);
    }

    /// Carries out a switch's outputs after a mutation, and re-arms its timer.
    fn drain_switch(&mut self, t: SimTime, node: u32) {
        let si = (node - self.topo.hosts()) as usize;
        let base = self.proto.switch_out_base[si] as usize;
        drive::drain_in(
            self,
            |w| &mut w.proto.switches[si],
            |w, o| match o {
                Output::Send { port, packet } => {
                    let link = w.proto.switch_out_links[base + port.index()];
                    w.transmit(link, packet, t);
                }
                Output::Mgmt { to, msg } => w.send_mgmt(t, to, msg),
            },
        );
        if let Some(c) = self.proto.checker.as_mut() {
            c.on_switch_barrier(t, si, self.proto.switches[si].barrier());
        }
        self.rearm(node);
    }

    /// Prints what keeps the run from draining (with `ONEPIPE_SIM_TRACE`).
    pub fn trace_state(&self) {
        if !self.proto.trace_ctrl {
            return;
        }
        if let Some(a) = &self.proto.apps {
            eprintln!("  apps: {}", a.describe());
        }
        for (i, st) in self.proto.switches.iter().enumerate() {
            let n = NodeId(i as u32 + self.topo.hosts());
            let inputs: Vec<String> = (0..self.topo.node(n).inputs.len())
                .map(|p| {
                    let port = onepipe_proto::PortId(p as u32);
                    format!(
                        "{:?}{}{}",
                        st.commit_register(port).map(|c| c.raw()),
                        if st.link_removed(port) { " dead" } else { "" },
                        if st.commit_input_removed(port) {
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
                st.commit_barrier().map(|c| c.raw())
            );
        }
        eprintln!(
            "[{}] live {} ctrl in flight {} open rounds {} failed {:?}",
            self.now,
            self.live,
            self.proto.ctrl_in_flight,
            self.proto.controller.open_rounds(),
            self.proto.controller.failed_hosts().collect::<Vec<_>>()
        );
        for (i, h) in self.proto.hosts.iter().enumerate() {
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
                let Some(rh) = self
                    .proto
                    .router
                    .host_of(dst)
                    .map(|h| &self.proto.hosts[h as usize])
                else {
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
}
