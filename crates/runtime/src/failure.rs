//! The live cluster's side of reliable failure handling (1Pipe §5.2): the routing graph the
//! controller reasons about, the ids the members report in, and the control messages as JSON.
//!
//! The procedure itself — Detect, Determine, Broadcast, Discard, Recall, Callback, Resume — is
//! `onepipe_proto::failure` (the controller) and `onepipe_proto::host::Host` (the
//! hosts), unchanged from the simulator. This module gives it what the live runtime must:
//!
//! * [`LiveTopology`]: the cluster's tree of aggregators as a `onepipe_proto::topology::Topology`
//!   routing graph (§3.1, Fig. 3), with each process a host of its own, and the map between the
//!   graph's links and the ports the aggregators and endpoints report a silent input on. Every
//!   tree a cluster file can describe has one ([`Topology::tree`]: any depth, processes on any
//!   aggregator, racks of any size); a file that is not one tree is refused when it is parsed.
//! * [`WireCtrl`]: `onepipe_proto::failure::CtrlMsg` as it travels on the control connection
//!   (`onepipe-proto` has no serde). Converting it back never fails; whether its ids make sense
//!   is checked by whoever receives it (the proto controller drops a report that is not the
//!   reporter's input, hosts ignore processes they do not know).
//!
//! The ids: process `p` is host `NodeId(p)` both in the graph and in its endpoint's
//! `HostConfig`; the aggregators report the graph's `NodeId`s and `LinkId`s (not the node ids
//! their halves use for beacons), which they compute from the same cluster file.

use crate::cluster::Cluster;
use onepipe_proto::failure::{CtrlMsg, RelayMsg};
use onepipe_proto::ids::{LinkId, NodeId, PortId, ProcId, Psn};
use onepipe_proto::time::Timestamp;
use onepipe_proto::topology::{Topology, TreeSwitch};
use onepipe_proto::wire::Packet;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Arc;

/// Which half of a split aggregator (the root is one node, reported as `Up`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum AggHalf {
    /// Aggregates what climbs: the processes' uplinks and the children's up halves.
    Up,
    /// Aggregates what descends: the loopback (port 0) and the parent (port 1).
    Down,
}

/// The routing graph of a live cluster and its id maps. See the module docs.
#[derive(Clone, Debug)]
pub struct LiveTopology {
    topo: Arc<Topology>,
    /// Per aggregator (cluster index): (half, that half's input port) → graph link.
    inputs: Vec<BTreeMap<(AggHalf, u32), LinkId>>,
    /// Per aggregator: the graph nodes it stands for (the halves, or the root's one node).
    nodes: Vec<Vec<NodeId>>,
}

impl LiveTopology {
    /// The graph of `cluster`, or why it has none (a shape the module docs do not list).
    ///
    /// # Errors
    /// The cluster's shape cannot be expressed (the message says how it differs).
    pub fn of(cluster: &Cluster) -> Result<LiveTopology, String> {
        let switches: Vec<TreeSwitch> = cluster
            .aggregators
            .iter()
            .map(|a| TreeSwitch {
                parent: a
                    .parent
                    .as_deref()
                    .and_then(|p| cluster.aggregator_index(p)),
                hosts: cluster.attached(&a.name),
            })
            .collect();
        let (topo, links) =
            Topology::tree(cluster.procs(), &switches).map_err(|e| e.to_string())?;
        // An aggregator's up inputs are its attached processes, then its children, in
        // `Cluster::children` order — the order `Aggregator::new` gives its ports; the tree's
        // children are in the same (file) order.
        let inputs = (0..switches.len())
            .map(|a| {
                let up = links.up_inputs[a].iter().enumerate();
                let down = links.down_inputs[a].iter().enumerate();
                up.map(|(p, &l)| ((AggHalf::Up, p as u32), l))
                    .chain(down.map(|(p, &l)| ((AggHalf::Down, p as u32), l)))
                    .collect()
            })
            .collect();
        Ok(LiveTopology {
            topo: Arc::new(topo),
            inputs,
            nodes: links.nodes,
        })
    }

