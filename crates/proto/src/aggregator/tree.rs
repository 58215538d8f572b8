//! A tree of aggregators, described once, and the roles of its nodes built from the description
//! alone: what the live runtime runs on each aggregator daemon and what the simulator's tree
//! fabric runs on each simulated aggregator.
//!
//! [`AggTree`] is the description: per aggregator its parent (an index into the same list) and
//! the processes attached to it in port order; its children follow in list order; the number
//! of processes; the bound on process ids (rejoined processes take ids above the first ones,
//! §5.2). An aggregator's ports are its peers — its attached processes, then its children,
//! then its parent — one port per peer, both directions ([`Aggregator`]'s port order).
//!
//! [`AggTree::role`] builds aggregator `a`'s [`Aggregator`]: its routing tables (down: each
//! process below to the port that leads to it; up: a process below turns here, anyone else
//! climbs), each half's [`SwitchConfig`] — made by the caller's rule from the half's beacon
//! node id, its depth in hops from the hosts (§4.2: timed beacons are phased by depth so one
//! wave climbs and descends per interval) and its port counts — with its inputs named as the
//! controller's routing graph names them, so the halves' §5.2 `LinkDown` reports name the
//! right links. [`TreeGraph`] is that graph: [`Topology::tree`] over the same description, each
//! process a host of its own, with the maps between the graph's links and nodes and the
//! aggregators' (half, input port).
//!
//! What it is not: a parser of cluster files or a placer of processes on machines — the
//! runtime's cluster file and the simulator's configuration say who is where; this is what
//! both build from.

use super::{Aggregator, Half, ProcessRouter};
use crate::ids::{LinkId, NodeId, PortId, ProcId};
use crate::switch::SwitchConfig;
use crate::time::Instant;
use crate::topology::{Topology, TopologyError, TreeSwitch};

use std::collections::BTreeMap;
use std::sync::Arc;

/// A tree of aggregators: who is attached where. See the module docs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AggTree {
    /// Per aggregator: its parent and its attached processes, in port order.
    aggs: Vec<TreeSwitch>,
    /// Per aggregator: its children, in port order (list order).
    children: Vec<Vec<usize>>,
    /// Processes `0..procs` are the tree's first ones.
    procs: u32,
    /// Process ids the routing tables have room for (rejoined processes' ids too).
    proc_ids_max: u32,
}

/// The routing graph of a tree of aggregators and its id maps. See the module docs.
#[derive(Clone, Debug)]
pub struct TreeGraph {
    topo: Arc<Topology>,
    /// Per aggregator: (half, that half's input port) → graph link.
    inputs: Vec<BTreeMap<(Half, u32), LinkId>>,
    /// Per aggregator: the graph nodes it stands for (the halves, or the root's one node).
    nodes: Vec<Vec<NodeId>>,
}

impl AggTree {
    /// The tree of `aggs` (per aggregator: its parent, its attached processes in port order)
    /// over processes `0..procs`, its routing tables with room for `proc_ids_max` ids.
    ///
    /// # Panics
    /// A parent out of range, or fewer ids than processes: a bug of the caller (a cluster file
    /// or a configuration is checked before its tree is described).
    pub fn new(procs: u32, proc_ids_max: u32, aggs: Vec<TreeSwitch>) -> AggTree {
        assert!(proc_ids_max >= procs, "room for every process's id");
        let mut children = vec![Vec::new(); aggs.len()];
        for (a, spec) in aggs.iter().enumerate() {
            if let Some(p) = spec.parent {
                assert!(p < aggs.len() && p != a, "aggregator {a}'s parent {p}");
                children[p].push(a);
            }
        }
        AggTree {
            aggs,
            children,
            procs,
            proc_ids_max,
        }
    }

    /// Number of aggregators.
    pub fn len(&self) -> usize {
        self.aggs.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.aggs.is_empty()
    }

    /// Number of the tree's first processes.
    pub fn procs(&self) -> u32 {
        self.procs
    }

    /// Process ids the routing tables have room for.
    pub fn proc_ids_max(&self) -> u32 {
        self.proc_ids_max
    }

    /// Aggregator `a`'s parent (`None` at the root).
    pub fn parent(&self, a: usize) -> Option<usize> {
        self.aggs[a].parent
    }

    /// The processes attached to aggregator `a`, in port order.
    pub fn attached(&self, a: usize) -> &[u32] {
        &self.aggs[a].hosts
    }

    /// Aggregator `a`'s children, in port order.
    pub fn children(&self, a: usize) -> &[usize] {
        &self.children[a]
    }

