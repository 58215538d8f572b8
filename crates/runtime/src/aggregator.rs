//! The aggregator daemon: one node of the cluster's aggregator tree, as a host representative
//! (§6.2.3) that also forwards the data.
//!
//! A tree of physical aggregators becomes an acyclic routing graph the way a multi-rooted tree
//! does (§3.1, Fig. 3; `onepipe_proto::topology`): every aggregator below the root is split into
//! an *up* half, which aggregates what climbs (its processes' uplinks and its children's up
//! halves), and a *down* half, which aggregates what descends (its parent's down half, and its
//! own up half through a loopback link for traffic that turns here); the root is one node. Each
//! half is an unchanged [`Switch`] in [`onepipe_proto::switch::SwitchMode::Host`]: barriers
//! come in beacons, the minimum over inputs goes out in beacons every interval, phased by the
//! half's depth so that one wave of beacons climbs and descends per interval (§4.2).
//!
//! [`Aggregator`] is that pair as one role with one port per *peer* (an attached process, a
//! child aggregator, the parent), so one UDP socket serves it: datagrams from a peer arrive on
//! its port, whichever half they are for, and the loopback link never leaves the process.
//! [`AggregatorDaemon`] runs it: it joins the controller, binds, waits for the cluster's
//! addresses and drives the role with a [`Driver`] until stopped.
//!
//! Failure handling: an input silent for the cluster's link timeout is removed from the
//! best-effort minimum at once (§4.2) and reported to the controller as a §5.2 Detect: each half
//! knows its inputs as the routing graph's links ([`crate::failure::LiveTopology`]) and sends
//! its own `LinkDown` with the last commit barrier the input carried (an [`Output::Mgmt`], which
//! the daemon carries to the controller). The controller's messages go to both halves
//! ([`Input::Mgmt`]); on Resume the dead inputs stop bounding the commit barrier.
//!
//! Logs go through `tracing` (target `onepipe_runtime::aggregator`), never per packet: `warn`
//! for an input reported down and a lost controller, `info` for re-registering after a
//! failover, `debug` for being ready.
//!
//! What it is not: a router of its own — data packets follow the tree by destination process
//! ([`ProcessRouter`]), with no detour around a dead aggregator (a tree has none).

use crate::auth::{KeyInbox, LinkAuth};
use crate::clock::Clock;
use crate::cluster::Cluster;
use crate::config::DriverConfig;
use crate::control::{ControlClient, FromController, JoinAs, JoinError, Member, ToController};
use crate::driver::Driver;
use crate::failure::{AggHalf, LiveTopology, WireCtrl, WireRelay};
use crate::keys::{aggregator_links, member_ix};
use crate::ports::PortTable;
use crate::roles::ProcessRouter;
use crate::stats::DriverStats;
use crate::sys::bind_udp;
use crate::tls::Credentials;
use onepipe_proto::failure::{CtrlMsg, Mgmt, MgmtDest};
use onepipe_proto::ids::{LinkId, NodeId, PortId, ProcId};
use onepipe_proto::node::{Input, Node, Output};
use onepipe_proto::switch::{Switch, SwitchConfig, SwitchStats};
use onepipe_proto::time::{Instant, Timestamp};
use onepipe_proto::wire::Packet;
use std::collections::{BTreeMap, VecDeque};
use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::TryRecvError;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;
use tracing::{debug, info, warn};

/// One neighbour of an aggregator: the far end of one of its ports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Peer {
    /// A process attached here.
    Process(u32),
    /// A child aggregator.
    Child(String),
    /// The parent aggregator.
    Parent(String),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Half {
    Up,
    Down,
}

/// Where an output port of a half leads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Out {
    /// A peer's port of the aggregator.
    Peer(PortId),
    /// The up half's loopback link into the down half's input 0.
    Loopback,
}

/// The up and down halves of one aggregator as one role. See the module docs.
#[derive(Debug)]
pub struct Aggregator {
    name: String,
    peers: Vec<Peer>,
    /// The up half, or the root's only node.
    up: Switch,
    down: Option<Switch>,
    /// Input port of the aggregator → (half, that half's input port).
    inputs: Vec<(Half, PortId)>,
    up_outs: Vec<Out>,
    down_outs: Vec<Out>,
    outputs: VecDeque<Output<Packet, Infallible, Mgmt>>,
    /// Packets on a port with no peer.
    dropped: u64,
    /// Test fault: (A, B) pairs whose packets from A to B this aggregator black-holes
    /// ([`Aggregator::blackhole`]).
    blackholes: Vec<(ProcId, ProcId)>,
    /// Packets black-holed.
    blackholed: u64,
    /// Test fault: processes whose uplink into this aggregator is cut ([`Aggregator::cut`]).
    cuts: Vec<ProcId>,
    /// Packets dropped at a cut uplink.
    cut_dropped: u64,
    /// The halves' routing tables, for [`Aggregator::rejoined`]; the first is the down
    /// half's: each process below, to the port that leads to it.
    routers: Vec<Arc<ProcessRouter>>,
    /// Process ids of the cluster file (ids above are rejoined processes', §5.2).
    file_procs: u32,
    /// Packets dropped because they named a sender that does not live behind their port.
    spoofed: u64,
}