    /// The routing graph.
    pub fn topology(&self) -> &Arc<Topology> {
        &self.topo
    }

    /// The graph link that enters input `port` of `half` of aggregator `agg` (cluster index).
    pub fn input_link(&self, agg: usize, half: AggHalf, port: PortId) -> Option<LinkId> {
        self.inputs.get(agg)?.get(&(half, port.0)).copied()
    }

    /// The aggregator `agg`'s (half, input port) that `link` enters, if it enters `agg`.
    pub fn input_port(&self, agg: usize, link: LinkId) -> Option<(AggHalf, PortId)> {
        self.inputs
            .get(agg)?
            .iter()
            .find(|(_, &l)| l == link)
            .map(|(&(h, p), _)| (h, PortId(p)))
    }

    /// The graph node that receives on `link` (the reporter of a `LinkDown` for it).
    pub fn link_head(&self, link: LinkId) -> Option<NodeId> {
        self.topo.links().get(link.index()).map(|l| l.to)
    }

    /// The aggregator (cluster index) a graph switch node belongs to.
    pub fn aggregator_of(&self, node: NodeId) -> Option<usize> {
        self.nodes.iter().position(|ns| ns.contains(&node))
    }

    /// The graph nodes aggregator `agg` stands for.
    pub fn nodes_of(&self, agg: usize) -> &[NodeId] {
        self.nodes.get(agg).map_or(&[], Vec::as_slice)
    }

    /// Process `p`'s input link (its downlink): what its endpoint reports when its aggregator
    /// falls silent.
    pub fn downlink(&self, p: u32) -> Option<LinkId> {
        (p < self.topo.hosts()).then(|| self.topo.downlink(p))
    }
}

/// `onepipe_proto::failure::CtrlMsg` on the control connection: ids as numbers, timestamps as
/// raw nanoseconds. See the module docs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum WireCtrl {
    /// Detect: `reporter` timed out its input `link`.
    LinkDown {
        /// Graph node.
        reporter: u32,
        /// Graph link.
        link: u32,
        /// Last commit barrier on it.
        last_commit: Option<u64>,
    },
    /// Broadcast: failed processes and their failure timestamps.
    Failure {
        /// Round.
        round: u32,
        /// (process, failure timestamp).
        failed: Vec<(u32, u64)>,
        /// Correct hosts.
        correct: Vec<u32>,
    },
    /// Recall of aborted scatterings.
    Recall {
        /// Round.
        round: u32,
        /// Recalling host.
        from: u32,
        /// (sender, timestamp).
        groups: Vec<(u32, u64)>,
        /// (sender, receiver, first PSN, packets).
        unacked: Vec<(u32, u32, u32, u32)>,
    },
    /// A recall is done at `from`.
    RecallAck {
        /// Round.
        round: u32,
        /// Host.
        from: u32,
    },
    /// Host `host` completed `round`.
    Completed {
        /// Round.
        round: u32,
        /// Host.
        host: u32,
    },
    /// Determine asks the link's head to freeze and report it.
    Isolate {
        /// Graph link.
        link: u32,
    },
    /// A host left on its own (the controller's own input; no member may send it).
    Departed {
        /// Host.
        host: u32,
        /// A timestamp above everything it sent.
        last: Option<u64>,
    },
    /// The controller asks a departed host's uplink switch to remove it.
    Depart {
        /// Graph link.
        link: u32,
    },
    /// Host `host`'s application took `round`'s notification (its callback clock starts).
    CallbackTaken {
        /// Round.
        round: u32,
        /// Host.
        host: u32,
    },
    /// Resume: stop waiting for the dead links.
    Resume {
        /// Round.
        round: u32,
        /// Graph links.
        dead_links: Vec<u32>,
    },
}