    /// Aggregator `a`'s peers below: its attached processes, then its children (ports
    /// `0..below`; the parent's port, if any, is `below`).
    pub fn below(&self, a: usize) -> usize {
        self.aggs[a].hosts.len() + self.children[a].len()
    }

    /// The aggregator process `p` is attached to.
    pub fn aggregator_of_proc(&self, p: u32) -> Option<usize> {
        self.aggs.iter().position(|s| s.hosts.contains(&p))
    }

    /// Every process below aggregator `a` (attached to it or to an aggregator below it), by id.
    pub fn subtree_procs(&self, a: usize) -> Vec<u32> {
        let mut v = Vec::new();
        let mut stack = vec![a];
        let mut visited = vec![false; self.aggs.len()];
        while let Some(at) = stack.pop() {
            if std::mem::replace(&mut visited[at], true) {
                continue;
            }
            v.extend_from_slice(&self.aggs[at].hosts);
            stack.extend_from_slice(&self.children[at]);
        }
        v.sort_unstable();
        v.dedup();
        v
    }

    /// Hops from the hosts up to aggregator `a`'s up half (the root's one node): 1 for an
    /// aggregator with only processes below it.
    pub fn up_depth(&self, a: usize) -> u32 {
        1 + self.children[a]
            .iter()
            .map(|&c| self.up_depth(c))
            .max()
            .unwrap_or(0)
    }

    /// Hops from the hosts to aggregator `a`'s down half: one more than the later of its own
    /// up half and its parent's down half (the root has no down half: its depth is its up
    /// one).
    pub fn down_depth(&self, a: usize) -> u32 {
        let up = self.up_depth(a);
        match self.aggs[a].parent {
            None => up,
            Some(p) => 1 + up.max(self.down_depth(p)),
        }
    }

    /// The node id half `half` of aggregator `a` beacons as (the root's one node is its up
    /// half): ids after the processes', two per aggregator.
    pub fn node(&self, a: usize, half: Half) -> NodeId {
        let h = match half {
            Half::Up => 0,
            Half::Down => 1,
        };
        NodeId(self.procs + 2 * a as u32 + h)
    }

    /// The routing graph of the tree ([`Topology::tree`]).
    ///
    /// # Errors
    /// The description is not one tree over processes `0..procs`, each attached once, or the
    /// graph would be too large.
    pub fn graph(&self) -> Result<TreeGraph, TopologyError> {
        TreeGraph::new(self.procs, &self.aggs)
    }

    /// Where each process below aggregator `a` is reached going down: its own port, or its
    /// child's.
    pub fn down_router(&self, a: usize) -> ProcessRouter {
        let mut r = ProcessRouter::with_ids(self.proc_ids_max);
        for (i, &p) in self.aggs[a].hosts.iter().enumerate() {
            r.set(ProcId(p), PortId(i as u32));
        }
        let attached = self.aggs[a].hosts.len();
        for (i, &c) in self.children[a].iter().enumerate() {
            let port = PortId((attached + i) as u32);
            for p in self.subtree_procs(c) {
                r.set(ProcId(p), port);
            }
        }
        r
    }

    /// Aggregator `a`'s up half's routing: a process below turns here (port 0, the loopback),
    /// anyone else climbs (port 1).
    pub fn up_router(&self, a: usize) -> ProcessRouter {
        let mut r = ProcessRouter::with_ids(self.proc_ids_max);
        let mine = self.subtree_procs(a);
        for p in 0..self.procs {
            let port = if mine.binary_search(&p).is_ok() { 0 } else { 1 };
            r.set(ProcId(p), PortId(port));
        }
        r
    }

    /// Aggregator `a`'s role at local time `now`: the root's one node, or the split halves of
    /// one below it (§3.1). `config(node, depth, inputs, outputs)` is the caller's rule for a
    /// half's [`SwitchConfig`]; with `graph` each half's inputs are named as the graph names
    /// them (without, nothing is reported, and there is no §5.2 procedure either).
    ///
    /// # Panics
    /// `a` is not an aggregator of the tree, or `config` gives a half other port counts.
    pub fn role(
        &self,
        a: usize,
        graph: Option<&TreeGraph>,
        now: Instant,
        config: impl Fn(NodeId, u32, usize, usize) -> SwitchConfig,
    ) -> Aggregator {
        let below = self.below(a);
        let down_router = Arc::new(self.down_router(a));
        let named = |cfg: SwitchConfig, half: Half| match graph {
            Some(g) => g.name_inputs(cfg, a, half),
            None => cfg,
        };
        if self.aggs[a].parent.is_none() {
            let cfg = config(self.node(a, Half::Up), self.up_depth(a), below, below);
            let cfg = named(cfg, Half::Up);
            return Aggregator::root(cfg, down_router, self.procs, now);
        }
        // Up: inputs are the peers below; output 0 turns here (loopback), 1 climbs.
        let up_cfg = config(self.node(a, Half::Up), self.up_depth(a), below, 2);
        let up_cfg = named(up_cfg, Half::Up);
        // Down: input 0 is the loopback, 1 the parent; outputs are the peers below.
        let down_cfg = config(self.node(a, Half::Down), self.down_depth(a), 2, below);
        let down_cfg = named(down_cfg, Half::Down);
        let up_router = Arc::new(self.up_router(a));
        Aggregator::split(up_cfg, up_router, down_cfg, down_router, self.procs, now)
    }
}