impl Aggregator {
    /// The aggregator called `name` of `cluster`, at local time `now`.
    ///
    /// # Errors
    /// `name` is not an aggregator of the cluster.
    pub fn new(cluster: &Cluster, name: &str, now: Instant) -> Result<Aggregator, String> {
        let index = cluster
            .aggregator_index(name)
            .ok_or_else(|| format!("no aggregator '{name}' in the cluster"))?;
        let spec = &cluster.aggregators[index];
        let roles = cluster.roles();
        let procs = cluster.attached(name);
        let children: Vec<String> = cluster
            .children(name)
            .iter()
            .map(|c| c.name.clone())
            .collect();
        let mut peers: Vec<Peer> = procs.iter().map(|&p| Peer::Process(p)).collect();
        peers.extend(children.iter().cloned().map(Peer::Child));
        let below = peers.len();
        // Where each process is reached going down: its own port, or its child's.
        let ids = cluster.proc_ids_max();
        let mut down_router = ProcessRouter::with_ids(ids);
        for (i, &p) in procs.iter().enumerate() {
            down_router.set(ProcId(p), PortId(i as u32));
        }
        for (j, c) in children.iter().enumerate() {
            for p in cluster.subtree_procs(c) {
                down_router.set(ProcId(p), PortId((procs.len() + j) as u32));
            }
        }
        let n = cluster.procs();
        let node = |half: u32| NodeId(n + 2 * index as u32 + half);
        // §5.2: each half's inputs as the controller's graph names them (none for a shape the
        // graph cannot express: then nothing is reported, and there is no procedure either).
        let live = LiveTopology::of(cluster).ok();
        let graph = |mut cfg: SwitchConfig, half: AggHalf| {
            let links: Option<Vec<LinkId>> = (0..cfg.inputs as u32)
                .map(|p| live.as_ref()?.input_link(index, half, PortId(p)))
                .collect();
            if let Some(links) = links {
                cfg.graph_node = links.first().and_then(|&l| live.as_ref()?.link_head(l));
                cfg.input_links = links;
            }
            cfg
        };
        let down_router = Arc::new(down_router);
        let mut routers = vec![down_router.clone()];
        let (up, down, inputs, up_outs, down_outs) = match &spec.parent {
            None => {
                let cfg = roles.switch_config(node(0), cluster.up_depth(name), below, below);
                let up = Switch::new(graph(cfg, AggHalf::Up), Some(down_router), now);
                let ports: Vec<PortId> = (0..below as u32).map(PortId).collect();
                let inputs = ports.iter().map(|&p| (Half::Up, p)).collect();
                (
                    up,
                    None,
                    inputs,
                    ports.into_iter().map(Out::Peer).collect(),
                    Vec::new(),
                )
            }
            Some(parent) => {
                peers.push(Peer::Parent(parent.clone()));
                // Up: inputs are the peers below; output 0 turns here (loopback), 1 climbs.
                let mut up_router = ProcessRouter::with_ids(ids);
                let mine = cluster.subtree_procs(name);
                for p in 0..n {
                    let port = if mine.binary_search(&p).is_ok() { 0 } else { 1 };
                    up_router.set(ProcId(p), PortId(port));
                }
                let up_cfg = roles.switch_config(node(0), cluster.up_depth(name), below, 2);
                let up_cfg = graph(up_cfg, AggHalf::Up);
                let up_router = Arc::new(up_router);
                routers.push(up_router.clone());
                let up = Switch::new(up_cfg, Some(up_router), now);
                // Down: input 0 is the loopback, 1 the parent; outputs are the peers below.
                let down_cfg = roles.switch_config(node(1), cluster.down_depth(name), 2, below);
                let down_cfg = graph(down_cfg, AggHalf::Down);
                let down = Switch::new(down_cfg, Some(down_router), now);
                let mut inputs: Vec<(Half, PortId)> =
                    (0..below as u32).map(|p| (Half::Up, PortId(p))).collect();
                inputs.push((Half::Down, PortId(1)));
                let up_outs = vec![Out::Loopback, Out::Peer(PortId(below as u32))];
                let down_outs = (0..below as u32).map(|p| Out::Peer(PortId(p))).collect();
                (up, Some(down), inputs, up_outs, down_outs)
            }
        };
        Ok(Aggregator {
            name: name.to_string(),
            peers,
            up,
            down,
            inputs,
            up_outs,
            down_outs,
            outputs: VecDeque::new(),
            dropped: 0,
            blackholes: Vec::new(),
            blackholed: 0,
            cuts: Vec::new(),
            cut_dropped: 0,
            routers,
            file_procs: n,
            spoofed: 0,
        })
    }