impl From<&CtrlMsg> for WireCtrl {
    fn from(m: &CtrlMsg) -> WireCtrl {
        match m {
            CtrlMsg::LinkDown {
                reporter,
                link,
                last_commit,
            } => WireCtrl::LinkDown {
                reporter: reporter.0,
                link: link.0,
                last_commit: last_commit.map(Timestamp::raw),
            },
            CtrlMsg::Failure {
                round,
                failed,
                correct,
            } => WireCtrl::Failure {
                round: *round,
                failed: failed.iter().map(|(p, t)| (p.0, t.raw())).collect(),
                correct: correct.iter().map(|h| h.0).collect(),
            },
            CtrlMsg::Recall {
                round,
                from,
                groups,
                unacked,
            } => WireCtrl::Recall {
                round: *round,
                from: from.0,
                groups: groups.iter().map(|(p, t)| (p.0, t.raw())).collect(),
                unacked: unacked
                    .iter()
                    .map(|(s, d, psn, k)| (s.0, d.0, psn.0, *k))
                    .collect(),
            },
            CtrlMsg::RecallAck { round, from } => WireCtrl::RecallAck {
                round: *round,
                from: from.0,
            },
            CtrlMsg::Completed { round, host } => WireCtrl::Completed {
                round: *round,
                host: host.0,
            },
            CtrlMsg::Isolate { link } => WireCtrl::Isolate { link: link.0 },
            CtrlMsg::Departed { host, last } => WireCtrl::Departed {
                host: host.0,
                last: last.map(Timestamp::raw),
            },
            CtrlMsg::Depart { link } => WireCtrl::Depart { link: link.0 },
            CtrlMsg::CallbackTaken { round, host } => WireCtrl::CallbackTaken {
                round: *round,
                host: host.0,
            },
            CtrlMsg::Resume { round, dead_links } => WireCtrl::Resume {
                round: *round,
                dead_links: dead_links.iter().map(|l| l.0).collect(),
            },
        }
    }
}

impl From<WireCtrl> for CtrlMsg {
    fn from(m: WireCtrl) -> CtrlMsg {
        let ts = Timestamp::new;
        match m {
            WireCtrl::LinkDown {
                reporter,
                link,
                last_commit,
            } => CtrlMsg::LinkDown {
                reporter: NodeId(reporter),
                link: LinkId(link),
                last_commit: last_commit.map(ts),
            },
            WireCtrl::Failure {
                round,
                failed,
                correct,
            } => CtrlMsg::Failure {
                round,
                failed: failed
                    .into_iter()
                    .map(|(p, t)| (ProcId(p), ts(t)))
                    .collect(),
                correct: correct.into_iter().map(NodeId).collect(),
            },
            WireCtrl::Recall {
                round,
                from,
                groups,
                unacked,
            } => CtrlMsg::Recall {
                round,
                from: NodeId(from),
                groups: groups
                    .into_iter()
                    .map(|(p, t)| (ProcId(p), ts(t)))
                    .collect(),
                unacked: unacked
                    .into_iter()
                    .map(|(s, d, psn, k)| (ProcId(s), ProcId(d), Psn(psn), k))
                    .collect(),
            },
            WireCtrl::RecallAck { round, from } => CtrlMsg::RecallAck {
                round,
                from: NodeId(from),
            },
            WireCtrl::Completed { round, host } => CtrlMsg::Completed {
                round,
                host: NodeId(host),
            },
            WireCtrl::Isolate { link } => CtrlMsg::Isolate { link: LinkId(link) },
            WireCtrl::Departed { host, last } => CtrlMsg::Departed {
                host: NodeId(host),
                last: last.map(ts),
            },
            WireCtrl::Depart { link } => CtrlMsg::Depart { link: LinkId(link) },
            WireCtrl::CallbackTaken { round, host } => CtrlMsg::CallbackTaken {
                round,
                host: NodeId(host),
            },
            WireCtrl::Resume { round, dead_links } => CtrlMsg::Resume {
                round,
                dead_links: dead_links.into_iter().map(LinkId).collect(),
            },
        }
    }
}