/// The aggregators of a layered tree over hosts `0..hosts`, as `onepipe up --layers` lays out
/// a local cluster and the simulator's tree fabric lays out its hosts: one layer is `tor-0`
/// over every host; two are racks of `rack_size` hosts under `tor-N`, joined by `spine-0`;
/// three group the racks `pod_racks` to a pod under `agg-N`, the pods joined by `core-0`
/// (edge, aggregation and core layers). Host `h` is attached to `tor-{h / rack_size}`. In list
/// order: the tors, then `spine-0`, or the `agg-N` and `core-0`; each with its name.
///
/// # Panics
/// No hosts, a zero rack or pod size, or layers other than 1, 2 or 3: the caller checks them.
pub fn layered(
    hosts: u32,
    layers: u8,
    rack_size: u32,
    pod_racks: u32,
) -> Vec<(String, TreeSwitch)> {
    assert!(
        hosts > 0 && rack_size > 0 && pod_racks > 0,
        "a tree with hosts, racks and pods"
    );
    assert!((1..=3).contains(&layers), "1, 2 or 3 layers");
    let rack_size = if layers == 1 { hosts } else { rack_size };
    let racks = hosts.div_ceil(rack_size);
    let pods = racks.div_ceil(pod_racks);
    // The tors come first; the layers above them after, the root last.
    let (spine, aggs_first) = (racks as usize, racks as usize);
    let core = racks as usize + pods as usize;
    let mut tree: Vec<(String, TreeSwitch)> = (0..racks)
        .map(|r| {
            let parent = match layers {
                1 => None,
                2 => Some(spine),
                _ => Some(aggs_first + (r / pod_racks) as usize),
            };
            let hosts = (r * rack_size..((r + 1) * rack_size).min(hosts)).collect();
            (format!("tor-{r}"), TreeSwitch { parent, hosts })
        })
        .collect();
    let top = |name: String, parent: Option<usize>| {
        let spec = TreeSwitch {
            parent,
            hosts: Vec::new(),
        };
        (name, spec)
    };
    match layers {
        1 => {}
        2 => tree.push(top("spine-0".into(), None)),
        _ => {
            tree.extend((0..pods).map(|p| top(format!("agg-{p}"), Some(core))));
            tree.push(top("core-0".into(), None));
        }
    }
    tree
}

impl TreeGraph {
    /// The graph of the tree of `aggs` over processes `0..procs` ([`Topology::tree`]).
    ///
    /// # Errors
    /// `aggs` is not one tree over `0..procs`, each attached once, or is too large.
    pub fn new(procs: u32, aggs: &[TreeSwitch]) -> Result<TreeGraph, TopologyError> {
        let (topo, links) = Topology::tree(procs, aggs)?;
        // An aggregator's up inputs are its attached processes, then its children in list
        // order — its ports' order; the down half's are the loopback, then the parent.
        let inputs = (0..aggs.len())
            .map(|a| {
                let up = links.up_inputs[a].iter().enumerate();
                let down = links.down_inputs[a].iter().enumerate();
                up.map(|(p, &l)| ((Half::Up, p as u32), l))
                    .chain(down.map(|(p, &l)| ((Half::Down, p as u32), l)))
                    .collect()
            })
            .collect();
        Ok(TreeGraph {
            topo: Arc::new(topo),
            inputs,
            nodes: links.nodes,
        })
    }

    /// `cfg` with its inputs as this graph names them for `half` of aggregator `a`, and the
    /// half's graph node; unchanged if an input has no link here.
    fn name_inputs(&self, mut cfg: SwitchConfig, a: usize, half: Half) -> SwitchConfig {
        let links: Option<Vec<LinkId>> = (0..cfg.inputs as u32)
            .map(|p| self.input_link(a, half, PortId(p)))
            .collect();
        if let Some(links) = links {
            cfg.graph_node = links.first().and_then(|&l| self.link_head(l));
            cfg.input_links = links;
        }
        cfg
    }

