//! An aggregator of a tree of physical aggregators, as one role: the up and down halves of §3.1
//! on one node, with one port per peer, and the process router they route data by.
//!
//! A tree of physical aggregators becomes an acyclic routing graph the way a multi-rooted tree
//! does (§3.1, Fig. 3; [`crate::topology`]): every aggregator below the root is split into an
//! *up* half, which aggregates what climbs (its processes' uplinks and its children's up
//! halves), and a *down* half, which aggregates what descends (its parent's down half, and its
//! own up half through a loopback link for traffic that turns here); the root is one node. Each
//! half is an unchanged [`Switch`] (the live runtime runs them in either incarnation of §6.2):
//! barriers come in beacons or on data, the minimum over inputs goes out, and timed beacons are
//! phased by the half's depth so that one wave of beacons climbs and descends per interval
//! (§4.2).
//!
//! [`Aggregator`] is that pair as one role with one port per *peer* — the peers below (attached
//! processes and child aggregators) on ports `0..below`, the parent on port `below` — so one
//! socket serves it: packets from a peer arrive on its port, whichever half they are for, and
//! the loopback link never leaves the role. It is built from its parts: each half's
//! [`SwitchConfig`] and [`ProcessRouter`] ([`Aggregator::root`], [`Aggregator::split`]), which
//! [`tree::AggTree`] builds from a description of the whole tree — the one builder the live
//! runtime and the simulator's tree fabric share; what the description comes from (a cluster
//! file, a simulated layout) is the driver's business.
//!
//! Reverse-path filtering: a packet that names its sending process must arrive on the port that
//! leads to that process, or it is dropped and counted ([`Aggregator::spoofed_dropped`]).
//!
//! Failure handling: an input silent for the link timeout is removed from the best-effort
//! minimum at once (§4.2) and reported to the controller as a §5.2 Detect: each half knows its
//! inputs as the routing graph's links (`SwitchConfig::input_links`) and sends its own
//! `LinkDown` with the last commit barrier the input carried (an [`Output::Mgmt`]). The
//! controller's messages go to both halves ([`Input::Mgmt`]); on Resume the dead inputs stop
//! bounding the commit barrier. A process that rejoins under new ids (§5.2) is routed as the old
//! one ([`Aggregator::rejoined`]).
//!
//! What it is not: a router of its own — data packets follow the tree by destination process
//! ([`ProcessRouter`]), with no detour around a dead aggregator (a tree has none) — nor a place
//! for faults: cut links and black holes are the driver's, applied before packets reach it.

use crate::failure::Mgmt;
use crate::gaps::BarrierGaps;
use crate::ids::{PortId, ProcId};
use crate::node::{Input, Node, Output};
use crate::switch::{Switch, SwitchConfig, SwitchStats};
use crate::time::{Instant, Timestamp};
use crate::wire::Packet;
use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;

mod router;
pub mod tree;

pub use router::ProcessRouter;

/// One of an aggregator's two halves (§3.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Half {
    /// What climbs: the peers below in, the loopback and the parent out (the root's only node).
    Up,
    /// What descends: the loopback and the parent in, the peers below out.
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
    /// The halves' routing tables, for [`Aggregator::rejoined`]; the first is the down
    /// half's: each process below, to the port that leads to it.
    routers: Vec<Arc<ProcessRouter>>,
    /// The parent's port (none at the root).
    parent: Option<PortId>,
    /// Process ids below this are the cluster's first processes; ids above are rejoined
    /// processes' (§5.2).
    procs: u32,
    /// Packets dropped because they named a sender that does not live behind their port.
    spoofed: u64,
}

impl Aggregator {
    /// The root: one switch (configured by `cfg`, routing by `router`) whose inputs and
    /// outputs are its peers below, port for port; `procs` processes were in the cluster at
    /// the start (ids above are rejoined ones').
    ///
    /// # Panics
    /// `cfg` has not as many outputs as inputs: a configuration bug of the caller.
    pub fn root(
        cfg: SwitchConfig,
        router: Arc<ProcessRouter>,
        procs: u32,
        now: Instant,
    ) -> Aggregator {
        assert_eq!(
            cfg.inputs, cfg.outputs,
            "a root's ports are its peers below"
        );
        let below = cfg.inputs as u32;
        let up = Switch::new(cfg, Some(router.clone()), now);
        Aggregator {
            up,
            down: None,
            inputs: (0..below).map(|p| (Half::Up, PortId(p))).collect(),
            up_outs: (0..below).map(|p| Out::Peer(PortId(p))).collect(),
            down_outs: Vec::new(),
            outputs: VecDeque::new(),
            dropped: 0,
            routers: vec![router],
            parent: None,
            procs,
            spoofed: 0,
        }
    }