/// Most packets one [`WireRelay::Forward`] may carry (a host forwards one message's fragments,
/// or one batch of ACKs).
pub const FORWARD_PACKETS_MAX: usize = 4096;

/// `onepipe_proto::failure::RelayMsg` on the control connection: §5.2 controller forwarding
/// and receiver recovery. A forwarded packet is its wire encoding ([`Packet::encode`]) in
/// lowercase hex; ids are numbers and timestamps raw nanoseconds, as in [`WireCtrl`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum WireRelay {
    /// Data packets from host `from` for one receiver's host, or that host's ACKs back.
    Forward {
        /// The host (process) that sent them.
        from: u32,
        /// Each packet's wire encoding, in hex.
        packets: Vec<String>,
    },
    /// The controller to a process it declared failed: its failure timestamp.
    Failed {
        /// The failure timestamp.
        ts: u64,
    },
    /// A correct process recalled these scatterings (sender, timestamp).
    Recalled {
        /// (sender, timestamp).
        groups: Vec<(u32, u64)>,
    },
    /// A process told it failed asks to recover.
    RecoverRequest {
        /// The process.
        host: u32,
    },
    /// The controller's answer: every process declared failed and every recalled scattering.
    Settle {
        /// (process, failure timestamp).
        failed: Vec<(u32, u64)>,
        /// (sender, timestamp).
        recalled: Vec<(u32, u64)>,
    },
    /// A settled process asks to rejoin.
    Rejoin {
        /// The process.
        host: u32,
    },
    /// The controller to the aggregator at the head of `link`: is that input alive (and, with
    /// `apply`, take it back)?
    Admit {
        /// The graph link.
        link: u32,
        /// Take it back.
        apply: bool,
    },
    /// The aggregator's answer.
    Admitted {
        /// The graph link.
        link: u32,
        /// It spoke within the link timeout.
        alive: bool,
        /// The aggregator's best-effort output barrier.
        barrier: Option<u64>,
        /// Its commit output barrier.
        commit: Option<u64>,
    },
    /// The controller to a rejoining process: its new process ids, the least timestamp to use,
    /// and every process declared failed.
    Joined {
        /// The new ids, one per old one.
        procs: Vec<u32>,
        /// The least timestamp.
        floor: u64,
        /// (process, failure timestamp).
        failed: Vec<(u32, u64)>,
    },
    /// The controller to every other correct process: `host` rejoined as `procs`.
    PeerJoined {
        /// The rejoined host (its old process id).
        host: u32,
        /// Its new ids.
        procs: Vec<u32>,
        /// Stamp nothing to them below this.
        floor: u64,
    },
}

fn pairs_out(v: &[(ProcId, Timestamp)]) -> Vec<(u32, u64)> {
    v.iter().map(|&(p, t)| (p.0, t.raw())).collect()
}

fn pairs_in(v: Vec<(u32, u64)>) -> Vec<(ProcId, Timestamp)> {
    v.into_iter()
        .map(|(p, t)| (ProcId(p), Timestamp::new(t)))
        .collect()
}

fn procs_in(v: Vec<u32>) -> Vec<ProcId> {
    v.into_iter().map(ProcId).collect()
}