    /// Reverse-path filtering (BCP 38's ingress filtering; strict uRPF, which is exact on a
    /// tree): a packet that names its sending process — a data packet's `src`, an ACK's or
    /// NAK's `from` — must arrive on the port that leads to that process: its own port or its
    /// child aggregator's for a process below, the parent's for anyone else. So a member can
    /// speak only in its own name (docs/SECURITY.md). A rejoined process's new id not yet
    /// routed here (its `Joined` may come after its first packets) is let through.
    fn spoofed(&self, port: PortId, packet: &Packet) -> bool {
        let down = &self.routers[0];
        let from_parent = matches!(self.peers.get(port.index()), Some(Peer::Parent(_)));
        let wrong = |p: ProcId| match down.port_of(p) {
            Some(q) => q != port,
            None => p.0 < self.file_procs && !from_parent,
        };
        match packet {
            Packet::Data(d) => wrong(d.header.src),
            Packet::Ack(a) => wrong(a.from),
            Packet::AckBatch(b) => b.acks().iter().any(|a| wrong(a.from)),
            Packet::Nak(n) => wrong(n.from),
            Packet::Beacon(_) => false,
        }
    }

    /// Packets dropped by reverse-path filtering: they named a sender that does not live
    /// behind the port they came in on.
    pub fn spoofed_dropped(&self) -> u64 {
        self.spoofed
    }

    /// Test fault (the simulator's `--blackhole A>B`, to show §5.2 controller forwarding):
    /// from now on, of what process `a` sends through this aggregator — it must be attached
    /// here, its first hop — drop the data, ACKs and NAKs for process `b`. A data packet's
    /// barriers go on as a beacon, so no link falls silent and no failure is detected: only
    /// `a`'s reliable retransmissions, and then the controller's forwarding, reach `b`.
    ///
    /// # Errors
    /// `a` is not attached to this aggregator.
    pub fn blackhole(&mut self, a: ProcId, b: ProcId) -> Result<(), String> {
        if !self.peers.contains(&Peer::Process(a.0)) {
            return Err(format!("p{} is not attached to {}", a.0, self.name));
        }
        if !self.blackholes.contains(&(a, b)) {
            self.blackholes.push((a, b));
        }
        Ok(())
    }

    /// §5.2 rejoin: process `host` came back as the new processes `procs`; both halves route
    /// them as they route `host` (every id is the same host here: one process per host).
    /// Returns false if an id is beyond the cluster's `proc_ids_max` (that one is not routed).
    pub fn rejoined(&self, host: ProcId, procs: &[ProcId]) -> bool {
        let mut all = true;
        for r in &self.routers {
            for &p in procs {
                all &= r.alias(p, host);
            }
        }
        all
    }

    /// Test fault (the simulator's `--cut host-N`, one direction): from now on every packet
    /// process `a` sends arrives nowhere — its uplink into this aggregator is cut, its downlink
    /// is not. The input falls silent: after the link timeout it is reported (§5.2 Detect) and
    /// the controller declares `a` failed; meanwhile `a`'s reliable messages time out and, with
    /// `forward_after`, go by the controller.
    ///
    /// # Errors
    /// `a` is not attached to this aggregator.
    pub fn cut(&mut self, a: ProcId) -> Result<(), String> {
        if !self.peers.contains(&Peer::Process(a.0)) {
            return Err(format!("p{} is not attached to {}", a.0, self.name));
        }
        if !self.cuts.contains(&a) {
            self.cuts.push(a);
        }
        Ok(())
    }

    /// Packets dropped at a cut uplink so far ([`Aggregator::cut`]).
    pub fn cut_dropped(&self) -> u64 {
        self.cut_dropped
    }

    /// Packets black-holed so far ([`Aggregator::blackhole`]).
    pub fn blackholed(&self) -> u64 {
        self.blackholed
    }