    /// The routing graph.
    pub fn topology(&self) -> &Arc<Topology> {
        &self.topo
    }

    /// The graph link that enters input `port` of `half` of aggregator `agg`.
    pub fn input_link(&self, agg: usize, half: Half, port: PortId) -> Option<LinkId> {
        self.inputs.get(agg)?.get(&(half, port.0)).copied()
    }

    /// The aggregator `agg`'s (half, input port) that `link` enters, if it enters `agg`.
    pub fn input_port(&self, agg: usize, link: LinkId) -> Option<(Half, PortId)> {
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

    /// The aggregator a graph switch node belongs to.
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Two racks of two processes under a spine: tor-0 (0), tor-1 (1), spine (2).
    fn leaf_spine() -> AggTree {
        let tor = |hosts: Vec<u32>| TreeSwitch {
            parent: Some(2),
            hosts,
        };
        let spine = TreeSwitch {
            parent: None,
            hosts: vec![],
        };
        AggTree::new(4, 8, vec![tor(vec![0, 1]), tor(vec![2, 3]), spine])
    }

    #[test]
    fn a_layered_tree_puts_racks_under_tors_and_pods_under_aggs() {
        let names = |t: &[(String, TreeSwitch)]| -> Vec<String> {
            t.iter().map(|(n, _)| n.clone()).collect()
        };
        let one = layered(5, 1, 2, 2);
        assert_eq!(names(&one), ["tor-0"]);
        assert_eq!(one[0].1.hosts, [0, 1, 2, 3, 4]);
        let two = layered(5, 2, 2, 2);
        assert_eq!(names(&two), ["tor-0", "tor-1", "tor-2", "spine-0"]);
        assert_eq!(two[2].1.hosts, [4], "a short last rack");
        assert_eq!(two[1].1.parent, Some(3));
        let three = layered(8, 3, 2, 2);
        assert_eq!(
            names(&three),
            ["tor-0", "tor-1", "tor-2", "tor-3", "agg-0", "agg-1", "core-0"]
        );
        assert_eq!(three[2].1.parent, Some(5));
        assert_eq!(three[5].1.parent, Some(6));
        let tree = AggTree::new(8, 8, three.into_iter().map(|(_, s)| s).collect());
        assert_eq!(tree.up_depth(6), 3);
        assert!(tree.graph().is_ok());
    }

    #[test]
    fn depths_phase_one_wave_up_and_down_4_2() {
        let t = leaf_spine();
        assert_eq!((t.up_depth(0), t.down_depth(0)), (1, 3));
        assert_eq!((t.up_depth(2), t.down_depth(2)), (2, 2));
        assert_eq!(t.below(2), 2);
        assert_eq!(t.subtree_procs(2), [0, 1, 2, 3]);
    }

    #[test]
    fn routers_send_a_process_below_down_its_port_and_others_up_3_1() {
        let t = leaf_spine();
        let down = t.down_router(2);
        assert_eq!(down.port_of(ProcId(1)), Some(PortId(0)));
        assert_eq!(down.port_of(ProcId(3)), Some(PortId(1)));
        let up = t.up_router(1);
        assert_eq!(up.port_of(ProcId(2)), Some(PortId(0)), "turns here");
        assert_eq!(up.port_of(ProcId(0)), Some(PortId(1)), "climbs");
        let tor = t.down_router(1);
        assert_eq!(tor.port_of(ProcId(3)), Some(PortId(1)));
        assert_eq!(tor.port_of(ProcId(0)), None);
    }

    #[test]
    fn each_halfs_inputs_are_the_graphs_links_into_it_5_2() {
        let t = leaf_spine();
        let g = t.graph().unwrap();
        let cfg = |n, _d, i, o| SwitchConfig::new(n, crate::switch::SwitchMode::Chip, i, o);
        let tor = t.role(1, Some(&g), Instant(0), cfg);
        assert_eq!(tor.inputs_len(), 3);
        let up = g.input_link(1, Half::Up, PortId(1)).unwrap();
        assert_eq!(up, g.topology().uplink(3));
        let from_spine = g.input_link(1, Half::Down, PortId(1)).unwrap();
        assert_eq!(g.aggregator_of(g.topology().link(from_spine).from), Some(2));
        assert_eq!(g.input_port(1, from_spine), Some((Half::Down, PortId(1))));
        assert_eq!(t.node(1, Half::Down), NodeId(4 + 3));
    }
}