impl WireRelay {
    /// The wire form of `msg`.
    pub fn of(msg: &RelayMsg) -> WireRelay {
        match msg {
            RelayMsg::Forward { from, packets } => WireRelay::Forward {
                from: from.0,
                packets: packets
                    .iter()
                    .map(|p| {
                        let mut b = Vec::with_capacity(p.encoded_len());
                        p.encode(&mut b);
                        hex(&b)
                    })
                    .collect(),
            },
            RelayMsg::Failed { ts } => WireRelay::Failed { ts: ts.raw() },
            RelayMsg::Recalled { groups } => WireRelay::Recalled {
                groups: pairs_out(groups),
            },
            RelayMsg::RecoverRequest { host } => WireRelay::RecoverRequest { host: host.0 },
            RelayMsg::Settle { failed, recalled } => WireRelay::Settle {
                failed: pairs_out(failed),
                recalled: pairs_out(recalled),
            },
            RelayMsg::Rejoin { host } => WireRelay::Rejoin { host: host.0 },
            RelayMsg::Admit { link, apply } => WireRelay::Admit {
                link: link.0,
                apply: *apply,
            },
            RelayMsg::Admitted {
                link,
                alive,
                barrier,
                commit,
            } => WireRelay::Admitted {
                link: link.0,
                alive: *alive,
                barrier: barrier.map(Timestamp::raw),
                commit: commit.map(Timestamp::raw),
            },
            RelayMsg::Joined {
                procs,
                floor,
                failed,
            } => WireRelay::Joined {
                procs: procs.iter().map(|p| p.0).collect(),
                floor: floor.raw(),
                failed: pairs_out(failed),
            },
            RelayMsg::PeerJoined { host, procs, floor } => WireRelay::PeerJoined {
                host: host.0,
                procs: procs.iter().map(|p| p.0).collect(),
                floor: floor.raw(),
            },
        }
    }

    /// The relay it carries.
    ///
    /// # Errors
    /// A forward with too many packets, or one that is not hex of exactly one well-formed
    /// packet (the message names which).
    pub fn into_relay(self) -> Result<RelayMsg, String> {
        let ts = Timestamp::new;
        Ok(match self {
            WireRelay::Forward { from, packets } => {
                if packets.len() > FORWARD_PACKETS_MAX {
                    return Err(format!(
                        "{} packets in one forward, at most {FORWARD_PACKETS_MAX}",
                        packets.len()
                    ));
                }
                let packets = packets
                    .iter()
                    .enumerate()
                    .map(|(i, h)| {
                        let bytes = unhex(h).ok_or(format!("packet {i}: not hex"))?;
                        match Packet::decode(&bytes) {
                            Ok((p, used)) if used == bytes.len() => Ok(p),
                            Ok(_) => Err(format!("packet {i}: trailing bytes")),
                            Err(e) => Err(format!("packet {i}: {e:?}")),
                        }
                    })
                    .collect::<Result<Vec<Packet>, String>>()?;
                RelayMsg::Forward {
                    from: NodeId(from),
                    packets,
                }
            }
            WireRelay::Failed { ts: t } => RelayMsg::Failed { ts: ts(t) },
            WireRelay::Recalled { groups } => RelayMsg::Recalled {
                groups: pairs_in(groups),
            },
            WireRelay::RecoverRequest { host } => RelayMsg::RecoverRequest { host: NodeId(host) },
            WireRelay::Settle { failed, recalled } => RelayMsg::Settle {
                failed: pairs_in(failed),
                recalled: pairs_in(recalled),
            },
            WireRelay::Rejoin { host } => RelayMsg::Rejoin { host: NodeId(host) },
            WireRelay::Admit { link, apply } => RelayMsg::Admit {
                link: LinkId(link),
                apply,
            },
            WireRelay::Admitted {
                link,
                alive,
                barrier,
                commit,
            } => RelayMsg::Admitted {
                link: LinkId(link),
                alive,
                barrier: barrier.map(ts),
                commit: commit.map(ts),
            },
            WireRelay::Joined {
                procs,
                floor,
                failed,
            } => RelayMsg::Joined {
                procs: procs_in(procs),
                floor: ts(floor),
                failed: pairs_in(failed),
            },
            WireRelay::PeerJoined { host, procs, floor } => RelayMsg::PeerJoined {
                host: NodeId(host),
                procs: procs_in(procs),
                floor: ts(floor),
            },
        })
    }
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(2 * bytes.len());
    for &b in bytes {
        s.push(DIGITS[usize::from(b >> 4)] as char);
        s.push(DIGITS[usize::from(b & 15)] as char);
    }
    s
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    let digit = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    let s = s.as_bytes();
    if s.len() % 2 == 1 {
        return None;
    }
    s.chunks(2)
        .map(|pair| Some(digit(pair[0])? << 4 | digit(pair[1])?))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::LocalLayout;

