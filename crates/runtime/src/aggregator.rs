//! The aggregator daemon: one node of the cluster's aggregator tree, as a host representative
//! (§6.2.3) that also forwards the data.
//!
//! The role is [`onepipe_proto::aggregator::Aggregator`]: the up and down halves of §3.1 as one
//! node with one port per peer, so one UDP socket serves it. What this module adds is what reads
//! the cluster file: [`Placement`] names an aggregator's peers in port order (its attached
//! processes, its child aggregators, its parent) and builds its role — each half's
//! configuration from the cluster's live roles, phased by the half's depth (§4.2), its inputs
//! named as the controller's routing graph names them ([`crate::failure::LiveTopology`], so the
//! halves' §5.2 `LinkDown` reports name the right links), and its routing tables.
//! [`AggregatorDaemon`] runs it: it joins the controller, binds, waits for the cluster's
//! addresses and drives the role with a [`crate::driver::Driver`] until stopped, carrying the
//! halves' §5.2 reports (`Output::Mgmt`) to the controller and the controller's messages to
//! both halves (`Input::Mgmt`). The test faults (`onepipe up --cut`, `--blackhole`) are a
//! [`crate::faults::FaultFilter`] in front of the role, not in it.
//!
//! Logs go through `tracing` (target `onepipe_runtime::aggregator`), never per packet: `warn`
//! for an input reported down and a lost controller, `info` for re-registering after a
//! failover, `debug` for being ready.

mod daemon;

use crate::cluster::Cluster;
use crate::failure::{AggHalf, LiveTopology};
use crate::faults::FaultFilter;
use crate::ports::PortTable;
use onepipe_proto::aggregator::{Aggregator, ProcessRouter};
use onepipe_proto::ids::{LinkId, NodeId, PortId, ProcId};
use onepipe_proto::switch::SwitchConfig;
use onepipe_proto::time::Instant;
use std::sync::Arc;

pub use daemon::{
    run_aggregator, AggregatorDaemon, AggregatorFaults, AggregatorReport, Fault, TELEMETRY_INTERVAL,
};

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

/// Where one aggregator of the cluster file sits: its name and its peers in port order. See
/// the module docs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placement {
    name: String,
    /// The aggregator's index in the cluster file.
    index: usize,
    /// Port `i` is a link with `peers[i]` both ways: attached processes, then child
    /// aggregators, then the parent.
    peers: Vec<Peer>,
}

impl Placement {
    /// The aggregator called `name` of `cluster`.
    ///
    /// # Errors
    /// `name` is not an aggregator of the cluster.
    pub fn of(cluster: &Cluster, name: &str) -> Result<Placement, String> {
        let index = cluster
            .aggregator_index(name)
            .ok_or_else(|| format!("no aggregator '{name}' in the cluster"))?;
        let mut peers: Vec<Peer> = cluster
            .attached(name)
            .iter()
            .map(|&p| Peer::Process(p))
            .collect();
        peers.extend(
            cluster
                .children(name)
                .iter()
                .map(|c| Peer::Child(c.name.clone())),
        );
        if let Some(parent) = &cluster.aggregators[index].parent {
            peers.push(Peer::Parent(parent.clone()));
        }
        Ok(Placement {
            name: name.to_string(),
            index,
            peers,
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

    /// The port process `p` is attached at, if it is attached here.
    pub fn process_port(&self, p: u32) -> Option<PortId> {
        let port = self
            .peers
            .iter()
            .position(|peer| *peer == Peer::Process(p))?;
        Some(PortId(port as u32))
    }

    /// A fault filter with no faults yet for this aggregator's ports.
    pub fn fault_filter(&self) -> FaultFilter {
        let attached = self
            .peers
            .iter()
            .map(|peer| match peer {
                Peer::Process(p) => Some(ProcId(*p)),
                Peer::Child(_) | Peer::Parent(_) => None,
            })
            .collect();
        FaultFilter::new(&self.name, attached)
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

    /// The role of this aggregator of `cluster` (the cluster it was placed in), at local time
    /// `now`: the root's one node, or the split halves of one below it (§3.1).
    pub fn role(&self, cluster: &Cluster, now: Instant) -> Aggregator {
        let below = self
            .peers
            .iter()
            .filter(|p| !matches!(p, Peer::Parent(_)))
            .count();
        let layout = Layout {
            cluster,
            name: &self.name,
            index: self.index,
            below,
            // §5.2: each half's inputs as the controller's graph names them (none for a shape
            // the graph cannot express: then nothing is reported, and there is no procedure
            // either).
            live: LiveTopology::of(cluster).ok(),
            now,
        };
        let down_router = Arc::new(layout.down_router(&self.peers));
        match cluster.aggregators[self.index].parent {
            None => layout.root(down_router),
            Some(_) => layout.split(down_router),
        }
    }
}

/// What building one aggregator's halves needs ([`Placement::role`]).
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

impl Layout<'_> {
    /// Where each process is reached going down: its own port, or its child's.
    fn down_router(&self, peers: &[Peer]) -> ProcessRouter {
        let mut down_router = ProcessRouter::with_ids(self.cluster.proc_ids_max());
        for (i, peer) in peers.iter().enumerate() {
            let port = PortId(i as u32);
            match peer {
                Peer::Process(p) => down_router.set(ProcId(*p), port),
                Peer::Child(c) => {
                    for p in self.cluster.subtree_procs(c) {
                        down_router.set(ProcId(p), port);
                    }
                }
                Peer::Parent(_) => {}
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
    fn root(&self, down_router: Arc<ProcessRouter>) -> Aggregator {
        let (cluster, below) = (self.cluster, self.below);
        let roles = cluster.roles();
        let cfg = roles.switch_config(self.node(0), cluster.up_depth(self.name), below, below);
        let cfg = self.graph(cfg, AggHalf::Up);
        Aggregator::root(cfg, down_router, cluster.procs(), self.now)
    }

    /// An aggregator below the root, split in two halves (§3.1).
    fn split(&self, down_router: Arc<ProcessRouter>) -> Aggregator {
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
        // Down: input 0 is the loopback, 1 the parent; outputs are the peers below.
        let down_cfg = roles.switch_config(self.node(1), cluster.down_depth(name), 2, below);
        let down_cfg = self.graph(down_cfg, AggHalf::Down);
        let up_router = Arc::new(up_router);
        let procs = cluster.procs();
        Aggregator::split(up_cfg, up_router, down_cfg, down_router, procs, self.now)
    }
}

#[cfg(test)]
mod tests;