    /// Whether a packet from peer port `port` is black-holed; a data packet's barriers come
    /// back as the beacon to take its place.
    fn black_hole(&mut self, port: PortId, packet: Packet) -> Result<Option<Packet>, Packet> {
        let Some((src, dst)) = packet.endpoints() else {
            return Err(packet);
        };
        let from_port = self.peers.get(port.index()) == Some(&Peer::Process(src.0));
        if !from_port || !self.blackholes.contains(&(src, dst)) {
            return Err(packet);
        }
        self.blackholed += 1;
        Ok(match packet {
            Packet::Data(d) => match (d.header.barrier(), d.header.commit()) {
                (Some(barrier), Some(commit)) => {
                    Some(Packet::Beacon(onepipe_proto::wire::Beacon {
                        from: NodeId(src.0),
                        barrier,
                        commit,
                        demand: false,
                    }))
                }
                _ => None,
            },
            _ => None,
        })
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The peers in port order: port `i` is a link with `peers()[i]` both ways.
    pub fn peers(&self) -> &[Peer] {
        &self.peers
    }

    /// The port table for this aggregator given every member's address (from the controller's
    /// `Ready`).
    ///
    /// # Errors
    /// A peer missing from `cluster`.
    pub fn port_table(&self, cluster: &Cluster) -> Result<PortTable, String> {
        let mut t = PortTable::new();
        for (i, peer) in self.peers.iter().enumerate() {
            let addr = match peer {
                Peer::Process(p) => cluster.process(*p).map(|p| p.addr),
                Peer::Child(name) | Peer::Parent(name) => cluster.aggregator(name).map(|a| a.addr),
            }
            .ok_or_else(|| format!("peer {peer:?} is not in the cluster"))?;
            t.link(PortId(i as u32), addr);
        }
        Ok(t)
    }

    /// Both halves' counters added up, plus packets that arrived on a port with no peer.
    pub fn stats(&self) -> SwitchStats {
        let mut s = self.up.stats().clone();
        if let Some(d) = &self.down {
            let d = d.stats();
            s.forwarded += d.forwarded;
            s.beacons_received += d.beacons_received;
            s.beacons_sent += d.beacons_sent;
            s.dropped += d.dropped;
            s.links_removed += d.links_removed;
            s.links_added += d.links_added;
            s.links_reported += d.links_reported;
            s.reports_resent += d.reports_resent;
            s.mgmt_dropped += d.mgmt_dropped;
        }
        s.dropped += self.dropped;
        s
    }

    /// The barrier this aggregator sends down to its processes (the root's only barrier).
    pub fn barrier(&self) -> Option<Timestamp> {
        self.down.as_ref().unwrap_or(&self.up).barrier()
    }

    /// Moves what the halves emitted to the aggregator's outputs; loopback sends go into the
    /// down half at once (the link never leaves the process).
    fn pump(&mut self, now: Instant) {
        while let Some(o) = self.up.poll_output() {
            match o {
                Output::Send { port, packet } => match self.up_outs.get(port.index()) {
                    Some(Out::Peer(p)) => self.outputs.push_back(Output::Send { port: *p, packet }),
                    Some(Out::Loopback) => {
                        let down = self
                            .down
                            .as_mut()
                            .expect("only a split aggregator loops back");
                        down.handle(
                            now,
                            Input::Packet {
                                port: PortId(0),
                                packet,
                            },
                        );
                    }
                    None => self.dropped += 1,
                },
                Output::Mgmt { to, msg } => self.outputs.push_back(Output::Mgmt { to, msg }),
            }
        }
        let Some(down) = self.down.as_mut() else {
            return;
        };
        while let Some(o) = down.poll_output() {
            match o {
                Output::Send { port, packet } => match self.down_outs.get(port.index()) {
                    Some(Out::Peer(p)) => self.outputs.push_back(Output::Send { port: *p, packet }),
                    _ => self.dropped += 1,
                },
                // The loopback (down input 0) cannot fall silent while the up half runs.
                Output::Mgmt { to, msg } => self.outputs.push_back(Output::Mgmt { to, msg }),
            }
        }
    }

    /// Which half, and which of its input ports, aggregator input `port` feeds.
    pub fn input_half(&self, port: PortId) -> Option<(AggHalf, PortId)> {
        self.inputs.get(port.index()).map(|&(h, p)| {
            let half = match h {
                Half::Up => AggHalf::Up,
                Half::Down => AggHalf::Down,
            };
            (half, p)
        })
    }

    /// Inputs the controller's Resume removed from the commit minimum (§5.2), both halves.
    pub fn commit_inputs_removed(&self) -> u64 {
        let removed = |sw: &Switch| {
            (0..sw.config().inputs as u32)
                .filter(|&p| sw.commit_input_removed(PortId(p)))
                .count() as u64
        };
        removed(&self.up) + self.down.as_ref().map_or(0, removed)
    }
}

impl Node for Aggregator {
    type Packet = Packet;
    type Event = Infallible;
    type Mgmt = Mgmt;