    fn generated(hosts: u32, pph: u32, layers: u8) -> Cluster {
        Cluster::generate(&LocalLayout {
            hosts,
            procs_per_host: pph,
            layers,
            ..LocalLayout::default()
        })
        .unwrap()
    }

    #[test]
    fn a_two_layer_cluster_is_a_leaf_spine_whose_links_match_the_aggregators_ports_3_1() {
        let c = generated(4, 2, 2);
        let lt = LiveTopology::of(&c).unwrap();
        let topo = lt.topology();
        assert_eq!(topo.hosts(), 8);
        let tor1 = c.aggregator_index("tor-1").unwrap();
        // tor-1's up half hears processes 4..8 on ports 0..4: their uplinks.
        for port in 0..4 {
            let l = lt.input_link(tor1, AggHalf::Up, PortId(port)).unwrap();
            assert_eq!(l, topo.uplink(4 + port));
            assert_eq!(lt.input_port(tor1, l), Some((AggHalf::Up, PortId(port))));
            assert_eq!(lt.aggregator_of(lt.link_head(l).unwrap()), Some(tor1));
        }
        // Its down half hears the loopback and the spine; every process's downlink leaves it.
        let from_spine = lt.input_link(tor1, AggHalf::Down, PortId(1)).unwrap();
        let spine = c.aggregator_index("spine-0").unwrap();
        assert_eq!(
            lt.aggregator_of(topo.link(from_spine).from),
            Some(spine),
            "port 1 of a down half is the parent"
        );
        assert_eq!(
            lt.aggregator_of(topo.link(topo.downlink(5)).from),
            Some(tor1)
        );
        // The spine's port 1 is tor-1's up half.
        let l = lt.input_link(spine, AggHalf::Up, PortId(1)).unwrap();
        assert_eq!(lt.aggregator_of(topo.link(l).from), Some(tor1));
        assert_eq!(lt.input_link(spine, AggHalf::Down, PortId(0)), None);
    }

    /// Every graph link enters exactly one (aggregator, half, port) or is a process's
    /// downlink, and each mapping names the aggregator the link enters.
    fn assert_maps_every_link(c: &Cluster, what: &str) {
        let lt = LiveTopology::of(c).unwrap();
        let topo = lt.topology();
        let mut seen = vec![0; topo.links().len()];
        for (a, spec) in c.aggregators.iter().enumerate() {
            let below = (c.attached(&spec.name).len() + c.children(&spec.name).len()) as u32;
            let mut ports: Vec<(AggHalf, u32)> = (0..below).map(|p| (AggHalf::Up, p)).collect();
            if spec.parent.is_some() {
                ports.extend([(AggHalf::Down, 0), (AggHalf::Down, 1)]);
            }
            for (half, port) in ports {
                let l = lt
                    .input_link(a, half, PortId(port))
                    .unwrap_or_else(|| panic!("{what}: {} {half:?} {port}", spec.name));
                assert_eq!(lt.aggregator_of(lt.link_head(l).unwrap()), Some(a));
                assert_eq!(lt.input_port(a, l), Some((half, PortId(port))));
                // Where it comes from, by the live port order: attached processes, children,
                // then (down half) the loopback and the parent.
                let from = topo.link(l).from;
                let attached = c.attached(&spec.name);
                let children = c.children(&spec.name);
                let expected = match (half, port as usize) {
                    (AggHalf::Up, i) if i < attached.len() => topo.host_node(attached[i]),
                    (AggHalf::Up, i) => {
                        let child = c.aggregator_index(&children[i - attached.len()].name);
                        lt.nodes_of(child.unwrap())[0]
                    }
                    (AggHalf::Down, 0) => lt.nodes_of(a)[0],
                    (AggHalf::Down, _) => {
                        let parent = c.aggregator_index(spec.parent.as_deref().unwrap());
                        *lt.nodes_of(parent.unwrap()).last().unwrap()
                    }
                };
                assert_eq!(from, expected, "{what}: {} {half:?} {port}", spec.name);
                seen[l.index()] += 1;
            }
        }
        for p in 0..c.procs() {
            seen[lt.downlink(p).unwrap().index()] += 1;
        }
        assert!(seen.iter().all(|&n| n == 1), "{what}: {seen:?}");
    }

