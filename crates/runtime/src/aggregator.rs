//! The aggregator daemon: one node of the cluster's aggregator tree, as a host representative
//! (§6.2.3) that also forwards the data.
//!
//! The role is [`onepipe_proto::aggregator::Aggregator`]: the up and down halves of §3.1 as one
//! node with one port per peer, so one UDP socket serves it. What this module adds is what reads
//! the cluster file: [`Placement`] names an aggregator's peers in port order (its attached
//! processes, its child aggregators, its parent) and has its role built by the one builder of
//! an aggregator tree's roles, [`onepipe_proto::aggregator::tree::AggTree`] (the simulator's
//! tree fabric builds with it too), from the cluster's tree ([`Cluster::tree`]): each half's
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
use crate::faults::FaultFilter;
use crate::ports::PortTable;
use onepipe_proto::aggregator::Aggregator;
use onepipe_proto::ids::{PortId, ProcId};
use onepipe_proto::time::Instant;

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
    /// `now`: the root's one node, or the split halves of one below it (§3.1), built by
    /// [`onepipe_proto::aggregator::tree::AggTree::role`] with each half configured by the cluster's live roles and its inputs
    /// named as the controller's graph names them (none for a shape the graph cannot express:
    /// then nothing is reported, and there is no procedure either).
    pub fn role(&self, cluster: &Cluster, now: Instant) -> Aggregator {
        let tree = cluster.tree();
        let graph = tree.graph().ok();
        let roles = cluster.roles();
        tree.role(
            self.index,
            graph.as_ref(),
            now,
            |node, depth, inputs, outputs| roles.switch_config(node, depth, inputs, outputs),
        )
    }
}

#[cfg(test)]
mod tests;
