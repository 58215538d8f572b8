//! The tree fabric (`--fabric tree`): a tree of aggregators, each one simulated node running
//! exactly the live runtime's role, [`Aggregator`] (the up and down halves of §3.1 with one
//! port per peer), built by the same builder the runtime uses
//! ([`onepipe_proto::aggregator::tree::AggTree`]) from the layout `onepipe up --layers` uses.
//!
//! **Links.** The engine's links are the routing graph's ([`TreeGraph`], `Topology::tree`), so
//! the controller, the hosts' §5.2 reports, `--cut` and the checkers name links as on the
//! Clos; each link that enters an aggregator is led to its role and its peer port (a process's
//! uplink to the process's port, a child's up link to the child's port, the parent's down link
//! to the parent's port), and each port's output to the graph link it stands for. The up
//! half's loopback into the down half is the role's own, so its graph link never carries a
//! packet.
//!
//! **Costs.** An aggregator is a role without a core, as a Clos switch is: every input runs at
//! once through [`Node`] ([`drive::turn_in`]), with no forwarding fast path; each half's timed
//! beacons carry the incarnation's beacon processing delay (`NetworkConfig::beacon_delay`:
//! none in chip mode, `--rep-delay` plus `--rep-rtt` as a host representative) and are phased
//! by the half's depth as the Clos switches' are.
//!
//! **Faults** are the engine's, outside the role: loss and reordering on links, cut links,
//! crashed and restarted hosts, clock skew and steps. The controller addresses an aggregator
//! by its graph nodes; as the live controller does, a control message goes to it once, by its
//! first node, and a relay (`Admit`) by whichever node it names.

use super::*;
use onepipe_proto::aggregator::tree::{AggTree, TreeGraph};
use onepipe_proto::aggregator::{Aggregator, Half};
use onepipe_proto::LinkId;

/// The tree fabric's part of a run: the aggregators (aggregator `a` is role `hosts + a`), the
/// graph their inputs are named by, and each one's ports' output links.
pub(super) struct TreeFabric {
    pub(super) aggs: Vec<Aggregator>,
    pub(super) graph: TreeGraph,
    /// Aggregator `a`'s port `p` sends on link `out_links[a][p]`.
    out_links: Vec<Vec<u32>>,
}

/// The tree fabric built, before its links are: the tree, its graph, the aggregators and their
/// engine roles (clocks, no core).
pub(super) struct TreeBuilt {
    tree: AggTree,
    graph: TreeGraph,
    aggs: Vec<Aggregator>,
    roles: Vec<RoleSt>,
}

impl TreeBuilt {
    /// The aggregators of `cfg`'s tree (`None` on the Clos), one process per host, each
    /// half's configuration the Clos switches' rule ([`build::switch_config`]) at its depth.
    pub(super) fn of(cfg: &SimConfig, clock_seed: u64) -> Result<Option<TreeBuilt>, String> {
        let Some(layout) = cfg.net.tree_layout() else {
            return Ok(None);
        };
        let hosts = cfg.net.hosts().map_err(|e| e.to_string())?;
        let ids = build::proc_ids_max(cfg, hosts)?;
        let tree = AggTree::new(hosts, ids, layout.into_iter().map(|l| l.1).collect());
        let graph = tree.graph().map_err(|e| e.to_string())?;
        let hop_ns = build::beacon_hop_ns(cfg);
        let clock_params = engine::clock_params(cfg);
        let (mut aggs, mut roles) = (Vec::new(), Vec::new());
        for a in 0..tree.len() {
            let mut clock = Clock::new(clock_params, clock_seed, hosts + a as u32);
            let config = |node, depth, inputs, outputs| {
                build::switch_config(cfg, hop_ns, node, depth, inputs, outputs)
            };
            aggs.push(tree.role(a, Some(&graph), clock.local(0), config));
            roles.push(RoleSt::new(clock, None));
        }
        Ok(Some(TreeBuilt {
            tree,
            graph,
            aggs,
            roles,
        }))
    }

    /// The routing graph: the engine's topology.
    pub(super) fn topology(&self) -> Arc<Topology> {
        self.graph.topology().clone()
    }