    /// An aggregator below the root, split in two halves (§3.1). The up half's inputs are the
    /// peers below; its output 0 turns here (the loopback), 1 climbs to the parent. The down
    /// half's input 0 is the loopback, 1 the parent; its outputs are the peers below. Each half
    /// routes by its own table; `procs` as for [`Aggregator::root`].
    ///
    /// # Panics
    /// The configurations do not have those ports: a configuration bug of the caller.
    pub fn split(
        up_cfg: SwitchConfig,
        up_router: Arc<ProcessRouter>,
        down_cfg: SwitchConfig,
        down_router: Arc<ProcessRouter>,
        procs: u32,
        now: Instant,
    ) -> Aggregator {
        let below = up_cfg.inputs as u32;
        assert_eq!(up_cfg.outputs, 2, "the up half's outputs: loopback, parent");
        assert_eq!(
            down_cfg.inputs, 2,
            "the down half's inputs: loopback, parent"
        );
        assert_eq!(
            down_cfg.outputs, below as usize,
            "both halves face the peers below"
        );
        let up = Switch::new(up_cfg, Some(up_router.clone()), now);
        let down = Switch::new(down_cfg, Some(down_router.clone()), now);
        let mut inputs: Vec<(Half, PortId)> = (0..below).map(|p| (Half::Up, PortId(p))).collect();
        inputs.push((Half::Down, PortId(1)));
        Aggregator {
            up,
            down: Some(down),
            inputs,
            up_outs: vec![Out::Loopback, Out::Peer(PortId(below))],
            down_outs: (0..below).map(|p| Out::Peer(PortId(p))).collect(),
            outputs: VecDeque::new(),
            dropped: 0,
            routers: vec![down_router, up_router],
            parent: Some(PortId(below)),
            procs,
            spoofed: 0,
        }
    }

    /// Reverse-path filtering (BCP 38's ingress filtering; strict uRPF, which is exact on a
    /// tree): a packet that names its sending process — a data packet's `src`, an ACK's or
    /// NAK's `from` — must arrive on the port that leads to that process: its own port or its
    /// child aggregator's for a process below, the parent's for anyone else. So a member can
    /// speak only in its own name (docs/SECURITY.md). A rejoined process's new id not yet
    /// routed here (its `Joined` may come after its first packets) is let through.
    fn spoofed(&self, port: PortId, packet: &Packet) -> bool {
        let down = &self.routers[0];
        let from_parent = self.parent == Some(port);
        let wrong = |p: ProcId| match down.port_of(p) {
            Some(q) => q != port,
            None => p.0 < self.procs && !from_parent,
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

    /// §5.2 rejoin: process `host` came back as the new processes `procs`; both halves route
    /// them as they route `host` (every id is the same host here: one process per host).
    /// Returns false if an id is beyond the routers' room (that one is not routed).
    pub fn rejoined(&self, host: ProcId, procs: &[ProcId]) -> bool {
        let mut all = true;
        for r in &self.routers {
            for &p in procs {
                all &= r.alias(p, host);
            }
        }
        all
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
    /// down half at once (the link never leaves the role).
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
    pub fn input_half(&self, port: PortId) -> Option<(Half, PortId)> {
        self.inputs.get(port.index()).copied()
    }

    /// Number of input ports (the peers below, and the parent's on a split aggregator).
    pub fn inputs_len(&self) -> usize {
        self.inputs.len()
    }

    /// Input `port`'s registers — the best-effort (§4.1) and commit (§5.1) barriers its link
    /// last reported, as its half holds them; `None` for a port that is not an input.
    pub fn input_registers(&self, port: PortId) -> Option<(Option<Timestamp>, Option<Timestamp>)> {
        let (half, p) = self.input_half(port)?;
        let sw = match half {
            Half::Up => &self.up,
            Half::Down => self.down.as_ref()?,
        };
        Some((sw.register(p), sw.commit_register(p)))
    }

    /// When barriers arrived on input `port`, as its half saw them
    /// ([`Switch::input_gaps`]); `None` for a port that is not an input.
    pub fn input_gaps(&self, port: PortId) -> Option<BarrierGaps> {
        let (half, p) = self.input_half(port)?;
        match half {
            Half::Up => self.up.input_gaps(p),
            Half::Down => self.down.as_ref()?.input_gaps(p),
        }
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
        }
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
