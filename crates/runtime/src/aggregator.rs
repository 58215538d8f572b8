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
//! addresses and drives the role with a [`crate::driver::Driver`] until stopped.
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

mod daemon;

use crate::cluster::Cluster;
use crate::failure::{AggHalf, LiveTopology};
use crate::ports::PortTable;
use crate::roles::ProcessRouter;
use onepipe_proto::failure::Mgmt;
use onepipe_proto::ids::{LinkId, NodeId, PortId, ProcId};
use onepipe_proto::node::{Input, Node, Output};
use onepipe_proto::switch::{Switch, SwitchConfig, SwitchStats};
use onepipe_proto::time::{Instant, Timestamp};
use onepipe_proto::wire::Packet;
use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;

pub use daemon::{run_aggregator, AggregatorDaemon, AggregatorFaults, AggregatorReport, Fault};

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
        let procs = cluster.attached(name);
        let children: Vec<String> = cluster
            .children(name)
            .iter()
            .map(|c| c.name.clone())
            .collect();
        let mut peers: Vec<Peer> = procs.iter().map(|&p| Peer::Process(p)).collect();
        peers.extend(children.iter().cloned().map(Peer::Child));
        let layout = Layout {
            cluster,
            name,
            index,
            below: peers.len(),
            // §5.2: each half's inputs as the controller's graph names them (none for a shape
            // the graph cannot express: then nothing is reported, and there is no procedure
            // either).
            live: LiveTopology::of(cluster).ok(),
            now,
        };
        let down_router = Arc::new(layout.down_router(&procs, &children));
        let mut routers = vec![down_router.clone()];
        let halves = match &spec.parent {
            None => layout.root(down_router),
            Some(parent) => {
                peers.push(Peer::Parent(parent.clone()));
                let (halves, up_router) = layout.split(down_router);
                routers.push(up_router);
                halves
            }
        };
        Ok(Aggregator {
            name: name.to_string(),
            peers,
            up: halves.up,
            down: halves.down,
            inputs: halves.inputs,
            up_outs: halves.up_outs,
            down_outs: halves.down_outs,
            outputs: VecDeque::new(),
            dropped: 0,
            blackholes: Vec::new(),
            blackholed: 0,
            cuts: Vec::new(),
            cut_dropped: 0,
            routers,
            file_procs: cluster.procs(),
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

/// What building one aggregator's halves needs ([`Aggregator::new`]).
struct Layout<'a> {
    cluster: &'a Cluster,
    name: &'a str,
    /// The aggregator's index in the cluster file.
    index: usize,
    /// Its peers below: attached processes, then child aggregators.
    below: usize,
    /// The controller's routing graph, if the cluster's shape has one.
    live: Option<LiveTopology>,
    now: Instant,
}

/// An aggregator's halves and where their ports lead.
struct Halves {
    up: Switch,
    down: Option<Switch>,
    inputs: Vec<(Half, PortId)>,
    up_outs: Vec<Out>,
    down_outs: Vec<Out>,
}

impl Layout<'_> {
    /// Where each process is reached going down: its own port, or its child's.
    fn down_router(&self, procs: &[u32], children: &[String]) -> ProcessRouter {
        let ids = self.cluster.proc_ids_max();
        let mut down_router = ProcessRouter::with_ids(ids);
        for (i, &p) in procs.iter().enumerate() {
            down_router.set(ProcId(p), PortId(i as u32));
        }
        for (j, c) in children.iter().enumerate() {
            for p in self.cluster.subtree_procs(c) {
                down_router.set(ProcId(p), PortId((procs.len() + j) as u32));
            }
        }
        down_router
    }

    /// The graph node of half `half` (0: up, or the root's only node; 1: down).
    fn node(&self, half: u32) -> NodeId {
        NodeId(self.cluster.procs() + 2 * self.index as u32 + half)
    }

    /// `cfg` with its inputs as the controller's graph names them, and the half's graph node.
    fn graph(&self, mut cfg: SwitchConfig, half: AggHalf) -> SwitchConfig {
        let live = &self.live;
        let links: Option<Vec<LinkId>> = (0..cfg.inputs as u32)
            .map(|p| live.as_ref()?.input_link(self.index, half, PortId(p)))
            .collect();
        if let Some(links) = links {
            cfg.graph_node = links.first().and_then(|&l| live.as_ref()?.link_head(l));
            cfg.input_links = links;
        }
        cfg
    }

    /// The root: one node, whose inputs and outputs are the peers below.
    fn root(&self, down_router: Arc<ProcessRouter>) -> Halves {
        let (cluster, below) = (self.cluster, self.below);
        let roles = cluster.roles();
        let cfg = roles.switch_config(self.node(0), cluster.up_depth(self.name), below, below);
        let up = Switch::new(self.graph(cfg, AggHalf::Up), Some(down_router), self.now);
        let ports: Vec<PortId> = (0..below as u32).map(PortId).collect();
        let inputs = ports.iter().map(|&p| (Half::Up, p)).collect();
        Halves {
            up,
            down: None,
            inputs,
            up_outs: ports.into_iter().map(Out::Peer).collect(),
            down_outs: Vec::new(),
        }
    }

    /// An aggregator below the root, split in two halves (§3.1): its halves, and the up
    /// half's routing table.
    fn split(&self, down_router: Arc<ProcessRouter>) -> (Halves, Arc<ProcessRouter>) {
        let (cluster, name, below) = (self.cluster, self.name, self.below);
        let roles = cluster.roles();
        // Up: inputs are the peers below; output 0 turns here (loopback), 1 climbs.
        let mut up_router = ProcessRouter::with_ids(cluster.proc_ids_max());
        let mine = cluster.subtree_procs(name);
        for p in 0..cluster.procs() {
            let port = if mine.binary_search(&p).is_ok() { 0 } else { 1 };
            up_router.set(ProcId(p), PortId(port));
        }
        let up_cfg = roles.switch_config(self.node(0), cluster.up_depth(name), below, 2);
        let up_cfg = self.graph(up_cfg, AggHalf::Up);
        let up_router = Arc::new(up_router);
        let up = Switch::new(up_cfg, Some(up_router.clone()), self.now);
        // Down: input 0 is the loopback, 1 the parent; outputs are the peers below.
        let down_cfg = roles.switch_config(self.node(1), cluster.down_depth(name), 2, below);
        let down_cfg = self.graph(down_cfg, AggHalf::Down);
        let down = Switch::new(down_cfg, Some(down_router), self.now);
        let mut inputs: Vec<(Half, PortId)> =
            (0..below as u32).map(|p| (Half::Up, PortId(p))).collect();
        inputs.push((Half::Down, PortId(1)));
        let up_outs = vec![Out::Loopback, Out::Peer(PortId(below as u32))];
        let down_outs = (0..below as u32).map(|p| Out::Peer(PortId(p))).collect();
        let halves = Halves {
            up,
            down: Some(down),
            inputs,
            up_outs,
            down_outs,
        };
        (halves, up_router)
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

#[cfg(test)]
mod tests;