    /// Appends the aggregators' engine roles to `roles` (after the hosts'), leads the engine's
    /// `links` (the graph's) into the aggregators' roles and ports, and tables each port's
    /// output link.
    pub(super) fn wire(self, roles: &mut Vec<RoleSt>, links: &mut [Link]) -> TreeFabric {
        let TreeBuilt {
            tree,
            graph,
            aggs,
            roles: agg_roles,
        } = self;
        let hosts = graph.topology().hosts();
        assert_eq!(
            roles.len(),
            hosts as usize,
            "the aggregators' roles follow the hosts'"
        );
        roles.extend(agg_roles);
        let link = |a: usize, half: Half, p: usize| {
            graph
                .input_link(a, half, PortId(p as u32))
                .expect("every port of a tree's aggregator is a graph link")
        };
        let mut out_links = Vec::with_capacity(tree.len());
        for (a, agg) in aggs.iter().enumerate() {
            let mut ins: Vec<LinkId> = (0..tree.below(a)).map(|p| link(a, Half::Up, p)).collect();
            let mut outs: Vec<LinkId> = tree
                .attached(a)
                .iter()
                .map(|&h| graph.downlink(h).expect("an attached host"))
                .collect();
            outs.extend(tree.children(a).iter().map(|&c| link(c, Half::Down, 1)));
            if let Some(parent) = tree.parent(a) {
                ins.push(link(a, Half::Down, 1));
                let at = tree.children(parent).iter().position(|&c| c == a);
                let at = at.expect("a child of its parent");
                outs.push(link(parent, Half::Up, tree.attached(parent).len() + at));
            }
            assert_eq!(ins.len(), agg.inputs_len(), "a port per peer");
            for (port, l) in ins.into_iter().enumerate() {
                let l = &mut links[l.index()];
                l.to = hosts + a as u32;
                l.to_port = port as u32;
            }
            out_links.push(outs.iter().map(|l| l.0).collect());
        }
        TreeFabric {
            aggs,
            graph,
            out_links,
        }
    }
}

impl TreeFabric {
    /// The aggregator role `role` is, if it is one.
    pub(super) fn agg_of_role(&self, role: u32) -> Option<usize> {
        let a = role.checked_sub(self.graph.topology().hosts())? as usize;
        (a < self.aggs.len()).then_some(a)
    }
}

impl<Q: EventQueue<Ev>> World<Q> {
    /// A packet reached aggregator role `role` on its port `port`.
    pub(super) fn tree_arrive(&mut self, t: SimTime, role: u32, port: u32, slot: u32) {
        let packet = self.take_packet(slot);
        let input = Input::Packet {
            port: PortId(port),
            packet,
        };
        self.agg_handle(t, role, input);
    }

    /// Aggregator role `role` takes `input` at true time `t`: the role's turn of the loop, its
    /// packets onto their ports' links and its §5.2 reports onto the management network, then
    /// its timer re-armed.
    pub(super) fn agg_handle(&mut self, t: SimTime, role: u32, input: Input<Packet, Mgmt>) {
        let fabric = self.proto.tree.as_ref().expect("a tree run");
        let a = fabric.agg_of_role(role).expect("an aggregator's role");
        let local = self.local(role, t);
        let input = Some((local, input));
        drive::turn_in(
            self,
            |w| &mut w.proto.tree.as_mut().expect("a tree run").aggs[a],
            input,
            |w, o| match o {
                Output::Send { port, packet } => {
                    let fabric = w.proto.tree.as_ref().expect("a tree run");
                    let link = fabric.out_links[a][port.index()];
                    w.transmit(link, packet, t);
                }
                Output::Mgmt { to, msg } => w.send_mgmt(t, to, msg),
                Output::Event(e) => match e {},
            },
        );
        if let Some(c) = self.proto.checker.as_mut() {
            let barrier = self.proto.tree.as_ref().map(|f| f.aggs[a].barrier());
            c.on_switch_barrier(t, a, barrier.flatten());
        }
        self.rearm(role);
    }

    /// A management message for graph node `n`, a half of an aggregator, handed to its role as
    /// the live controller sends it: a relay (`Admit`) to whichever half it names, a control
    /// message once per aggregator, by its first node (a `Resume` names every dead link, and
    /// both halves take it).
    pub(super) fn tree_ctrl(&mut self, t: SimTime, n: NodeId, msg: Mgmt) {
        let fabric = self.proto.tree.as_ref().expect("a tree run");
        let Some(a) = fabric.graph.aggregator_of(n) else {
            return;
        };
        if matches!(msg, Mgmt::Ctrl(_)) && fabric.graph.nodes_of(a).first() != Some(&n) {
            return;
        }
        let role = self.topo.hosts() + a as u32;
        self.agg_handle(t, role, Input::Mgmt(msg));
    }

    /// §5.2 rejoin: host `h`'s processes came back as `procs`; every aggregator routes them as
    /// it routes the host (as the live aggregators do on the controller's news).
    pub(super) fn tree_rejoined(&mut self, h: u32, procs: &[u32]) {
        let Some(fabric) = self.proto.tree.as_ref() else {
            return;
        };
        let procs: Vec<ProcId> = procs.iter().map(|&p| ProcId(p)).collect();
        for agg in &fabric.aggs {
            let routed = agg.rejoined(ProcId(h), &procs);
            assert!(
                routed,
                "rejoined ids within the routers' room (proc_ids_max)"
            );
        }
    }

    /// The tree fabric's aggregators (none on the Clos).
    pub fn aggregators(&self) -> impl Iterator<Item = &Aggregator> {
        self.proto.tree.iter().flat_map(|f| f.aggs.iter())
    }
}