    fn handle(&mut self, now: Instant, input: Input<Packet, Mgmt>) {
        if let Input::Packet { port, packet } = &input {
            if self.spoofed(*port, packet) {
                self.spoofed += 1;
                return;
            }
            if !self.cuts.is_empty() {
                let from = self.peers.get(port.index());
                if self.cuts.iter().any(|p| from == Some(&Peer::Process(p.0))) {
                    self.cut_dropped += 1;
                    return;
                }
            }
        }
        let input = match input {
            Input::Packet { port, packet } if !self.blackholes.is_empty() => {
                match self.black_hole(port, packet) {
                    Err(packet) => Input::Packet { port, packet },
                    Ok(Some(packet)) => Input::Packet { port, packet },
                    Ok(None) => return,
                }
            }
            input => input,
        };
        match input {
            Input::Packet { port, packet } => match self.inputs.get(port.index()) {
                Some(&(Half::Up, p)) => self.up.handle(now, Input::Packet { port: p, packet }),
                Some(&(Half::Down, p)) => match self.down.as_mut() {
                    Some(d) => d.handle(now, Input::Packet { port: p, packet }),
                    None => self.dropped += 1,
                },
                None => self.dropped += 1,
            },
            Input::Timeout => {
                if self.up.poll_timeout().is_some_and(|t| t <= now) {
                    self.up.handle(now, Input::Timeout);
                }
                if let Some(d) = self.down.as_mut() {
                    if d.poll_timeout().is_some_and(|t| t <= now) {
                        d.handle(now, Input::Timeout);
                    }
                }
            }
            // Each half takes what names its own inputs.
            Input::Mgmt(msg) => {
                if let Some(d) = self.down.as_mut() {
                    d.handle(now, Input::Mgmt(msg.clone()));
                }
                self.up.handle(now, Input::Mgmt(msg));
            }
            // Both halves are switches, and a switch's links speak for themselves.
            Input::Notice(_) => {}
        }
        self.pump(now);
    }

    fn poll_output(&mut self) -> Option<Output<Packet, Infallible, Mgmt>> {
        self.outputs.pop_front()
    }

    fn poll_timeout(&self) -> Option<Instant> {
        let down = self.down.as_ref().and_then(|d| d.poll_timeout());
        [self.up.poll_timeout(), down].into_iter().flatten().min()
    }
}

/// What an aggregator daemon did, when it stops.
#[derive(Clone, Debug)]
pub struct AggregatorReport {
    /// Its name.
    pub name: String,
    /// The UDP address it bound.
    pub addr: SocketAddr,
    /// Transport counters (`unknown_source` and `decode_errors` count datagrams dropped as
    /// strangers' or garbage).
    pub driver: DriverStats,
    /// Both halves' counters.
    pub switch: SwitchStats,
    /// Inputs the controller's Resume removed from the commit minimum (§5.2).
    pub commit_inputs_removed: u64,
    /// Packets dropped by a black-hole test fault ([`AggregatorFaults`]).
    pub blackholed: u64,
    /// Packets dropped at a cut uplink ([`AggregatorFaults`]).
    pub cut_dropped: u64,
    /// Packets dropped by reverse-path filtering: they named a sender that does not live
    /// behind the port they came in on (docs/SECURITY.md).
    pub spoofed_src: u64,
}

impl AggregatorReport {
    /// The counters by name (what the daemon reports to the controller and prints at exit).
    pub fn counters(&self) -> BTreeMap<String, u64> {
        let mut m = counters(&self.driver, &self.switch, self.commit_inputs_removed);
        m.insert("blackholed".into(), self.blackholed);
        m.insert("cut_dropped".into(), self.cut_dropped);
        m.insert("spoofed_src".into(), self.spoofed_src);
        m
    }
}

fn counters(d: &DriverStats, s: &SwitchStats, commit_removed: u64) -> BTreeMap<String, u64> {
    let mut m = d.counters();
    m.insert("forwarded".into(), s.forwarded);
    m.insert("beacons_received".into(), s.beacons_received);
    m.insert("beacons_sent".into(), s.beacons_sent);
    m.insert("switch_dropped".into(), s.dropped);
    m.insert("links_removed".into(), s.links_removed);
    m.insert("links_added".into(), s.links_added);
    m.insert("commit_inputs_removed".into(), commit_removed);
    m
}

/// A test fault for a running aggregator ([`AggregatorFaults`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// [`Aggregator::blackhole`]: what `from` sends `to` is dropped here.
    Blackhole {
        /// The sending process.
        from: ProcId,
        /// The receiving process.
        to: ProcId,
    },
    /// [`Aggregator::cut`]: everything `from` sends is dropped here.
    Cut {
        /// The process whose uplink is cut.
        from: ProcId,
    },
}