    #[test]
    fn every_tree_maps_each_graph_link_to_exactly_one_input_3_1() {
        for (hosts, pph, layers) in [(3, 1, 1), (4, 2, 2), (5, 1, 2), (8, 2, 3), (11, 1, 3)] {
            let c = Cluster::generate(&LocalLayout {
                hosts,
                procs_per_host: pph,
                layers,
                ..LocalLayout::default()
            })
            .unwrap();
            assert_maps_every_link(&c, &format!("{hosts}x{pph}, {layers} layers"));
        }
        // Any tree a cluster file describes: a process on the root, racks of unequal size.
        let mut odd = generated(6, 1, 2);
        odd.processes[5].aggregator = "spine-0".into();
        odd.processes[1].aggregator = "tor-2".into();
        assert_maps_every_link(&odd, "odd");
        // Three layers: agg-1's down half hears the core on port 1, and tor-2 is its first child.
        let c = generated(8, 1, 3);
        let lt = LiveTopology::of(&c).unwrap();
        let agg1 = c.aggregator_index("agg-1").unwrap();
        let core = c.aggregator_index("core-0").unwrap();
        let l = lt.input_link(agg1, AggHalf::Down, PortId(1)).unwrap();
        assert_eq!(lt.aggregator_of(lt.topology().link(l).from), Some(core));
        let l = lt.input_link(agg1, AggHalf::Up, PortId(0)).unwrap();
        assert_eq!(
            lt.aggregator_of(lt.topology().link(l).from),
            c.aggregator_index("tor-2")
        );
    }

    #[test]
    fn one_aggregator_is_one_node_for_all_its_processes() {
        let c = generated(3, 1, 1);
        let lt = LiveTopology::of(&c).unwrap();
        assert_eq!(lt.topology().hosts(), 3);
        assert_eq!(
            lt.input_link(0, AggHalf::Up, PortId(2)),
            Some(lt.topology().uplink(2))
        );
        // A short last rack is a tree like any other.
        assert!(LiveTopology::of(&generated(5, 1, 2)).is_ok());
    }

    #[test]
    fn a_forward_survives_json_and_bad_packets_are_errors_not_panics() {
        use onepipe_proto::wire::{flags, DataHeader, DataPacket};
        let data = Packet::Data(DataPacket {
            header: DataHeader {
                flags: flags::END_OF_MESSAGE,
                frag: 0,
                ts: Timestamp::new(5),
                barrier: Timestamp::new(4),
                commit: Timestamp::new(3),
                psn: Psn(7),
                src: ProcId(1),
                dst: ProcId(2),
            },
            payload: bytes::Bytes::from_static(b"hello"),
        });
        let msg = RelayMsg::Forward {
            from: NodeId(1),
            packets: vec![data.clone(), data],
        };
        let wire = WireRelay::of(&msg);
        let json = serde_json::to_string(&wire).unwrap();
        let back: WireRelay = serde_json::from_str(&json).unwrap();
        assert_eq!(back.into_relay().unwrap(), msg);
        let WireRelay::Forward { packets, .. } = wire else {
            unreachable!("a forward")
        };
        let bad = |p: &str| {
            WireRelay::Forward {
                from: 1,
                packets: vec![packets[0].clone(), p.to_string()],
            }
            .into_relay()
            .unwrap_err()
        };
        assert!(bad("zz").contains("packet 1: not hex"));
        assert!(bad("abc").contains("not hex"));
        assert!(bad("").contains("packet 1"));
        assert!(bad(&format!("{}00", packets[0])).contains("trailing"));
        assert!(bad(&packets[0][..20]).contains("packet 1"));
        let many = WireRelay::Forward {
            from: 1,
            packets: vec![packets[0].clone(); FORWARD_PACKETS_MAX + 1],
        };
        assert!(many.into_relay().unwrap_err().contains("at most"));
    }

    #[test]
    fn every_recovery_relay_survives_json_both_ways_5_2() {
        let t = Timestamp::new;
        let msgs = [
            RelayMsg::Failed { ts: t(9) },
            RelayMsg::Recalled {
                groups: vec![(ProcId(1), t(5)), (ProcId(2), t(6))],
            },
            RelayMsg::RecoverRequest { host: NodeId(3) },
            RelayMsg::Settle {
                failed: vec![(ProcId(3), t(7))],
                recalled: vec![(ProcId(1), t(5))],
            },
            RelayMsg::Rejoin { host: NodeId(3) },
            RelayMsg::Admit {
                link: LinkId(4),
                apply: true,
            },
            RelayMsg::Admitted {
                link: LinkId(4),
                alive: true,
                barrier: Some(t(11)),
                commit: None,
            },
            RelayMsg::Joined {
                procs: vec![ProcId(8)],
                floor: t(12),
                failed: vec![(ProcId(3), t(7))],
            },
            RelayMsg::PeerJoined {
                host: NodeId(3),
                procs: vec![ProcId(8)],
                floor: t(12),
            },
        ];
        for m in msgs {
            let json = serde_json::to_string(&WireRelay::of(&m)).unwrap();
            let back: WireRelay = serde_json::from_str(&json).unwrap();
            assert_eq!(back.into_relay().unwrap(), m, "{json}");
        }
    }

    #[test]
    fn control_messages_survive_json_both_ways() {
        let msgs = [
            CtrlMsg::LinkDown {
                reporter: NodeId(9),
                link: LinkId(3),
                last_commit: Some(Timestamp::new(77)),
            },
            CtrlMsg::Failure {
                round: 2,
                failed: vec![(ProcId(3), Timestamp::new(1_000))],
                correct: vec![NodeId(0), NodeId(4)],
            },
            CtrlMsg::Recall {
                round: 2,
                from: NodeId(1),
                groups: vec![(ProcId(1), Timestamp::new(5))],
                unacked: vec![(ProcId(1), ProcId(3), Psn(7), 2)],
            },
            CtrlMsg::RecallAck {
                round: 2,
                from: NodeId(4),
            },
            CtrlMsg::Completed {
                round: 2,
                host: NodeId(4),
            },
            CtrlMsg::Resume {
                round: 2,
                dead_links: vec![LinkId(3)],
            },
            CtrlMsg::Isolate { link: LinkId(4) },
            CtrlMsg::Departed {
                host: NodeId(2),
                last: Some(Timestamp::new(12)),
            },
            CtrlMsg::Depart { link: LinkId(5) },
            CtrlMsg::CallbackTaken {
                round: 2,
                host: NodeId(1),
            },
        ];
        for m in msgs {
            let json = serde_json::to_string(&WireCtrl::from(&m)).unwrap();
            let back: WireCtrl = serde_json::from_str(&json).unwrap();
            assert_eq!(CtrlMsg::from(back), m, "{json}");
        }
        for junk in [
            r#"{"kind":"link_down"}"#,
            r#"{"kind":"resume","round":-1,"dead_links":[]}"#,
        ] {
            assert!(serde_json::from_str::<WireCtrl>(junk).is_err());
        }
    }
}