/// Test faults for a running aggregator, set from another thread (`onepipe up --blackhole`
/// and `--cut` write them to the daemon's standard input) and applied by [`run_aggregator`]'s
/// loop.
#[derive(Debug, Default)]
pub struct AggregatorFaults {
    faults: Mutex<Vec<Fault>>,
}

impl AggregatorFaults {
    /// Applies `fault` from the loop's next turn.
    pub fn add(&self, fault: Fault) {
        self.faults
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(fault);
    }

    /// Faults added and not yet taken by the loop. The loop applies what it takes before it
    /// handles another datagram, so once this is 0, every datagram that arrives from then on
    /// meets the faults.
    pub fn pending(&self) -> usize {
        self.faults.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    fn take(&self) -> Vec<Fault> {
        std::mem::take(&mut *self.faults.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// Joins whichever of the `controllers` leads (a leader and standbys, docs/CONTROLLER-HA.md)
/// as aggregator `name`, binds, waits for the cluster and runs the aggregator until `stop` is
/// set. `on_ready` is called with the bound address once the cluster is ready. When the control
/// connection is lost, a thread of its own re-registers with whichever controller leads then
/// (same name, same address) while the data path runs on, and the §5.2 reports sent so far go
/// again (a new leader may not have logged them; it ignores a report it knows).
///
/// # Errors
/// Joining failed, the socket could not be bound, or the poller failed.
#[allow(clippy::too_many_arguments)]
pub fn run_aggregator(
    controllers: &[SocketAddr],
    name: &str,
    cfg: &DriverConfig,
    tls: Option<&Credentials>,
    stop: &AtomicBool,
    faults: &AggregatorFaults,
    on_ready: &mut dyn FnMut(SocketAddr),
) -> Result<AggregatorReport, JoinError> {
    let join_timeout = Duration::from_secs(60);
    let (mut control, _, bind) = ControlClient::join_leader(
        controllers,
        JoinAs::Aggregator(name.to_string()),
        join_timeout,
        tls,
    )?;
    let socket = bind_udp(bind, cfg)?;
    let addr = socket.local_addr()?;
    let cluster = control.bound_and_wait(addr, Duration::from_secs(3600), stop)?;
    let clock = Clock::of(cluster.clock);
    let node = Aggregator::new(&cluster, name, clock.now()).map_err(JoinError::Protocol)?;
    let ports = node.port_table(&cluster).map_err(JoinError::Protocol)?;
    let peers: Vec<SocketAddr> = (0..ports.outputs_len())
        .filter_map(|i| ports.output(PortId(i as u32)))
        .collect();
    let cfg = cluster
        .driver_config(cfg, &peers)
        .map_err(JoinError::Transport)?;
    let links = aggregator_links(&cluster, node.peers());
    let mut driver = Driver::new(node, socket, ports, clock, cfg)?;
    // Datagrams sealed with the keys of this aggregator's links (docs/SECURITY.md): updates
    // come on the control channel, read on this thread, and apply at once.
    let mode = cluster.auth_mode();
    if mode.seals() {
        let me = member_ix(&cluster, &Member::Aggregator(name.to_string()))
            .ok_or_else(|| JoinError::Protocol(format!("{name} has no member number")))?;
        driver.set_auth(LinkAuth::new(mode, me, &links, KeyInbox::new()))?;
        for update in control.take_keys() {
            driver.apply_key_update(update);
        }
    }
    let reader_stop = StopOnDrop(Arc::new(AtomicBool::new(false)));
    let thread_name = format!("onepipe-agg-{name}");
    let (mut control, mut inbox, reader) = control.split(&thread_name, reader_stop.0.clone())?;
    let mut readers = vec![reader];
    debug!(aggregator = name, %addr, "ready");
    on_ready(addr);
    // Every report sent, to send again after a failover (a handful per failure).
    let mut reports: Vec<ToController> = Vec::new();
    let mut connected = true;
    let mut rejoining: Option<JoinHandle<Option<ControlClient>>> = None;
    let mut last_health = std::time::Instant::now();
    while !stop.load(Ordering::SeqCst) {
        driver.run_once(Duration::from_millis(20), &mut |e: Infallible| match e {})?;
        for fault in faults.take() {
            let applied = driver.with_node(
                |n, _| match fault {
                    Fault::Blackhole { from, to } => n.blackhole(from, to),
                    Fault::Cut { from } => n.cut(from),
                },
                &mut |e: Infallible| match e {},
            );
            match applied {
                Ok(()) => warn!(aggregator = name, "test fault: {fault:?}"),
                Err(e) => warn!(aggregator = name, "test fault refused: {e}"),
            }
        }
        loop {
            match inbox.try_recv() {
                Ok(FromController::Ctrl { msg }) => {
                    let msg: CtrlMsg = msg.into();
                    driver.with_node(
                        |a, now| a.handle(now, Input::Mgmt(Mgmt::Ctrl(msg))),
                        &mut |e: Infallible| match e {},
                    );
                }
                // §5.2 rejoin: `Admit` for an input of one of the halves.
                Ok(FromController::Relay { msg }) => match msg.into_relay() {
                    Ok(r) => driver.with_node(
                        |a, now| a.handle(now, Input::Mgmt(Mgmt::Relay(r))),
                        &mut |e: Infallible| match e {},
                    ),
                    Err(e) => warn!(aggregator = name, "skipped a bad relay: {e}"),
                },
                Ok(k @ (FromController::Keys { .. } | FromController::KeysActivate { .. })) => {
                    if let Some(update) = k.key_update() {
                        driver.apply_key_update(update);
                    }
                    if let FromController::Keys {
                        epoch,
                        activate: false,
                        ..
                    } = k
                    {
                        connected &= control.send(&ToController::KeysInstalled { epoch }).is_ok();
                    }
                }
                // A process joined the running cluster: its datagrams come from `addr`.
                Ok(FromController::Address {
                    member: Member::Process(p),
                    addr,
                }) => {
                    let port = driver
                        .node()
                        .peers()
                        .iter()
                        .position(|peer| *peer == Peer::Process(p));
                    if let Some(port) = port {
                        debug!(aggregator = name, "p{p} is at {addr}");
                        driver.relink(PortId(port as u32), addr);
                    }
                }
                Ok(FromController::Joined { host, procs }) => {
                    let procs: Vec<ProcId> = procs.into_iter().map(ProcId).collect();
                    if !driver.node().rejoined(ProcId(host), &procs) {
                        warn!(
                            aggregator = name,
                            "p{host} rejoined under ids beyond the cluster's room"
                        );
                    }
                }
                Ok(_) => {}
                Err(TryRecvError::Empty) => break,
                // The reader ended: the connection closed.
                Err(TryRecvError::Disconnected) => {
                    connected = false;
                    break;
                }
            }
        }
        // §5.2 Detect: the halves' reports go to the controller. Control messages are best
        // effort here: a controller that went away does not stop the data path. Relays (rejoin's
        // `Admitted`) go the same way.
        while let Some((to, msg)) = driver.poll_mgmt() {
            if let (MgmtDest::Controller, Mgmt::Relay(r)) = (&to, &msg) {
                let msg = ToController::Relay {
                    msg: WireRelay::of(r),
                };
                connected &= control.send(&msg).is_ok();
                continue;
            }
            if let (MgmtDest::Controller, Mgmt::Ctrl(msg)) = (to, msg) {
                if let CtrlMsg::LinkDown { link, .. } = &msg {
                    warn!(
                        aggregator = name,
                        link = link.0,
                        "input link down: reported to the controller (§5.2 Detect)"
                    );
                }
                let msg = ToController::Ctrl {
                    to: None,
                    msg: WireCtrl::from(&msg),
                };
                connected &= control.send(&msg).is_ok();
                if reports.len() < REPORTS_MAX {
                    reports.push(msg);
                }
            }
        }
        if last_health.elapsed() >= Duration::from_secs(1) {
            last_health = std::time::Instant::now();
            let node = driver.node();
            let counters = counters(&driver.stats(), &node.stats(), node.commit_inputs_removed());
            connected &= control.send(&ToController::Health { counters }).is_ok();
        }
        // The controller is gone: re-register with whoever leads, off the data path's thread.
        if !connected && rejoining.is_none() {
            warn!(
                aggregator = name,
                "lost the controller; re-registering with whichever leads"
            );
            let (controllers, member) = (controllers.to_vec(), Member::Aggregator(name.into()));
            let flag = reader_stop.0.clone();
            let tls = tls.cloned();
            rejoining = Some(
                std::thread::Builder::new()
                    .name(format!("{thread_name}-rejoin"))
                    .spawn(move || loop {
                        let timeout = Duration::from_secs(2);
                        let c = ControlClient::rejoin_leader(
                            &controllers,
                            member.clone(),
                            addr,
                            timeout,
                            &flag,
                            tls.as_ref(),
                        );
                        match c {
                            Ok(c) => return Some(c),
                            Err(_) if flag.load(Ordering::SeqCst) => return None,
                            Err(_) => std::thread::sleep(Duration::from_millis(50)),
                        }
                    })?,
            );
        }
        if rejoining.as_ref().is_some_and(|h| h.is_finished()) {
            let c = rejoining.take().and_then(|h| h.join().ok().flatten());
            if let Some(c) = c {
                let (sender, rx, reader) = c.split(&thread_name, reader_stop.0.clone())?;
                (control, inbox, connected) = (sender, rx, true);
                info!(
                    aggregator = name,
                    "re-registered with the leading controller"
                );
                readers.push(reader);
                for msg in &reports {
                    connected &= control.send(msg).is_ok();
                }
            }
        }
    }
    let _ = driver.flush();
    let report = AggregatorReport {
        name: name.to_string(),
        addr,
        driver: driver.stats(),
        switch: driver.node().stats(),
        commit_inputs_removed: driver.node().commit_inputs_removed(),
        blackholed: driver.node().blackholed(),
        cut_dropped: driver.node().cut_dropped(),
        spoofed_src: driver.node().spoofed_dropped(),
    };
    let _ = control.send(&ToController::Health {
        counters: report.counters(),
    });
    control.leave();
    // The reader reads on until the controller closes (or briefly, if it does not): a socket
    // closed with unread input is reset, and the reset could overtake the `Leave`.
    let linger = std::time::Instant::now() + Duration::from_millis(500);
    while readers.iter().any(|r| !r.is_finished()) && std::time::Instant::now() < linger {
        std::thread::sleep(Duration::from_millis(5));
    }
    drop(reader_stop);
    drop(inbox);
    for r in readers {
        let _ = r.join();
    }
    if let Some(h) = rejoining {
        let _ = h.join();
    }
    Ok(report)
}

/// Most §5.2 reports an aggregator keeps to send again after a controller failover (one per
/// input link at most, as a link is reported once).
const REPORTS_MAX: usize = 4096;

/// Sets a flag when dropped: the control reader stops however the daemon's loop ends.
struct StopOnDrop(Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// An aggregator running on a thread of this process (what [`crate::LocalCluster`] and tests
/// use; the `onepipe agg` daemon runs [`run_aggregator`] on its main thread).
pub struct AggregatorDaemon {
    stop: Arc<AtomicBool>,
    faults: Arc<AggregatorFaults>,
    thread: Option<JoinHandle<Result<AggregatorReport, JoinError>>>,
}

impl AggregatorDaemon {
    /// Applies test fault `fault` ([`Aggregator::blackhole`], [`Aggregator::cut`]) and waits
    /// (at most `timeout`) until the aggregator's loop has taken it: what arrives there from
    /// then on meets it. Returns whether it was taken in time. Refused faults (a process not
    /// attached here) are logged by the aggregator.
    pub fn inject(&self, fault: Fault, timeout: Duration) -> bool {
        self.faults.add(fault);
        let until = std::time::Instant::now() + timeout;
        while self.faults.pending() > 0 {
            if std::time::Instant::now() >= until
                || self.thread.as_ref().is_none_or(|t| t.is_finished())
            {
                return false;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        true
    }

    /// Starts aggregator `name` of the cluster whose controller is at `controller`.
    ///
    /// # Errors
    /// The thread could not be spawned (joining happens on the thread: see
    /// [`AggregatorDaemon::stop`]).
    pub fn start(
        controller: SocketAddr,
        name: &str,
        cfg: DriverConfig,
        tls: Option<Credentials>,
    ) -> io::Result<AggregatorDaemon> {
        AggregatorDaemon::start_any(&[controller], name, cfg, tls)
    }

    /// Starts aggregator `name` with a leader and standby controllers at `controllers` (see
    /// [`run_aggregator`]).
    ///
    /// # Errors
    /// The thread could not be spawned.
    pub fn start_any(
        controllers: &[SocketAddr],
        name: &str,
        cfg: DriverConfig,
        tls: Option<Credentials>,
    ) -> io::Result<AggregatorDaemon> {
        let stop = Arc::new(AtomicBool::new(false));
        let faults = Arc::new(AggregatorFaults::default());
        let (stop2, name, controllers) = (stop.clone(), name.to_string(), controllers.to_vec());
        let faults2 = faults.clone();
        let thread = std::thread::Builder::new()
            .name(format!("onepipe-agg-{name}"))
            .spawn(move || {
                let faults = faults2;
                run_aggregator(
                    &controllers,
                    &name,
                    &cfg,
                    tls.as_ref(),
                    &stop2,
                    &faults,
                    &mut |_| {},
                )
            })?;
        Ok(AggregatorDaemon {
            stop,
            faults,
            thread: Some(thread),
        })
    }

    /// Stops it and returns its report.
    ///
    /// # Errors
    /// What made it fail, if it did.
    pub fn stop(mut self) -> Result<AggregatorReport, JoinError> {
        self.stop.store(true, Ordering::SeqCst);
        let t = self.thread.take().expect("joined once");
        t.join()
            .unwrap_or_else(|_| Err(JoinError::Protocol("the aggregator thread panicked".into())))
    }
}

impl Drop for AggregatorDaemon {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests;
